"""``jp_query`` and ``jp_conversation_list|print|grep`` (jpfs.tools.conversation), called
as the runtime calls them for a conversation of a real workspace: their arguments, the
profiles a caller may start, the caller's subtree as the only scope, and the happy
path of a sub-agent run in process."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from jpfs import api
from jpfs.core import failures
from jpfs.core.conversation import Conversation
from jpfs.core.tool import ToolContext, check_arguments
from jpfs.core.workspace import Workspace, open_workspace
from jpfs.errors import ScopeError, ToolError
from jpfs.services.conversations.lifecycle import new_conversation
from jpfs.tools import conversation
from tests.conftest import write_profile

LEAD = """
model = "script"
provider = "script"
description = "the caller"
[tools]
allow = ["jp_query", "jp_conversation_list", "jp_conversation_print", "jp_conversation_grep"]
agents = ["helper", "missing"]
[[script.turns]]
text = "lead: {input}"
"""

HELPER = """
model = "script"
provider = "script"
description = "says what it was asked"
[[script.turns]]
text = "helped with {input}"
"""


@pytest.fixture
def team(ws: Path) -> Workspace:
    """``lead`` (may start ``helper``) with a child ``lead/known``, and a top-level
    ``other`` outside lead's subtree."""
    write_profile(ws, "lead", LEAD, allowed=True)
    write_profile(ws, "helper", HELPER, allowed=True)
    w = open_workspace(ws)
    new_conversation(w, "lead", agent="lead")
    new_conversation(w, "lead/known", agent="helper", task="find the needle in the hay")
    new_conversation(w, "other", agent="helper", task="a needle of someone else")
    return w


def context(w: Workspace, caller: str = "lead") -> ToolContext:
    """The context the runtime gives ``caller``'s tool calls."""
    return api.runner(w).tool_context(Conversation(w.conv_root, caller))


def call(w: Workspace, name: str, caller: str = "lead", **args: Any) -> str:
    tools = conversation.build(Conversation(w.conv_root, caller).config, w.agents_dir)
    return tools[name].run(context(w, caller), check_arguments(tools[name], args))


def test_jp_query_names_the_profiles_it_may_start_and_describes_them(team: Workspace) -> None:
    tools = conversation.build(Conversation(team.conv_root, "lead").config, team.agents_dir)
    schema = tools["jp_query"].input_schema
    assert schema["properties"]["config"]["enum"] == ["helper", "missing"]
    assert schema["required"] == ["query"]
    assert "- helper: says what it was asked" in tools["jp_query"].description
    assert "- missing: (profile missing or invalid)" in tools["jp_query"].description


def test_jp_query_starts_a_sub_agent_and_continues_it(team: Workspace) -> None:
    answer = call(team, "jp_query", config="helper", query="the first thing")
    found = re.fullmatch(
        r'<response conversation_id="(lead/[^"]+)">\n?(.*?)\n?</response>', answer, re.S
    )
    assert found, answer
    child, text = found.groups()
    assert text == "helped with the first thing"
    assert Conversation(team.conv_root, child).meta()["agent"] == "helper"
    again = call(team, "jp_query", id=child, query="a second thing")
    assert again == f'<response conversation_id="{child}">\nhelped with a second thing\n</response>'


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ({"query": "q"}, "config is required to start a new sub-agent (one of: helper, missing)"),
        ({"query": "q", "config": "default"}, "argument 'config' must be one of helper, missing"),
        ({"query": "q", "id": "lead/known", "overrides": ["model=x"]}, "overrides apply only"),
        ({"query": "q", "id": "lead/known", "budget_tokens": 5}, "budget_tokens apply only"),
    ],
)
def test_jp_query_refuses_what_the_caller_may_not_ask(
    team: Workspace, args: dict[str, Any], said: str
) -> None:
    with pytest.raises(ToolError, match=re.escape(said)):
        call(team, "jp_query", **args)
    assert [c.name for c in (team.conv_root / "lead").iterdir() if c.is_dir()] == ["known"]


def test_a_profile_not_in_the_schemas_enum_is_refused_by_the_tool_too(team: Workspace) -> None:
    # The schema is advice to the model; the tool checks again (an adapter that skipped
    # the schema, a profile renamed since the tools were listed).
    tool = conversation.build(Conversation(team.conv_root, "lead").config, team.agents_dir)
    with pytest.raises(ToolError, match="profile 'default' is not one this agent may start"):
        tool["jp_query"].run(context(team), {"query": "q", "config": "default"})


def test_a_conversation_outside_the_callers_subtree_cannot_be_named(team: Workspace) -> None:
    for name, args in (
        ("jp_query", {"id": "other", "query": "q"}),
        ("jp_conversation_print", {"id": "other"}),
        ("jp_conversation_grep", {"id": "other", "pattern": "needle"}),
        ("jp_conversation_print", {"id": "lead"}),  # itself: not a descendant either
    ):
        with pytest.raises(ScopeError):
            call(team, name, **args)


def test_list_shows_the_callers_descendants_only(team: Workspace) -> None:
    listed = json.loads(call(team, "jp_conversation_list"))
    assert [r["id"] for r in listed] == ["lead/known"]
    assert set(listed[0]) == {"id", "title", "agent", "status", "events_count"}
    assert call(team, "jp_conversation_list", caller="lead/known") == (
        "[] (no sub-conversations yet)"
    )


def test_list_shows_a_child_failed_whose_failure_its_files_could_not_hold(
    team: Workspace,
) -> None:
    """A failure kept on this machine (jpfs.core.failures, when writing it into the
    conversation failed) reads as failed to the caller's agent, as in `jpfs tree`."""
    child = Conversation(team.conv_root, "lead/known")
    listed = json.loads(call(team, "jp_conversation_list"))
    assert listed[0]["status"] != "failed"
    failures.keep(team.local_dir, child, "boom: the run failed", "events/ is not writable")
    assert json.loads(call(team, "jp_conversation_list"))[0]["status"] == "failed"
    failures.clear(team.local_dir, child.id)
    assert json.loads(call(team, "jp_conversation_list"))[0]["status"] == listed[0]["status"]


def test_print_and_grep_read_a_descendant(team: Workspace) -> None:
    assert "find the needle in the hay" in call(team, "jp_conversation_print", id="lead/known")
    # Over the caller's subtree: other's needle is not found.
    assert call(team, "jp_conversation_grep", pattern="needle") == (
        "lead/known: find the needle in the hay"
    )
    assert call(team, "jp_conversation_grep", pattern="NEEDLE", ignore_case=True) == (
        "lead/known: find the needle in the hay"
    )
    assert call(team, "jp_conversation_grep", pattern="n..dle", regex=True).startswith(
        "lead/known: "
    )
    assert call(team, "jp_conversation_grep", pattern="haystack") == "no matches"
