"""One tree, two providers: a main agent on the Messages API (tests/messages_server.py)
delegates with ``jp_query`` to a sub-agent on an OpenAI-compatible server
(tests/chat_server.py), through the CLI, a daemon and the MCP server; real SDKs, real
processes, nothing on the network."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from tests.chat_server import ChatServer, chat_server, chat_text, chat_text_of, chat_tool_calls
from tests.chat_server import call as chat_call
from tests.conftest import (
    Result,
    git,
    jpfs_subprocess,
    running_daemon,
    use_only_agent,
    wait_until,
    write_profile,
)
from tests.mcp.test_mcp import call, serve
from tests.messages_server import (
    JsonDict,
    MessagesServer,
    Response,
    last_user_text,
    text_reply,
    tool_use_reply,
)

__all__ = ["chat_server"]  # the fixture

MAIN = """
model = "claude-main"
provider = "anthropic"
[tools]
allow = ["jp_query"]
agents = ["local"]
[onboarding]
enabled = false
"""

LOCAL = """
model = "llama-local"
provider = "openai"
base_url = "{url}"
[tools]
allow = ["fs_read_file"]
[limits]
max_children = 0
max_depth = 0
"""


def main_model(request: JsonDict) -> Response:
    """Delegates the question, then passes the sub-agent's answer on."""
    last = last_user_text(request)
    if "<response" in last:
        return text_reply("main says: " + re.sub(r"<[^>]+>", "", last).strip())
    return tool_use_reply(("jp_query", {"config": "local", "query": "What do the notes say?"}))


def local_model(request: JsonDict) -> Response:
    """Reads the notes with a tool, then answers from them."""
    result = chat_text_of(request, "tool")
    if result:
        return chat_text(f"the notes say {result.strip()}", prompt_tokens=30, cached_tokens=10)
    return chat_tool_calls(chat_call("fs_read_file", {"path": "notes.md"}))


@pytest.fixture
def mixed(
    ws: Path, api_env: MessagesServer, chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> Path:
    # A local server needs no key: the sub-agent runs without one.
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    (ws / "notes.md").write_text("42 is the answer\n", encoding="utf-8")
    write_profile(ws, "local", LOCAL.format(url=chat_server.url))
    use_only_agent(ws, "main", MAIN)
    api_env.responder = main_model
    chat_server.responder = local_model
    return ws


def check_tree(ws: Path, answer: str, api_env: MessagesServer, chat_server: ChatServer) -> None:
    assert answer.strip() == "main says: the notes say 42 is the answer"
    assert all(r.path == "/v1/messages" for r in api_env.requests)
    assert [r.path for r in chat_server.requests] == ["/v1/chat/completions"] * 2
    first, second = (r.body for r in chat_server.requests)
    assert first["model"] == "llama-local" and first["messages"][-1]["role"] == "user"
    assert first["messages"][-1]["content"].strip() == "What do the notes say?"
    assert [t["function"]["name"] for t in first["tools"]] == ["fs_read_file"]
    assert second["messages"][-1]["content"] == "42 is the answer\n"
    assert chat_server.requests[0].headers["authorization"] == "Bearer unused"
    # The child's usage is in the record, as jpfs counts it (cached apart).
    log = git(ws, "log", "--all", "--format=%(trailers:key=Jpfs-Usage,valueonly)")
    assert "input=20 output=5 cache_read=10 cache_creation=0" in log


def test_cli(
    mixed: Path, cli: Callable[..., Result], api_env: MessagesServer, chat_server: ChatServer
) -> None:
    result = cli("query", "--new", "What do the notes say?")
    assert result.code == 0, result.stderr
    check_tree(mixed, result.stdout, api_env, chat_server)


def test_daemon(mixed: Path, api_env: MessagesServer, chat_server: ChatServer) -> None:
    def log() -> str:
        return (mixed / ".jpfs/local/daemon.log").read_text(encoding="utf-8")

    with running_daemon(mixed):
        done = jpfs_subprocess("query", "--new", "What do the notes say?", cwd=mixed)
        # Both SDKs are loaded ahead of queries: openai's for the sub-agent only the
        # main agent may call.
        wait_until(lambda: "SDKs loaded" in log(), message="the SDK warm-up")
    assert done.returncode == 0, done.stderr
    assert "query handed over by the CLI" in log()
    assert "SDKs loaded for handed-over queries: anthropic, openai\n" in log()
    check_tree(mixed, done.stdout, api_env, chat_server)


def test_mcp(mixed: Path, tmp_path: Path, api_env: MessagesServer, chat_server: ChatServer) -> None:
    async def scenario() -> str:
        async with serve(mixed, tmp_path / "server.err", "--agent", "main") as session:
            text, err = await call(session, "jp_query", config="main", query="Notes?")
            assert not err, text
            return text

    text = anyio.run(scenario)
    assert text.startswith("<response")
    check_tree(mixed, re.sub(r"<[^>]+>", "", text), api_env, chat_server)
