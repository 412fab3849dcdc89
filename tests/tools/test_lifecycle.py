"""``fork``, ``kill``, ``jp_await`` and the mail tools (jpfs.tools.lifecycle), called as
the runtime calls them for a conversation of a real workspace. The caller is always the
calling conversation, never an id the model passes: so a model can reach its own
subtree (and its parent, by mail) and nothing else. The services behind them are tested
in tests/services/conversations/ and tests/services/run/."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from jpfs import api
from jpfs.core.conversation import Conversation
from jpfs.core.tool import ToolContext, check_arguments
from jpfs.core.workspace import Workspace, open_workspace
from jpfs.errors import NotFoundError, ScopeError, ToolError
from jpfs.services.conversations.lifecycle import new_conversation
from jpfs.tools import lifecycle
from tests.conftest import no_thread_leak, write_profile

# Delegates (fork is in its list): may mail anyone of its subtree.
LEAD = """
model = "script"
provider = "script"
[tools]
allow = ["fork", "kill", "jp_await", "mail_send", "mail_check", "mail_read", "mail_delete",
         "mail_filter"]
[[script.turns]]
text = "done: {input}"
"""

# Cannot delegate: may mail its parent only.
WORKER = """
model = "script"
provider = "script"
[tools]
allow = ["mail_send", "mail_check", "mail_read"]
[[script.turns]]
text = "worked"
"""


@pytest.fixture
def team(ws: Path) -> Workspace:
    """lead, its children lead/w (a worker) and lead/w/sub, and a stranger, other."""
    write_profile(ws, "lead", LEAD, allowed=True)
    write_profile(ws, "worker", WORKER, allowed=True)
    w = open_workspace(ws)
    for conv_id, agent in (("lead", "lead"), ("lead/w", "worker"), ("lead/w/sub", "worker")):
        new_conversation(w, conv_id, agent=agent)
    new_conversation(w, "other", agent="worker")
    return w


def context(w: Workspace, caller: str) -> ToolContext:
    """The context the runtime gives ``caller``'s tool calls."""
    return api.runner(w).tool_context(Conversation(w.conv_root, caller))


def call(w: Workspace, caller: str, name: str, **args: Any) -> Any:
    tool = lifecycle.build({})[name]
    text = tool.run(context(w, caller), check_arguments(tool, args))
    try:
        return json.loads(text)
    except json.JSONDecodeError:  # a sentence, such as "[] (no children to wait for)"
        return text


def test_each_tool_checks_its_arguments() -> None:
    tools = lifecycle.build({})
    for name, args, said in (
        ("fork", {}, "prompt"),
        ("kill", {}, "id"),
        ("kill", {"id": ""}, "id"),
        ("mail_send", {"to": "parent"}, "body"),
        ("mail_read", {"id": "m-1", "mark": True}, "mark"),
        ("jp_await", {"timeout": -1}, "timeout"),
        ("mail_filter", {"kind": "letter"}, "kind"),
    ):
        with pytest.raises(ToolError, match=said):
            check_arguments(tools[name], args)


def test_fork_starts_a_copy_of_the_caller_and_jp_await_gathers_its_report(
    team: Workspace,
) -> None:
    with no_thread_leak():
        started = call(team, "lead", "fork", prompt="look at the tests")
        child = started["conversation_id"]
        assert child.startswith("lead/") and started["status"] == "running"
        (report,) = call(team, "lead", "jp_await", ids=[child], timeout=60)
    assert report["conversation_id"] == child
    assert (report["status"], report["success"]) == ("idle", True), report
    assert report["summary"] == "done: look at the tests"
    assert Conversation(team.conv_root, child).meta()["agent"] == "lead"


def test_jp_await_without_children_returns_at_once(team: Workspace) -> None:
    assert call(team, "lead/w/sub", "jp_await") == "[] (no children to wait for)"


def test_kill_reaches_the_callers_descendants_only(team: Workspace) -> None:
    for target in ("other", "lead"):
        with pytest.raises(ScopeError):
            call(team, "lead/w", "kill", id=target)
    done = call(team, "lead", "kill", id="lead/w", cascade=True)
    assert done["conversation_id"] == "lead/w"
    assert set(done["killed"]) == {"lead/w", "lead/w/sub"}
    assert Conversation(team.conv_root, "lead/w/sub").status == "killed"
    assert Conversation(team.conv_root, "other").status != "killed"


def test_an_agent_that_cannot_delegate_mails_its_parent_only(team: Workspace) -> None:
    sent = call(team, "lead/w", "mail_send", to="parent", subject="q", body="which file?")
    assert sent["conversation_id"] == "lead" and sent["continued"] is False
    for to in ("lead/w/sub", "other"):
        with pytest.raises(ScopeError):
            call(team, "lead/w", "mail_send", to=to, body="hello")
    # A delegating caller mails into its subtree.
    assert call(team, "lead", "mail_send", to="lead/w/sub", body="hi")["conversation_id"] == (
        "lead/w/sub"
    )
    with pytest.raises(ScopeError):
        call(team, "lead", "mail_send", to="other", body="hi")


def test_the_mail_tools_read_the_callers_own_inbox(team: Workspace) -> None:
    call(team, "lead/w", "mail_send", to="parent", subject="first", body="a needle")
    call(team, "lead/w", "mail_send", to="parent", subject="second", body="hay")
    checked = call(team, "lead", "mail_check")
    assert checked["unread"] == 2
    first, second = (m["id"] for m in checked["messages"])
    assert [m["subject"] for m in checked["messages"]] == ["first", "second"]
    read = call(team, "lead", "mail_read", id=first)
    assert read["body"] == "a needle\n" and read["read"] is True
    assert [m["id"] for m in call(team, "lead", "mail_filter", unread=True)] == [second]
    assert [m["id"] for m in call(team, "lead", "mail_filter", text="needle")] == [first]
    assert call(team, "lead", "mail_delete", id=first) == {"deleted": first}
    assert call(team, "lead", "mail_check")["unread"] == 1
    # Another conversation's inbox is not the caller's: the same id is not found there.
    with pytest.raises(NotFoundError):
        call(team, "lead/w", "mail_read", id=second)
