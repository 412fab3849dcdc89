"""Claude Code, the real CLI, uses jpfs through the README's ``.mcp.json`` (issue #14).

``claude -p`` runs in a jpfs workspace whose ``.mcp.json`` is the README's block with
only the documented placeholder replaced; its model is the local Messages API server
(``tests/messages_server.py``, streaming), which also answers jpfs's own sub-agent. The
scripted model loads ``mcp__jpfs__jp_query`` (through Claude Code's ToolSearch when the
tool is deferred), calls it, and repeats the sub-agent's answer; the test checks that
the answer went through Claude Code both ways and that the sub-agent's conversation is
on the record branch.

Claude Code is the npm package pinned in ``tests/clients/package.json`` and installed by
``make test`` (``npm ci`` in ``tests/clients``). Without it the test fails in CI and is
skipped elsewhere. Every connection Claude Code tries to open outside loopback goes to a
local proxy that refuses it, so the test never leaves the machine.
"""

from __future__ import annotations

import json
import os
import re
import socketserver
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import Result, rgit, wait_until, write_profile
from tests.messages_server import (
    JsonDict,
    MessagesServer,
    Response,
    content_text,
    system_text,
    text_reply,
    tool_results,
    tool_use_reply,
)

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
CLIENTS = ROOT / "tests" / "clients"
CLAUDE = CLIENTS / "node_modules" / ".bin" / "claude"

JP_QUERY = "mcp__jpfs__jp_query"
SUB_SYSTEM = "You are the sub-agent of the jpfs Claude Code client test."
SUB_MODEL = "client-test-model"
SUB_QUERY = "Which number answers the client test?"
ANSWER = "SUBAGENT-ANSWER-42"
PROFILE = f"""\
model = "{SUB_MODEL}"
provider = "anthropic"
description = "Answers the Claude Code client test."
max_tokens = 1024

[system]
role = "{SUB_SYSTEM}"

[onboarding]
enabled = false
"""


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def pinned_version() -> str:
    package = json.loads((CLIENTS / "package.json").read_text(encoding="utf-8"))
    return str(package["dependencies"]["@anthropic-ai/claude-code"])


@pytest.fixture
def claude() -> Path:
    """The pinned Claude Code binary: a failure in CI when it is missing, else a skip."""
    problem = None
    if not CLAUDE.exists():
        problem = f"Claude Code is not installed at {CLAUDE}"
    else:
        shown = subprocess.run(
            [str(CLAUDE), "--version"], capture_output=True, text=True, timeout=60, check=False
        )
        if shown.returncode != 0 or not shown.stdout.startswith(pinned_version()):
            problem = (
                f"{CLAUDE} --version gave {shown.returncode}: {shown.stdout!r} {shown.stderr!r}, "
                f"expected {pinned_version()} (tests/clients/package.json)"
            )
    if problem is None:
        return CLAUDE
    message = f"{problem}; install it with `make test` or `cd tests/clients && npm ci`"
    if in_ci():
        pytest.fail(message)
    pytest.skip(message)


class _Refuse(socketserver.StreamRequestHandler):
    server: _RefusingProxy

    def handle(self) -> None:
        self.request.settimeout(5)
        try:
            line = self.rfile.readline(8192).decode("latin-1").strip()
        except OSError:
            line = "(nothing read)"
        with self.server.lock:
            self.server.seen.append(line)
        try:
            self.wfile.write(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n")
        except OSError:
            pass


class _RefusingProxy(socketserver.ThreadingTCPServer):
    """An HTTP(S) proxy on loopback that refuses everything and notes what was asked."""

    daemon_threads = False
    block_on_close = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Refuse)
        self.lock = threading.Lock()
        self.seen: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def refusing_proxy() -> Iterator[_RefusingProxy]:
    proxy = _RefusingProxy()
    thread = threading.Thread(target=proxy.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield proxy
    finally:
        proxy.shutdown()
        thread.join()
        proxy.server_close()


def readme_mcp_json(repo: Path) -> str:
    """The README's ``.mcp.json`` block with ``/path/to/repo`` replaced, and nothing else."""
    text = README.read_text(encoding="utf-8")
    blocks = [b for b in re.findall(r"```json\n(.*?)```", text, re.S) if '"mcpServers"' in b]
    assert len(blocks) == 1, "README.md should have exactly one ```json block with mcpServers"
    (block,) = blocks
    assert block.count("/path/to/repo") == 1, block
    return block.replace("/path/to/repo", str(repo))


def tool_calls(request: JsonDict) -> dict[str, JsonDict]:
    """The ``tool_use`` blocks of the request's assistant messages, by id."""
    calls: dict[str, JsonDict] = {}
    for message in request.get("messages", []):
        content = message.get("content")
        if message.get("role") == "assistant" and isinstance(content, list):
            calls.update({b["id"]: b for b in content if b.get("type") == "tool_use"})
    return calls


def jp_query_results(request: JsonDict) -> list[JsonDict]:
    calls = tool_calls(request)
    return [
        r
        for r in tool_results(request)
        if calls.get(r.get("tool_use_id", ""), {}).get("name") == JP_QUERY
    ]


def scripted_model(request: JsonDict) -> Response:
    """Answers by what a request is, never by the order requests come in."""
    if SUB_SYSTEM in system_text(request):
        # jpfs's sub-agent, started by the MCP server that Claude Code runs.
        return text_reply(ANSWER, model=SUB_MODEL)
    if JP_QUERY not in json.dumps(request):
        # Claude Code's own side requests (titles, summaries, ...): not about jpfs.
        return text_reply("OK.")
    # Claude Code's main loop, which knows the jpfs tools.
    done = jp_query_results(request)
    if done:
        return text_reply(f"The jpfs sub-agent said: {content_text(done[-1].get('content'))}")
    if any(t.get("name") == JP_QUERY for t in request.get("tools", [])):
        return tool_use_reply((JP_QUERY, {"config": "client-test", "query": SUB_QUERY}))
    # Deferred MCP tools are listed by name only; Claude Code loads one with ToolSearch.
    return tool_use_reply(("ToolSearch", {"query": f"select:{JP_QUERY}", "max_results": 1}))


def claude_env(server: MessagesServer, proxy: _RefusingProxy) -> dict[str, str]:
    proxies = {"http_proxy", "https_proxy", "all_proxy", "no_proxy"}
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CLAUDE", "ANTHROPIC_", "MCP_")) and k.lower() not in proxies
    }
    bin_dir = str(Path(sys.executable).parent)  # where `jpfs` is installed, as on a PATH
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{env['PATH']}",
        ANTHROPIC_BASE_URL=server.url,
        ANTHROPIC_API_KEY="sk-ant-test-not-a-real-key",
        # Anything not for the Messages server goes to the refusing proxy.
        HTTPS_PROXY=proxy.url,
        HTTP_PROXY=proxy.url,
        https_proxy=proxy.url,
        http_proxy=proxy.url,
        NO_PROXY="127.0.0.1,localhost",
        no_proxy="127.0.0.1,localhost",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
        DISABLE_AUTOUPDATER="1",
        DISABLE_TELEMETRY="1",
        DISABLE_ERROR_REPORTING="1",
        # Otherwise -p sends its one turn's first request before the jpfs server is up,
        # without the jpfs tools.
        MCP_CONNECTION_NONBLOCKING="false",
    )
    return env


def test_claude_code_runs_a_jpfs_sub_agent_through_the_readme_mcp_json(
    ws: Path,
    cli: Callable[..., Result],
    claude: Path,
    messages_server: MessagesServer,
    refusing_proxy: _RefusingProxy,
    tmp_path: Path,
) -> None:
    write_profile(ws, "client-test", PROFILE)
    assert cli("config", "set", "agents.allowed", '["client-test"]').code == 0
    (ws / ".mcp.json").write_text(readme_mcp_json(ws), encoding="utf-8")
    messages_server.streaming = True  # Claude Code always streams
    messages_server.responder = scripted_model
    debug_log = tmp_path / "claude-debug.log"

    done = subprocess.run(
        [
            str(claude),
            "-p",
            "Ask a jpfs sub-agent which number answers the client test.",
            # Project servers from .mcp.json are approved by the user; here, up front.
            "--settings",
            json.dumps({"enableAllProjectMcpServers": True}),
            "--allowedTools",
            JP_QUERY,
            "--debug-file",
            str(debug_log),
        ],
        cwd=ws,
        env=claude_env(messages_server, refusing_proxy),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )

    def context() -> str:
        log = debug_log.read_text(encoding="utf-8", errors="replace") if debug_log.exists() else ""
        paths = [
            f"{r.json.get('model') if r.json else '?'} {r.path}" for r in messages_server.requests
        ]
        return (
            f"\nexit {done.returncode}\nstdout: {done.stdout[-2000:]}\nstderr: {done.stderr[-2000:]}"
            f"\nrequests: {paths}\nrefused by the proxy: {refusing_proxy.seen}"
            f"\nserver errors: {messages_server.errors}\ndebug log (tail):\n{log[-4000:]}"
        )

    assert done.returncode == 0, context()
    assert not messages_server.errors, context()
    bodies = messages_server.bodies

    # jpfs's sub-agent asked the same server, with its profile's model and the query.
    sub = [b for b in bodies if SUB_SYSTEM in system_text(b)]
    assert len(sub) == 1, context()
    assert sub[0]["model"] == SUB_MODEL
    assert SUB_QUERY in content_text(sub[0]["messages"][0]["content"])

    # Claude Code called the jpfs tool with the schema jpfs gave it ...
    main = [b for b in bodies if any(t.get("name") == JP_QUERY for t in b.get("tools", []))]
    assert main, context()
    (definition,) = [t for t in main[-1]["tools"] if t["name"] == JP_QUERY]
    assert definition["input_schema"]["properties"]["config"]["enum"] == ["client-test"]
    # ... got the sub-agent's answer back as the tool result ...
    results = [r for b in bodies for r in jp_query_results(b)]
    assert results, context()
    returned = content_text(results[-1]["content"])
    assert ANSWER in returned and not results[-1].get("is_error"), returned
    found = re.search(r'<response conversation_id="([^"]+)">', returned)
    assert found, returned
    conversation = found.group(1)
    # ... and printed the final reply that repeats it.
    assert f"The jpfs sub-agent said: {returned}".strip() in done.stdout.strip(), context()

    # The sub-agent's conversation is on the record branch, committed.
    wait_until(lambda: not rgit(ws, "status", "--porcelain"), timeout=10, message="a clean record")
    assert rgit(ws, "rev-parse", "--abbrev-ref", "HEAD").strip() == "jpfs-record"
    subjects = rgit(ws, "log", "--format=%s", "--", conversation).splitlines()
    assert f"jpfs({conversation}): task" in subjects, subjects
    assert subjects[0] == f"jpfs({conversation}): result", subjects
    task = rgit(ws, "show", f"HEAD:{conversation}/task.md")
    assert SUB_QUERY in task
    assert ANSWER in rgit(ws, "show", f"HEAD:{conversation}/result.md")
    parent = conversation.split("/")[0]
    assert parent.startswith("mcp-"), conversation
    meta = rgit(ws, "show", f"HEAD:{parent}/conversation.toml")
    assert 'agent = "mcp"' in meta, meta
