"""Group commit: ``commit()`` calls from threads of one process fold into few commits.

Calls queue up; the first caller becomes leader and runs everything queued as one batch
(the committer turns consecutive changes with the same author into one commit), the
others wait and get the sha of the commit holding their change. Under concurrency the
writers of the previous batch (if active: a commit in the last 0.5 s) are re-queueing
as a leader starts, so it waits for those not yet queued while they keep arriving (each
within 5 ms of the last; 30 ms at most): concurrent writers fold into one commit per
round rather than alternating between smaller ones, each paying a commit and competing
with the other writers' Python for the interpreter. Only they are waited for, not every
thread that committed lately: one that committed once and went on to other work would
hold every round until the timeout. A writer that was not in the last batch but comes
while the leader gathers (a round that was split across two batches: 50 runs whose
first commits were staggered) is waited for too, and keeps the gathering open like a
new writer: otherwise it completed the count in an expected writer's place, and the
split went on. When it is done, the first change queued meanwhile
leads the next batch. Each waiter sleeps on a lock of its own, released once for it
alone: with 50 writers, waking them all through one condition (each then taking its
mutex in turn) cost more system time than the commits. Processes serialise on the
index and ref locks.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pygit2

from jpfs.errors import GitError, RepositoryFault
from jpfs.infra.committer.change import Change
from jpfs.infra.committer.failures import translate
from jpfs.infra.committer.worktree import Blob, Dir

_GATHER_GAP = 0.005  # a leader stops gathering when no change came for this long
_GATHER_MAX = 0.030  # or after this long in all
_ACTIVE_SECONDS = 0.5


class Pending:
    """One queued change and, once the leader is through, its outcome."""

    __slots__ = (
        "_error",
        "_sha",
        "_wake",
        "change",
        "created",
        "creates",
        "done",
        "heal",
        "lead",
        "paths",
        "run",
        "snapshot",
        "writer",
    )

    def __init__(
        self,
        change: Change,
        paths: tuple[str, ...],
        *,
        creates: tuple[tuple[str, str], ...] = (),
        heal: bool = False,
    ) -> None:
        self.change = change
        self.paths = paths
        self.creates = creates  # checked paths, as ``paths``
        self.created = False  # the files of ``creates`` are made (a retry makes them once)
        self.heal = heal
        self.writer: int | None = None  # the submitting thread (None: a heal)
        self.snapshot: list[Blob | Dir | None] = []
        self.run: int | None = None
        self.done = False
        self.lead = False  # asked to lead the next batch
        self._sha: str | None = None
        self._error: BaseException | None = None
        self._wake = threading.Lock()
        self._wake.acquire()  # held until the change is done or asked to lead

    def wait(self) -> None:
        self._wake.acquire()

    def wake(self) -> None:
        self._wake.release()

    def succeed(self, sha: str | None) -> None:
        self._sha, self.done = sha, True

    def fail(self, error: BaseException) -> None:
        self._error, self.done = error, True

    def outcome(self) -> str | None:
        if self._error is not None:
            raise self._error
        return self._sha


class GroupCommit:
    """The queue and its leader; ``run`` commits a batch on the leader's thread.

    ``reopen`` opens the repository afresh before the one retry of a failed batch.
    """

    def __init__(self, run: Callable[[list[Pending]], None], reopen: Callable[[], None]) -> None:
        self._run = run
        self._reopen = reopen
        self._mutex = threading.Lock()
        self._arrivals = threading.Condition(self._mutex)  # a gathering leader waits here
        self._idle = threading.Condition(self._mutex)  # close() waits here
        self._queue: list[Pending] = []
        self._leading = False
        self._writers: dict[int, float] = {}  # thread id -> when it last submitted
        self._previous: frozenset[int] = frozenset()  # the writers of the last batch
        self._wanted = 0  # changes a gathering leader waits for (0: none gathering)
        self._expected: set[int] | None = None  # the writers it waits for, meanwhile
        self._newcomers = 0  # writers first seen since the last batch was taken
        self._last_arrival = 0.0
        self._closed = False

    def close(self) -> bool:
        """Refuse further changes and wait for a running batch; False if already closed."""
        with self._mutex:
            closing = not self._closed
            self._closed = True
            while self._leading:
                self._idle.wait()
        return closing

    def submit(self, pending: Pending) -> str | None:
        """Queue ``pending`` and return its outcome (a sha or None), raising its error."""
        with self._mutex:
            if self._closed:
                raise GitError("the committer is closed")
            self._queue.append(pending)
            now = time.monotonic()
            if not pending.heal:
                me = pending.writer = threading.get_ident()
                new = now - self._writers.get(me, 0.0) >= _ACTIVE_SECONDS
                if self._expected is not None and me not in self._expected:
                    # Not among the writers the gathering leader counts on (new, or a
                    # round larger than the last batch): it must not complete the batch
                    # in an expected writer's place, and those still coming are gathered.
                    self._expected.add(me)
                    self._wanted += 1
                    new = True
                if new:
                    self._newcomers += 1
                self._writers[me] = now
            self._last_arrival = now
            follow = self._leading
            if not follow:
                self._leading = True
            elif len(self._queue) >= self._wanted:
                # Only the arrival that completes the batch wakes a gathering leader,
                # which otherwise sleeps until the arrivals pause (see below).
                self._arrivals.notify()
        if follow:
            pending.wait()
            if pending.done:
                return pending.outcome()
            # Asked to lead: the previous leader left this change first in the queue.
        with self._mutex:
            # Under concurrency, the writers of the last batch are re-queueing right now;
            # a moment's wait folds them into one commit, instead of commits alternating
            # between groups (each costs a full index write).
            now = time.monotonic()
            self._writers = {t: w for t, w in self._writers.items() if now - w < _ACTIVE_SECONDS}
            expected = {t for t in self._previous if t in self._writers}
            heals = 0
            for queued in self._queue:
                if queued.writer is None:
                    heals += 1
                else:
                    expected.add(queued.writer)
            self._wanted = len(expected) + heals
            self._expected = expected
            cap = now + _GATHER_MAX
            self._last_arrival = max(self._last_arrival, now)
            # Writers not seen before (threads starting together) are gathered while
            # they keep arriving, too: counting only the known ones, the first round of
            # 50 new threads split into a batch of a few and one of the rest.
            while len(self._queue) < self._wanted or self._newcomers >= 2:
                remaining = min(self._last_arrival + _GATHER_GAP, cap) - time.monotonic()
                if remaining <= 0:
                    break
                self._arrivals.wait(remaining)
            self._wanted = 0
            self._expected = None
            self._newcomers = 0
            batch, self._queue = self._queue, []
            writers = frozenset(p.writer for p in batch if p.writer is not None)
            if writers:  # a heal alone does not stand for the writers
                self._previous = writers
        try:
            self._run_safely(batch)
        finally:
            with self._mutex:
                successor = self._queue[0] if self._queue else None
                if successor is not None:
                    successor.lead = True
                else:
                    self._leading = False
                    self._idle.notify_all()
            for item in batch:
                if item is not pending:
                    item.wake()
            if successor is not None:
                successor.wake()
        return pending.outcome()

    def _run_safely(self, batch: list[Pending]) -> None:
        """Run ``batch``; every item ends done, with its outcome or the error."""
        try:
            try:
                self._run(batch)
            except (pygit2.GitError, RepositoryFault) as exc:
                # libgit2 fails hard (no refresh) when a packfile it indexed was deleted
                # by a concurrent `git repack`/`git gc`: reopen and retry what is left.
                # Nothing was committed for unfinished items (the ref moves last).
                if not isinstance(exc, pygit2.GitError) and not isinstance(
                    exc.__cause__, pygit2.GitError
                ):
                    raise
                self._reopen()
                self._run([item for item in batch if not item.done])
        except (pygit2.GitError, OSError) as exc:
            error: BaseException = translate(exc)
            error.__cause__ = exc
            for item in batch:
                if not item.done:
                    item.fail(error)
        except BaseException as exc:
            # JpfsErrors are for the user; anything else is a bug every waiter reports.
            for item in batch:
                if not item.done:
                    item.fail(exc)
            if not isinstance(exc, Exception):
                raise
