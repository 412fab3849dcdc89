"""Group commit: ``commit()`` calls from threads of one process fold into few commits.

Calls queue up; the first caller becomes leader and runs everything queued as one batch
(the committer turns consecutive changes with the same author into one commit), the
others wait on a condition and get the sha of the commit holding their change. A leader
that sees other writers active waits up to 5 ms for them to re-queue, so concurrent
writers fold into one commit per round. Processes serialise on the index and ref locks.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pygit2

from jpfs.errors import GitError
from jpfs.infra.committer.change import Change
from jpfs.infra.committer.failures import translate
from jpfs.infra.committer.worktree import Blob, Dir

_GATHER_SECONDS = 0.005
_ACTIVE_SECONDS = 0.5


class Pending:
    """One queued change and, once the leader is through, its outcome."""

    __slots__ = ("_error", "_sha", "change", "done", "heal", "paths", "run", "snapshot")

    def __init__(self, change: Change, paths: tuple[str, ...], *, heal: bool = False) -> None:
        self.change = change
        self.paths = paths
        self.heal = heal
        self.snapshot: list[Blob | Dir | None] = []
        self.run: int | None = None
        self.done = False
        self._sha: str | None = None
        self._error: BaseException | None = None

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
        mutex = threading.Lock()
        self._cv = threading.Condition(mutex)  # followers wait here for results
        self._arrivals = threading.Condition(mutex)  # a gathering leader waits here
        self._queue: list[Pending] = []
        self._leading = False
        self._writers: dict[int, float] = {}  # thread id -> when it last submitted
        self._closed = False

    def close(self) -> bool:
        """Refuse further changes and wait for a running batch; False if already closed."""
        with self._cv:
            closing = not self._closed
            self._closed = True
            while self._leading:
                self._cv.wait()
        return closing

    def submit(self, pending: Pending) -> str | None:
        """Queue ``pending`` and return its outcome (a sha or None), raising its error."""
        with self._cv:
            if self._closed:
                raise GitError("the committer is closed")
            self._queue.append(pending)
            if not pending.heal:
                self._writers[threading.get_ident()] = time.monotonic()
            self._arrivals.notify()
            while not pending.done and self._leading:
                self._cv.wait()
            if pending.done:
                return pending.outcome()
            self._leading = True
            # Under concurrency, the writers of the last batch are re-queueing right now;
            # a moment's wait folds every active writer into one commit, instead of
            # commits alternating between groups (each costs a full index write).
            now = time.monotonic()
            self._writers = {t: w for t, w in self._writers.items() if now - w < _ACTIVE_SECONDS}
            deadline = now + _GATHER_SECONDS
            while len(self._queue) < len(self._writers):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._arrivals.wait(remaining)
            batch, self._queue = self._queue, []
        try:
            try:
                self._run(batch)
            except pygit2.GitError:
                # libgit2 fails hard (no refresh) when a packfile it indexed was deleted
                # by a concurrent `git repack`/`git gc`: reopen and retry what is left.
                # Nothing was committed for unfinished items (the ref moves last).
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
        finally:
            with self._cv:
                self._leading = False
                self._cv.notify_all()
        return pending.outcome()
