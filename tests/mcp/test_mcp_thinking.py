"""A thinking sub-agent through ``jpfs mcp`` (the official MCP client over stdio): its
ten-call tool loop completes against the strict Messages API server, and neither the
tool result nor a print of the conversation gives the client its thinking."""

from __future__ import annotations

import json
from pathlib import Path

import anyio

from jpfs.core.conversation import Conversation
from tests.conftest import write_profile
from tests.mcp.test_mcp import ID, call, serve
from tests.messages_server import MessagesServer
from tests.services.run.test_thinking import READS, THINKER, Reader, check_loop, make_files


def test_a_thinking_sub_agent_through_mcp(
    ws: Path, api_env: MessagesServer, tmp_path: Path
) -> None:
    write_profile(ws, "thinker", THINKER.format(model="claude-fable-5-1"))
    make_files(ws)
    api_env.responder = Reader()
    shown: list[str] = []

    async def scenario() -> None:
        async with serve(ws, tmp_path / "server.err", "--agent", "thinker") as session:
            text, err = await call(session, "jp_query", config="thinker", query="Read notes.")
            assert not err, text
            shown.append(text)
            conv_id = ID.findall(text)[0]
            printed, err = await call(session, "jp_conversation_print", id=conv_id)
            assert not err
            shown.append(printed)

    anyio.run(scenario)
    answer, printed = shown
    assert f"read {READS} files" in answer
    conv_id = ID.findall(answer)[0]
    check_loop(api_env, Conversation(ws / "conversations", conv_id))
    assert "thinking folded: 1 block" in printed
    assert "PRIVATE THOUGHT" not in json.dumps(shown)
