"""``jpfs mcp`` driven by the official MCP client over stdio, and ``jpfs tools``."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from tests.conftest import Result, allow_agents, git, jpfs_subprocess, rgit

if TYPE_CHECKING:  # the SDK is imported where a test starts the server, not at collection
    from mcp import ClientSession

HELPER = """\
model = "script-helper"
provider = "script"
description = "Scripted helper: asks which file, then answers."

[onboarding]
enabled = true

[[script.onboarding]]
questions = ["Which file should I read?"]

[[script.turns]]
text = "helper result after onboarding"
"""

QUICK = """\
model = "script-quick"
provider = "script"
description = "Scripted agent without onboarding (slow when the task says so)."

[[script.turns]]
when = "slow"
delay = 60
text = "slow answer"

[[script.turns]]
text = "quick answer: {input}"
"""

AGENTS = ("--agent", "helper", "--agent", "quick")
ID = re.compile(r'conversation_id="([^"]+)"')


@pytest.fixture
def mcp_ws(ws: Path, cli: Callable[..., Result]) -> Path:
    agents = ws / ".jpfs" / "agents"
    (agents / "helper.toml").write_text(HELPER, encoding="utf-8")
    (agents / "quick.toml").write_text(QUICK, encoding="utf-8")
    allow_agents(ws, "quick")  # the CLI starts it below; the MCP client, any --agent
    # A top-level conversation that is not the server's: never reachable through it.
    assert cli("conversation", "new", "other", "--agent", "quick", "--no-activate").code == 0
    return ws


@asynccontextmanager
async def serve(ws: Path, errlog: Path, *args: str) -> AsyncIterator[ClientSession]:
    from mcp import ClientSession, StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "jpfs", "-w", str(ws), "mcp", *args],
        cwd=ws,
        env=dict(os.environ),
    )
    with errlog.open("w", encoding="utf-8") as err:
        async with (
            stdio_client(params, errlog=err) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session


async def call(session: ClientSession, name: str, **args: Any) -> tuple[str, bool]:
    result = await session.call_tool(name, args)
    return "".join(getattr(c, "text", "") for c in result.content), result.is_error


async def wait_for(predicate: Callable[[], Awaitable[object]], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not await predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await anyio.sleep(0.02)


def catalog_definitions(ws: Path, agents: list[str]) -> dict[str, dict[str, Any]]:
    """The registry's own definitions, built without the MCP code."""
    from jpfs.tools.registry import catalog

    tools = catalog({"tools": {"agents": agents}}, ws / ".jpfs" / "agents")
    return {
        n: {"name": t.name, "description": t.description, "input_schema": t.input_schema}
        for n, t in tools.items()
    }


def test_tools_json_is_the_registry(mcp_ws: Path, cli: Callable[..., Result]) -> None:
    result = cli("tools", "--format", "json", *AGENTS)
    assert result.code == 0, result.stderr
    printed = json.loads(result.stdout)
    expected = catalog_definitions(mcp_ws, ["helper", "quick"])
    assert [d["name"] for d in printed][:4] == [
        "jp_query",
        "jp_conversation_list",
        "jp_conversation_print",
        "jp_conversation_grep",
    ]
    assert all(d == expected[d["name"]] for d in printed)
    text = cli("tools", "--tool", "jp_query", *AGENTS)
    assert text.stdout.startswith("jp_query\n") and "jp_conversation_list" not in text.stdout
    bad = cli("tools", "--tool", "fs_read_file")
    assert bad.code == 1 and "not an exported tool" in bad.stderr


def test_cli_does_not_import_the_mcp_sdk(mcp_ws: Path) -> None:
    code = (
        "import sys; from jpfs.cli.main import main; main(['tools']); print('mcp' in sys.modules)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=mcp_ws, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("False")


def test_bad_root_id_fails_before_serving(mcp_ws: Path) -> None:
    proc = jpfs_subprocess("mcp", "--root-id", "nope", cwd=mcp_ws)
    assert proc.returncode == 1
    assert "no conversation 'nope'" in proc.stderr


def test_mcp_session(mcp_ws: Path, tmp_path: Path, cli: Callable[..., Result]) -> None:
    errlog = tmp_path / "server.err"
    head_before = git(mcp_ws, "rev-parse", "HEAD").strip()

    async def scenario() -> None:
        async with serve(mcp_ws, errlog, *AGENTS) as session:
            # Same names, descriptions and schemas as the registry: one source.
            listed = (await session.list_tools()).tools
            expected = catalog_definitions(mcp_ws, ["helper", "quick"])
            assert [t.name for t in listed][:4] == list(expected)[:4]
            for tool in listed:
                assert tool.description == expected[tool.name]["description"]
                assert tool.input_schema == expected[tool.name]["input_schema"]
            query_schema = next(t for t in listed if t.name == "jp_query").input_schema
            assert query_schema["properties"]["config"]["enum"] == ["helper", "quick"]
            # Listing tools created nothing.
            assert git(mcp_ws, "rev-parse", "HEAD").strip() == head_before

            # A scripted agent without onboarding: the wrapped final answer, with progress.
            notes: list[str] = []

            async def on_progress(
                progress: float, total: float | None, message: str | None
            ) -> None:
                notes.append(message or "")

            result = await session.call_tool(
                "jp_query", {"config": "quick", "query": "hello"}, progress_callback=on_progress
            )
            text = result.content[0].text  # type: ignore[union-attr]
            assert not result.is_error
            quick = ID.findall(text)[0]
            assert text.startswith(f'<response conversation_id="{quick}">')
            assert "quick answer: hello" in text
            assert any("model turn" in n for n in notes)
            root = quick.split("/")[0]
            assert root.startswith("mcp-")
            assert f"conversation {root}" in errlog.read_text(encoding="utf-8")

            # Onboarding: questions first, then the answers through a second jp_query.
            text, err = await call(session, "jp_query", config="helper", query="Summarise")
            assert not err and text.startswith("<questions conversation_id=")
            assert "Which file should I read?" in text
            helper = ID.findall(text)[0]
            assert helper.startswith(root + "/") and helper != quick
            text, err = await call(
                session, "jp_query", id=helper, query="README.md", config="helper"
            )
            assert not err
            assert text.startswith(f'<response conversation_id="{helper}">')
            assert "helper result after onboarding" in text

            # List and grep the children.
            text, err = await call(session, "jp_conversation_list")
            assert not err
            assert {r["id"] for r in json.loads(text)} == {quick, helper}
            text, err = await call(session, "jp_conversation_grep", pattern="quick answer")
            assert not err and text.splitlines()[0].startswith(f"{quick}: ")
            text, err = await call(session, "jp_conversation_print", id=helper)
            assert not err and "README.md" in text

            # Out of scope: a sibling top-level conversation, R itself, `..`.
            for bad in ("other", root, f"{root}/../other", "../x"):
                text, err = await call(session, "jp_conversation_print", id=bad)
                assert err, (bad, text)
            text, err = await call(session, "jp_query", id="other", query="hi", config="quick")
            assert err and "outside the allowed subtree" in text
            text, err = await call(session, "jp_conversation_grep", pattern="a", id="other")
            assert err and "outside the allowed subtree" in text
            # Profiles outside --agent and unknown tools are refused too.
            text, err = await call(session, "jp_query", config="demo", query="hi")
            assert err and "must be one of" in text
            text, err = await call(session, "fs_read_file", path="README.md")
            assert err and "unknown tool" in text

    anyio.run(scenario)
    # Every step is in git, and the work tree stays clean.
    log = rgit(mcp_ws, "log", "--format=%s")
    assert f"jpfs({root_of(errlog)}): new" in log
    assert rgit(mcp_ws, "status", "--porcelain") == ""


def root_of(errlog: Path) -> str:
    found = re.search(r"conversation (mcp-\S+)", errlog.read_text(encoding="utf-8"))
    assert found
    return found.group(1)


def test_cancelled_request_kills_its_run(
    mcp_ws: Path, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    assert cli("conversation", "new", "team", "--agent", "quick", "--no-activate").code == 0
    from jpfs.core import locks
    from jpfs.core.conversation import Conversation

    conv_root = mcp_ws / "conversations"
    started = time.monotonic()

    async def scenario() -> None:
        async with serve(mcp_ws, tmp_path / "server.err", "--root-id", "team", *AGENTS) as session:
            running: list[str] = []
            seen = anyio.Event()

            async def on_progress(
                progress: float, total: float | None, message: str | None
            ) -> None:
                running.extend(re.findall(r"^\[([^\]]+)\] model turn", message or ""))
                if running:
                    seen.set()

            async with anyio.create_task_group() as tg:

                async def slow() -> None:
                    await session.call_tool(
                        "jp_query",
                        {"config": "quick", "query": "be slow"},
                        progress_callback=on_progress,
                    )
                    raise AssertionError("the slow run finished instead of being cancelled")

                tg.start_soon(slow)
                await seen.wait()
                tg.cancel_scope.cancel()  # the client sends notifications/cancelled
            child = running[0]
            assert child.startswith("team/")

            async def killed() -> bool:
                text, _ = await call(session, "jp_conversation_list")
                return any(r["id"] == child and r["status"] == "killed" for r in json.loads(text))

            await wait_for(killed)

            async def unlocked() -> bool:
                # The status is written (and listed) just before the run lets go of its lock.
                return not locks.is_locked(mcp_ws / ".jpfs" / "local", child)

            await wait_for(unlocked)
            assert Conversation(conv_root, child).meta()["status"] == "killed"
            # The server is still serving.
            text, err = await call(session, "jp_query", config="quick", query="again")
            assert not err and "quick answer: again" in text

    anyio.run(scenario)
    # The script's turn sleeps 60 s; the cancel stopped it.
    assert time.monotonic() - started < 20
    assert "MCP request cancelled" in rgit(mcp_ws, "log", "--format=%s")


FAILING = """\
model = "script-failing"
provider = "script"
description = "Always fails."
[[script.turns]]
error = "the model is unavailable (scripted)"
"""


def test_a_failed_sub_agent_is_an_mcp_error_with_its_reason(mcp_ws: Path, tmp_path: Path) -> None:
    (mcp_ws / ".jpfs" / "agents" / "failing.toml").write_text(FAILING, encoding="utf-8")

    async def scenario() -> None:
        async with serve(mcp_ws, tmp_path / "err.log", "--agent", "failing") as session:
            text, err = await call(session, "jp_query", config="failing", query="hi")
            assert err is True
            assert text.startswith("<error conversation_id=")
            assert "the model is unavailable (scripted)" in text

    anyio.run(scenario)


def _rpc(proc: subprocess.Popen[bytes], message: dict[str, Any]) -> None:
    assert proc.stdin is not None
    proc.stdin.write((json.dumps({"jsonrpc": "2.0", **message}) + "\n").encode())
    proc.stdin.flush()


@pytest.mark.parametrize("busy", [False, True], ids=["idle", "mid-call"])
def test_sigint_stops_the_server_at_once_and_the_call_in_flight_cleanly(
    mcp_ws: Path, busy: bool
) -> None:
    """Clients such as Claude Code stop their servers with SIGINT, stdin still open."""
    from tests.conftest import wait_until

    proc = subprocess.Popen(
        [sys.executable, "-m", "jpfs", "-w", str(mcp_ws), "mcp", *AGENTS],
        cwd=mcp_ws, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        _rpc(proc, {"id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"}}})  # fmt: skip
        assert proc.stdout is not None and b'"id":1' in proc.stdout.readline()
        _rpc(proc, {"method": "notifications/initialized"})
        locks = mcp_ws / ".jpfs" / "local" / "locks"
        if busy:
            _rpc(proc, {"id": 2, "method": "tools/call", "params": {
                "name": "jp_query",
                "arguments": {"config": "quick", "query": "be slow"}}})  # fmt: skip
            from jpfs.core.locks import is_held

            wait_until(
                lambda: locks.is_dir() and any(is_held(p) for p in locks.iterdir()),
                timeout=30,
                message="the sub-agent running",
            )
        started = time.monotonic()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=15) == 130
        assert time.monotonic() - started < 10
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if busy:
        tomls = list((mcp_ws / "conversations").glob("*/*/conversation.toml"))
        assert tomls and 'status = "killed"' in tomls[0].read_text(encoding="utf-8")
        assert rgit(mcp_ws, "status", "--porcelain") == ""
