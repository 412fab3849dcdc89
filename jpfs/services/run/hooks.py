"""What the owner of a run adds to the run loop: hooks, not a subclass of the runner.

A :class:`~jpfs.services.run.runtime.Runner` calls them at four points: before each
model call (one may raise :class:`~jpfs.errors.Cancelled` to stop the run there), after
each reply, after each commit of the run's own files, and with each note of progress.
The daemon's are :class:`jpfs.services.daemon.actions.RunWatch`: it stops its runs between
steps, and counts what ``daemon status`` shows of them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from jpfs.core.conversation import Conversation
from jpfs.infra.providers.base import Reply


def _before_call(conv: Conversation) -> None:
    pass


def _after_call(conv: Conversation, reply: Reply) -> None:
    pass


def _after_commit(conv: Conversation, event: str) -> None:
    pass


def _note(text: str) -> None:
    pass


@dataclass(frozen=True)
class Hooks:
    before_call: Callable[[Conversation], None] = _before_call
    after_call: Callable[[Conversation, Reply], None] = _after_call
    after_commit: Callable[[Conversation, str], None] = _after_commit
    note: Callable[[str], None] = _note


NONE = Hooks()
