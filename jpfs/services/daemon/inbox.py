"""What other threads post to the reconciler's thread: the watcher's batches of file
events (:class:`~jpfs.services.daemon.watcher.Batch`), and the messages below."""

from __future__ import annotations

import queue
from dataclasses import dataclass

from jpfs.services.daemon.watcher import Batch


@dataclass(frozen=True)
class RunDone:
    """A run ended: look at its conversation again ``after`` seconds from now."""

    conv_id: str
    after: float = 0.0


@dataclass(frozen=True)
class Rescan:
    """Look at every conversation (a signal asked for it)."""


@dataclass(frozen=True)
class RecordMoved:
    """The sync took a peer's record in, moving the branch from ``before`` to ``after``."""

    before: str
    after: str


Message = Batch | RunDone | Rescan | RecordMoved

# What the daemon's waits take items from: see Reconciler.inbox for why not SimpleQueue.
Inbox = queue.Queue
