"""Input: what a caller says to a conversation, in the form its state calls for.

    submit(conv, text)     a task (empty), answers (waiting), or a user event (idle,
                           failed: new input retries)
    deliver(conv)          pending mail from the caller -> the next input; every run
                           does this when it stops (jpfs.services.run.runtime), so mail sent while
                           the agent was busy is never left behind

Below the run loop and the lifecycle verbs: both call down into it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jpfs.core import record, secrets, tree
from jpfs.core.conversation import TASK, Conversation
from jpfs.core.state import State
from jpfs.errors import StateError
from jpfs.services.conversations import mail, onboarding, runs

if TYPE_CHECKING:
    from jpfs.core.workspace import Workspace
    from jpfs.infra.committer import Identity

# States in which input (a query, or mail from the caller) is accepted.
TAKES_INPUT = frozenset({State.EMPTY, State.WAITING, State.IDLE, State.FAILED})


def submit(ws: Workspace, conv: Conversation, text: str, *, author: Identity | None = None) -> None:
    """Record ``text`` as the caller's input in whatever form the state calls for."""
    state = tree.state_of(conv)
    text = secrets.redact(text)[0]  # jpfs writes it into the record, which is shared
    if state is State.EMPTY:
        conv.write(TASK, text.rstrip() + "\n")
        record.commit(ws, conv.id, "task", agent=conv.meta().get("agent"), author=author)
    elif state is State.WAITING:
        n = onboarding.append_answers(conv, text)
        record.commit(
            ws, conv.id, "answers", agent=conv.meta().get("agent"), note=f"round {n}", author=author
        )
    elif state in (State.IDLE, State.FAILED):
        if state is State.FAILED:
            conv.update(status="active")
        if not any(role == "user" for _, role, _ in conv.event_names()):
            # It failed before its first event (a refused profile, say): the retry
            # carries the task and the Q&A, or the agent would never see them.
            text = onboarding.work_brief(conv).rstrip() + "\n\n" + text
        conv.append_event("user", text)
        record.commit(ws, conv.id, "input", agent=conv.meta().get("agent"), author=author)
    elif state is State.KILLED:
        raise StateError(f"conversation {conv.id!r} was killed; fork it or start a new one")
    else:
        raise StateError(
            f"conversation {conv.id!r} is {state}; wait until it is idle or asks questions"
        )


def deliver(ws: Workspace, conv: Conversation) -> bool:
    """Turn unread mail from ``conv``'s caller into its next input, in one commit.

    The caller holds ``conv``'s run lock. Returns True when there was input, i.e.
    the conversation has work to do again.
    """
    if tree.state_of(conv) not in TAKES_INPUT or conv.meta().get("mode") == "template":
        return False
    pending = mail.pending_input(ws, conv.id)
    if not pending:
        return False
    mail.mark_read(ws, conv.id, pending, commit=False)
    text = mail.as_input(pending)
    state = tree.state_of(conv)
    if state in (State.IDLE, State.FAILED):
        if state is State.FAILED:
            conv.update(status="active")
        conv.append_event("user", text, {"mail": [m.id for m in pending]})
        # The input and the read marks in one commit; not the (maybe running) children.
        paths = [
            *runs.own_paths(ws, conv),
            *(ws.rel(mail.message_path(ws, conv.id, m.id)) for m in pending),
        ]
        record.commit(
            ws, conv.id, "input", paths=paths, agent=conv.meta().get("agent"), note="(mail)"
        )
    else:
        submit(ws, conv, text)  # task or answers; commits the directory, read marks included
    return True
