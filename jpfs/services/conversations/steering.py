"""What reaches an agent while it runs, at its next model call: its caller's mail, and
jpfs's own notes.

    delivered(events)               the mail the events delivered (never again)
    notes_due(events, figures)      jpfs's notes now due: 80% of the tightest budget or of
                                    max_run_seconds spent, or one model call left

The run records each as a user event just before the call (``delivered = "mid-run"``
with the ``mail`` ids it carries; ``note = "budget" | "clock" | "turns"``), so the
request puts it after the pending tool results (:mod:`jpfs.core.view`), and a restart,
a fork or a replay sends it exactly where the live run did.

Exactly once, in order: mail an event names is never delivered again, whatever happened
to its read mark (the event is committed first, the read mark after); mail waits in
the order it was sent. A note of a kind is made once in a run: the events since the
input that started it (the last user event that is neither a note nor a delivery).
Mail that arrives while a tool runs waits for that tool: delivery happens only before
a model call (an interrupt, :func:`interrupting`, cuts short a model call, never a tool).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from jpfs.core import ids
from jpfs.core.conversation import Event
from jpfs.services.conversations import mail

if TYPE_CHECKING:
    from jpfs.core.workspace import Workspace

MID_RUN = "mid-run"
SHARE = 0.8  # of a budget or of the run's time: past it, the agent is asked to wrap up


@dataclass(frozen=True)
class Figures:
    """Where a run stands, for its notes: the tightest budget's share spent and what it
    is, the run's clock share and limit, model calls left before ``max_turns``."""

    budget_share: float | None = None
    budget: str = ""
    clock_share: float | None = None
    clock_limit: float = 0.0
    calls_left: int | None = None


@dataclass(frozen=True)
class Note:
    kind: str  # budget | clock | turns
    text: str


def delivered(events: Sequence[Event]) -> set[str]:
    """The ids of the mail the conversation's events delivered."""
    out: set[str] = set()
    for ev in events:
        ids = ev.meta.get("mail") if ev.role == "user" else None
        if isinstance(ids, list):
            out.update(str(i) for i in ids)
    return out


def as_input(msgs: Sequence[mail.Message]) -> str:
    """Mail delivered to a running agent: said to be new, and that it may change the task."""
    return (
        "[jpfs: mail arrived while you were working; it may change what you are doing.]\n\n"
        + mail.as_input(msgs)
    )


def interrupting(ws: Workspace, conv_id: str) -> bool:
    """Whether unread mail from ``conv_id``'s caller asks to interrupt the model call in
    flight (``interrupt = true``). Read from the files as they are (committed or not)."""
    return any(
        m.interrupt and m.kind == "message" and ids.is_caller(m.sender, conv_id)
        for m in mail.check(ws, conv_id)
    )


def _run_start(events: Sequence[Event]) -> int:
    for i in range(len(events) - 1, -1, -1):
        ev = events[i]
        if ev.role == "user" and "note" not in ev.meta and "delivered" not in ev.meta:
            return i
    return 0


def notes_due(events: Sequence[Event], figures: Figures) -> list[Note]:
    """jpfs's notes due before the next model call, each once in a run."""
    made = {str(ev.meta.get("note")) for ev in events[_run_start(events) :] if ev.role == "user"}
    due: list[Note] = []
    wrap = (
        "Wrap up now: give your final answer, with what you did, what you found and what is left."
    )
    if figures.budget_share is not None and figures.budget_share >= SHARE and "budget" not in made:
        due.append(
            Note(
                "budget",
                f"[jpfs: this run has spent {figures.budget_share:.0%} of the tightest budget"
                f" over it ({figures.budget}); at 100% it is stopped. {wrap}]",
            )
        )
    if figures.clock_share is not None and figures.clock_share >= SHARE and "clock" not in made:
        due.append(
            Note(
                "clock",
                f"[jpfs: this run has used {figures.clock_share:.0%} of its time"
                f" (max_run_seconds = {figures.clock_limit:g}); at 100% it is stopped. {wrap}]",
            )
        )
    if figures.calls_left is not None and figures.calls_left <= 1 and "turns" not in made:
        due.append(
            Note(
                "turns",
                "[jpfs: this is the last model call of this run (limits.max_turns); after it"
                f" the run is stopped. {wrap}]",
            )
        )
    return due


def wrapped_up(events: Sequence[Event]) -> str:
    """Why the run in progress was asked to wrap up ("" when it was not)."""
    kinds = [
        str(ev.meta["note"])
        for ev in events[_run_start(events) :]
        if ev.role == "user" and ev.meta.get("note") in ("budget", "clock", "turns")
    ]
    if not kinds:
        return ""
    what = {"budget": "its budget", "clock": "its time (max_run_seconds)", "turns": "max_turns"}
    return "asked to wrap up near " + " and ".join(what[k] for k in dict.fromkeys(kinds))


def last_answer(events: Sequence[Event]) -> str:
    """The text of the run's last reply after it was asked to wrap up ("" otherwise):
    what a run stopped at its limit reports to its caller."""
    if not wrapped_up(events):
        return ""
    for ev in reversed(events[_run_start(events) :]):
        if ev.role == "assistant" and ev.body.strip():
            return ev.body
    return ""
