"""Every jpfs writer appends a conversation's events under its run lock, so a run (which
holds that lock) is their only jpfs writer and may trust its own listing of ``events/``
(:meth:`Conversation.exclusive`): input, a run's turns and tool results, a failure, a
fork's copy and prompt, caller mail delivered as input."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from jpfs import api
from jpfs.core import locks, tree
from jpfs.core.conversation import Conversation, Event
from jpfs.core.state import State
from jpfs.core.workspace import Workspace, open_workspace
from jpfs.errors import ExistsError
from jpfs.services.conversations import lifecycle, mail
from jpfs.services.run import background, control
from jpfs.services.run.runtime import Runner
from tests.conftest import rgit, wait_until, write_profile
from tests.runners import query

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
    """Each event numbered in this process (every append numbers its event first, then
    writes it or has the committer write it), with whether its run lock was held then."""
    local = open_workspace(ws).local_dir
    seen: list[Appended] = []
    original = Conversation.prepare_event

    def watched(
        self: Conversation, role: str, body: str, meta: Mapping[str, Any] | None = None
    ) -> Any:
        seen.append((self.id, role, locks.is_locked(local, self.id)))
        return original(self, role, body, meta)

    monkeypatch.setattr(Conversation, "prepare_event", watched)
    return seen


def lead_workspace(ws: Path) -> Workspace:
    write_profile(ws, "lead", LEAD, allowed=True)
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
    background.run_background(api.runner(w), child)
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


def new_run(ws: Path, conv_id: str) -> tuple[Conversation, Runner]:
    w = open_workspace(ws)
    return lifecycle.new_conversation(w, conv_id, agent="default", task="t"), Runner(w)


@contextlib.contextmanager
def running(runner: Runner, conv: Conversation) -> Iterator[None]:
    """As a run holds its conversation (Runner.run_locked): its lock, its handle exclusive."""
    with locks.conversation_lock(runner.ws.local_dir, conv.id), conv.exclusive():
        yield


def test_a_run_records_an_event_in_one_commit(ws: Path) -> None:
    """Runner.record_event: the event is numbered by the handle, its file made by the
    committer, and both land in one commit."""
    conv, runner = new_run(ws, "one")
    with running(runner, conv):
        runner.commit_caller_edits(conv)
        made = [
            runner.record_event(conv, "assistant", f"turn {n}", event="assistant") for n in (1, 2)
        ]
        assert [e.seq for e in made] == [1, 2] and conv.event_names()[-1][0] == 2
    for event in made:
        assert event.path.read_text(encoding="utf-8").endswith(f"turn {event.seq}\n")
        rel = f"one/events/{event.path.name}"
        assert rgit(ws, "log", "--format=%s", "--", rel).splitlines() == ["jpfs(one): assistant"]
    assert rgit(ws, "status", "--porcelain") == ""


def after_numbering(
    monkeypatch: pytest.MonkeyPatch, action: Callable[[Conversation, Event], None]
) -> list[Event]:
    """Run ``action`` once, between the numbering of the next event and its commit (a
    human's hand, say); returns the events it ran for."""
    original = Conversation.prepare_event
    seen: list[Event] = []

    def then_acted(self: Conversation, *args: Any) -> tuple[Event, str]:
        event, text = original(self, *args)
        if not seen:
            seen.append(event)
            action(self, event)
        return event, text

    monkeypatch.setattr(Conversation, "prepare_event", then_acted)
    return seen


def test_events_removed_before_the_commit_are_made_again(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conv, runner = new_run(ws, "gone")
    with running(runner, conv):
        runner.record_event(conv, "assistant", "first", event="assistant")
        removed = after_numbering(monkeypatch, lambda c, _: shutil.rmtree(c.events_dir))
        again = runner.record_event(conv, "assistant", "second", event="assistant")
    assert [e.seq for e in removed] == [2]
    assert again.seq == 1 and again.path.read_text(encoding="utf-8").endswith("second\n")
    assert "gone/events/0001-assistant.md" in rgit(ws, "ls-tree", "-r", "--name-only", "HEAD")


def test_a_hand_made_event_with_the_next_name_is_never_overwritten(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conv, runner = new_run(ws, "clash")
    after_numbering(monkeypatch, lambda _, e: e.path.write_text("by hand\n", encoding="utf-8"))
    with (
        running(runner, conv),
        pytest.raises(ExistsError, match=r"0001-assistant\.md already exists in clash") as clash,
    ):
        runner.record_event(conv, "assistant", "mine", event="assistant")
    assert "move it out of events/" in str(clash.value)  # and what to do instead
    assert (conv.events_dir / "0001-assistant.md").read_text(encoding="utf-8") == "by hand\n"
