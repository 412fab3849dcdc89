"""What the daemon does to one conversation: decide, adopt, record a failure, run.

:func:`needs` is the one place that says, from the files alone, what a conversation
needs from the daemon. Everything else (events, scans, the pool) only decides *when*
to ask it.
"""

from __future__ import annotations

import enum
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass

from jpfs.core import failures, frontmatter, record, tree
from jpfs.core.conversation import ANSWERS, INBOX, QUESTIONS, Conversation
from jpfs.core.state import AGENT_ACTS, ROUND_RE, State, derive, has_content, split_rounds
from jpfs.core.workspace import Workspace
from jpfs.errors import Cancelled, FormatError
from jpfs.infra.providers.base import Reply
from jpfs.services.conversations import lifecycle
from jpfs.services.run.hooks import Hooks

log = logging.getLogger("jpfs.services.daemon")


class Need(enum.Enum):
    NOTHING = "nothing"
    ADOPT = "adopt"  # conversation.toml missing or without [config]: fill in the defaults
    RUN = "run"  # the agent must act (onboarding, running, finishing)
    BROKEN = "broken"  # the files cannot be read: record the error in the conversation


@dataclass(frozen=True)
class Verdict:
    need: Need
    state: State | None = None
    reason: str = ""


def needs(ws: Workspace, conv: Conversation) -> Verdict:
    """What ``conv`` needs from the daemon, decided from its files alone.

    Besides the state (:mod:`jpfs.core.state`): unread mail from its caller in ``inbox/``
    is input for a conversation that takes input (empty, waiting, idle, failed); a run
    turns it into the next user input (:func:`jpfs.services.conversations.inputs.deliver`).
    """
    if not conv.exists():
        return Verdict(Need.NOTHING)
    kept = failures.of(ws.local_dir, conv)
    if kept is not None:  # failed, though its files could not say so: nothing to run
        return Verdict(Need.NOTHING, State.FAILED)
    try:
        meta = conv.meta()
        if "config" not in meta:
            return Verdict(Need.ADOPT)
        state = derive(tree.snapshot(conv, meta))
        if state in AGENT_ACTS:
            return Verdict(Need.RUN, state)
        if state is State.WAITING:
            misplaced = _misplaced_answers(conv)
            if misplaced:
                return Verdict(Need.NOTHING, state, misplaced)
        if _has_mail(conv):
            from jpfs.services.conversations import inputs, mail

            if state in inputs.TAKES_INPUT and mail.pending_input(ws, conv.id):
                return Verdict(Need.RUN, state, "mail from its caller")
    except FormatError as exc:
        return Verdict(Need.BROKEN, reason=str(exc))
    return Verdict(Need.NOTHING, state)


def _misplaced_answers(conv: Conversation) -> str:
    """Why answers written in ``answers.md`` do not count yet ("" when none are)."""
    answers = conv.read(ANSWERS) or ""
    rounds = split_rounds(conv.read(QUESTIONS) or "")
    if not rounds or not has_content(ROUND_RE.sub("", answers)):
        return ""
    wanted = max(rounds)
    if wanted in split_rounds(answers):
        return ""
    return (
        f"answers.md has text but no '## Round {wanted}' heading, so the agent is still"
        f" waiting: put your answers under a line '## Round {wanted}'"
    )


def _has_mail(conv: Conversation) -> bool:
    try:
        return any(not name.startswith(".") for name in os.listdir(conv.path / INBOX))
    except OSError:
        return False


def adopt(ws: Workspace, conv: Conversation, base: str | None) -> str:
    """Fill conversation.toml of a conversation a human started with only task.md
    (:func:`jpfs.services.conversations.lifecycle.adopt`)."""
    return lifecycle.adopt(ws, conv, base)


def record_failure(ws: Workspace, conv: Conversation, message: str) -> bool:
    """Write an error event (and status failed when the record is readable), once.

    Returns False when the same error is already the last event (a rescan, a restart).
    Once written, a failure kept on this machine for want of it (:mod:`jpfs.core.failures`)
    is over.
    """
    message = message.strip() or "error"
    names = conv.event_names()
    if names and names[-1][1] == "error":
        try:
            _, body = frontmatter.read(conv.events_dir / names[-1][2], conv.root)
        except (FormatError, OSError):
            body = ""
        if body.strip() == message:
            failures.clear(ws.local_dir, conv.id)
            return False
    conv.append_event("error", message + "\n")
    try:
        conv.update(status="failed")
    except FormatError:
        pass  # conversation.toml itself is what is broken; the error event says so
    failures.clear(ws.local_dir, conv.id)  # the files say it now
    record.commit(ws, conv.id, "error", note=message.splitlines()[0][:80])
    return True


@dataclass
class RunWatch:
    """The daemon's hooks on one runner (:class:`jpfs.services.run.hooks.Hooks`): its
    runs stop cleanly between steps once ``stopping`` is set; and what ``daemon status``
    shows of them.

    A step in flight (a model call, a tool) completes and is committed; the next one
    does not start. ``cancel`` (the force path, the runner's own) interrupts the step
    itself.
    """

    stopping: threading.Event
    cancel: threading.Event
    provider_calls: int = 0
    tokens: int = 0
    last_note: str = ""
    on_call: Callable[[], None] | None = None  # at each model call (the pool's)

    def hooks(self) -> Hooks:
        return Hooks(self.before_call, self.after_call, self.after_commit, self.note)

    def before_call(self, conv: Conversation) -> None:
        if self.stopping.is_set():
            self.cancel.set()
            raise Cancelled(f"run of {conv.id} stopped by the daemon")
        self.provider_calls += 1
        if self.on_call is not None:
            self.on_call()

    def after_call(self, conv: Conversation, reply: Reply) -> None:
        self.tokens += reply.usage.total

    def after_commit(self, conv: Conversation, event: str) -> None:
        if self.stopping.is_set():
            self.cancel.set()

    def note(self, text: str) -> None:
        self.last_note = text
        log.info("%s", text)
