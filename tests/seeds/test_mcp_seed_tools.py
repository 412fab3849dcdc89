"""The seeds' tool calls from an MCP client: ``jpfs mcp`` driven by the official MCP
client over stdio, the client acting as RFD 051's main agent (and as seed 003's
caller). The sub-agents run inside the server on the anthropic provider, against the
test's Messages API server.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio

from tests.conftest import write_profile
from tests.mcp.test_mcp import call, serve
from tests.messages_server import Router, last_user_text
from tests.seeds.conftest import RESEARCHER_PROMPT
from tests.seeds.helpers import ID
from tests.seeds.test_onboarding_protocol import REVIEWER, reviewer
from tests.seeds.test_rfd051_demo import (
    CONTINUE,
    DELEGATE,
    GREP,
    GREP_LINE,
    RESEARCH,
    RETRY,
    researcher,
)


def test_the_seed_tool_calls_over_mcp(rfd_ws: Path, api_env: Any, tmp_path: Path) -> None:
    write_profile(rfd_ws, "code_reviewer", REVIEWER)
    api_env.responder = (
        Router()
        .on_system(RESEARCHER_PROMPT, researcher)
        .on_system("You are CODE_REVIEWER.", reviewer)
    )
    agents = ("--agent", "researcher", "--agent", "code_reviewer")

    async def scenario() -> None:
        async with serve(rfd_ws, tmp_path / "server.err", *agents) as session:
            # RFD 051's demo. The seed's own first call: its config is a JP config path.
            text, err = await call(session, "jp_query", **DELEGATE)
            assert err and text == (
                "jp_query: argument 'config' must be one of researcher, code_reviewer"
            )
            text, err = await call(session, "jp_query", **{**DELEGATE, "config": "researcher"})
            (child,) = ID.findall(text)
            assert (
                not err and text == f'<response conversation_id="{child}">\n{RESEARCH}\n</response>'
            )
            assert child.startswith("mcp-")
            # jp_query(id: ..., query: ...) continues it: the same id, the new answer only.
            text, err = await call(session, "jp_query", **{**CONTINUE, "id": child})
            assert not err and text == f'<response conversation_id="{child}">\n{RETRY}\n</response>'
            # jp_conversation_list()
            text, err = await call(session, "jp_conversation_list")
            (row,) = json.loads(text)
            assert (row["id"], row["title"], row["events_count"]) == (
                child, str(DELEGATE["query"])[:80], 4,
            )  # fmt: skip
            # jp_conversation_grep(pattern: "is_retryable")
            text, err = await call(session, "jp_conversation_grep", **GREP)
            assert not err and text == f"{child}: {GREP_LINE}"

            # Seed 003's message flow, the MCP client as the caller: questions first, each
            # answer through jp_query(id, query), then the result.
            text, err = await call(
                session, "jp_query", config="code_reviewer", query="Audit the export module"
            )
            (sub,) = ID.findall(text)
            assert text == f'<questions conversation_id="{sub}">\n1. What format?\n</questions>'
            text, err = await call(session, "jp_query", id=sub, query="JSON with schema X")
            assert text == f'<questions conversation_id="{sub}">\n1. Any constraints?\n</questions>'
            text, err = await call(session, "jp_query", id=sub, query="Max 10 files")
            assert not err and text.startswith(f'<response conversation_id="{sub}">\nREVIEW:')

    anyio.run(scenario)
    asked = [last_user_text(b) for b in api_env.bodies if "You are CODE_REVIEWER." in str(b)]
    assert "JSON with schema X" in asked[-1] and "Max 10 files" in asked[-1]
