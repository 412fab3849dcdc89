"""Every jpfs writer appends a conversation's events under its run lock, so a run (which
holds that lock) is their only jpfs writer and may trust its own listing of ``events/``
(:meth:`Conversation.exclusive`): input, a run's turns and tool results, a failure, a
fork's copy and prompt, caller mail delivered as input."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from jpfs.core import locks, tree
from jpfs.core.conversation import Conversation
from jpfs.core.state import State
from jpfs.core.workspace import Workspace, open_workspace
from jpfs.services import background, control, lifecycle, mail
from jpfs.services.query import query
from jpfs.services.runtime import Runner
from tests.conftest import rgit, wait_until, write_profile

LEAD = """
model = "m"
provider = "script"
[tools]
allow = ["fork"]
[[script.turns]]
when = "fan out"
tool_calls = [{ name = "fork", input = { prompt = "child work" } }]
[[script.turns]]
when = "break"
error = "the model is down"
[[script.turns]]
text = "done: {input}"
"""

Appended = tuple[str, str, bool]  # conversation, role, its run lock held


@pytest.fixture
def appends(ws: Path, monkeypatch: pytest.MonkeyPatch) -> list[Appended]:
    """Each event appended in this process, with whether its run lock was held then."""
    local = open_workspace(ws).local_dir
    seen: list[Appended] = []
    original = Conversation.append_event

    def watched(
        self: Conversation, role: str, body: str, meta: Mapping[str, Any] | None = None
    ) -> Any:
        seen.append((self.id, role, locks.is_locked(local, self.id)))
        return original(self, role, body, meta)

    monkeypatch.setattr(Conversation, "append_event", watched)
    return seen


def lead_workspace(ws: Path) -> Workspace:
    write_profile(ws, "lead", LEAD)
    return open_workspace(ws)


def test_every_append_holds_the_run_lock(ws: Path, appends: list[Appended]) -> None:
    w = lead_workspace(ws)
    first = query(w, "hello", conv_id=None, segment="p", agent="lead")
    assert first.state is State.IDLE and first.text == "done: hello\n"
    query(w, "fan out", conv_id="p")  # a fork tool call: the child runs in a thread
    child = next(c for c in lifecycle.children(w, "p"))
    wait_until(
        lambda: tree.state_of(Conversation(w.conv_root, child)) is State.IDLE,
        timeout=20,
        message="the forked child to finish",
    )
    assert query(w, "break", conv_id="p").state is State.FAILED  # an error event
    # Mail from the caller becomes the child's next input when it runs.
    mail.send(w, child, "more", "go on", sender="p")
    background.run_background(Runner(w), child)
    copy = lifecycle.fork_conversation(w, "p", prompt="a human's fork")
    control.fork(w, "p", "a human's fork, started", start_run=False)

    roles = {(conv == "p", role) for conv, role, _ in appends}
    assert roles >= {(True, "user"), (True, "assistant"), (True, "tool"), (True, "error")}
    assert (False, "user") in roles and (False, "assistant") in roles
    assert any(conv == copy.id for conv, _, _ in appends)
    assert [a for a in appends if not a[2]] == []
    assert "more" in Conversation(w.conv_root, child).events()[-2].body
    assert rgit(ws, "status", "--porcelain") == ""


@pytest.fixture
def tail_checks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The conversation of each tail check a handle makes (Conversation.event_names)."""
    checks: list[str] = []
    original = Conversation._tail_unchanged

    def counted(self: Conversation, names: list[tuple[int, str, str]]) -> bool:
        checks.append(self.id)
        return original(self, names)

    monkeypatch.setattr(Conversation, "_tail_unchanged", counted)
    return checks


def test_an_exclusive_handle_numbers_from_its_own_listing(ws: Path, tail_checks: list[str]) -> None:
    """Under its run lock a handle does no tail check between its own appends (the
    check another writer's same-tick append needs); numbering and listing stay right."""
    w = open_workspace(ws)
    conv = lifecycle.new_conversation(w, "x", agent="default", task="t")
    with locks.conversation_lock(w.local_dir, conv.id), conv.exclusive():
        seqs = [conv.append_event("assistant", f"{n}").seq for n in range(30)]
    assert seqs == list(range(1, 31)) and tail_checks == []
    assert [seq for seq, _, _ in conv.event_names()] == list(range(1, 31))
    # Outside the block the same appends check the tail again, as another writer may
    # have numbered the next event within the clock tick of the last one.
    other = Conversation(w.conv_root, conv.id)
    for n in range(30):
        other.append_event("user", f"{n}")
    assert tail_checks, "no tail check outside exclusive()"


def test_a_run_trusts_its_own_listing(ws: Path, tail_checks: list[str]) -> None:
    w = lead_workspace(ws)
    done = query(w, "hello", segment="q", agent="lead")
    assert done.state is State.IDLE and done.text == "done: hello\n"
    assert len(Conversation(w.conv_root, "q").event_names()) == 2
    assert tail_checks == []  # the run appended and looked again, under its lock
