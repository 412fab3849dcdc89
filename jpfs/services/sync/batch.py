"""Claims pushed together: one push carries the claims a daemon's free workers make at once.

When a wave of runs ends, a daemon's free workers claim their next conversations within
milliseconds of one another. Each claim is its own compare-and-swap on its own lease
ref, so they need not wait for one another, only for a connection to the remote: the
first claimant pushes at once, and the claims that arrive meanwhile go together in the
next push (group commit); the first waits a few milliseconds for the others of its burst,
and a second push may fly beside the first. A push is not atomic: each lease is won or
lost on its own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from jpfs.errors import GitError
from jpfs.infra.git.remote import PushResult, Update

# What a refused push tells the user to do (a claim's or the record's).
ALLOW = (
    "; sharing the record, jpfs pushes its record branch and refs/jpfs/leases/* there:"
    ' let this machine push them (protocol/sync.md, "When things fail")'
)


@dataclass
class _Request:
    update: Update
    done: bool = False
    won: bool = False
    error: BaseException | None = None


class ClaimBatch:
    """Push claims (lease updates with their expectations) in batches; thread-safe."""

    def __init__(
        self,
        push: Callable[[Sequence[Update]], PushResult],
        *,
        gather: float = 0.005,
        parallel: int = 2,
    ) -> None:
        self._push = push
        # The free workers of a daemon claim within a few milliseconds of one another
        # (a wave of runs ended, or new work arrived): the first waits that long for them.
        self.gather = gather
        # A claim made while a push flies need not wait for its end: a second may fly.
        self.parallel = parallel
        self._cv = threading.Condition()
        self._queue: list[_Request] = []
        self._gathering = False
        self._flying = 0

    def claim(self, update: Update) -> bool:
        """Whether the remote took ``update`` (False: another value was there)."""
        request = _Request(update)
        with self._cv:
            if any(queued.update.ref == update.ref for queued in self._queue):
                return False  # another thread here claims it in this very push: that one acts
            self._queue.append(request)
            while not request.done:
                if not self._gathering and self._flying < self.parallel and request in self._queue:
                    break  # lead the next push
                self._cv.wait()
            else:
                return self._outcome(request)
            self._gathering = True
            self._cv.wait(self.gather)  # claims of the same burst join meanwhile
            batch, self._queue = self._queue, []
            self._gathering = False
            self._flying += 1
            self._cv.notify_all()  # claims made from now on may lead a push of their own
        try:
            result = self._push([queued.update for queued in batch])
            for queued in batch:
                queued.won = result.took(queued.update.ref)
                refused = result.refusal(queued.update.ref)
                if refused:  # not lost to a peer: refused (a hook, a protected ref)
                    queued.error = GitError(f"the remote refused the claim: {refused}{ALLOW}")
        except BaseException as exc:  # each claimant raises it: none may think it won
            for queued in batch:
                queued.error = exc
        finally:
            with self._cv:
                for queued in batch:
                    queued.done = True
                self._flying -= 1
                self._cv.notify_all()
        return self._outcome(request)

    @staticmethod
    def _outcome(request: _Request) -> bool:
        if request.error is not None:
            raise request.error
        return request.won
