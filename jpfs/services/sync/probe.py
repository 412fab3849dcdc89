"""Fetches of the record made for claims: several at once, each shared by the claims it
began after.

After winning a lease, a claimant must see the remote's record as it was *after* the
claim (the previous holder pushed its work with the release), unless what it already
knows suffices (:mod:`jpfs.services.sync.claiming`). A fetch begun after one
claim serves every claim made before it began, so claims made together share one; but a
claim made while a fetch is in flight cannot use that one, and should not wait for it to
end before starting its own. Each fetch therefore writes a tracking ref of its own (git
locks the ref a fetch writes), from a few slots.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path

from jpfs.errors import GitError
from jpfs.infra.git import refs
from jpfs.infra.git import remote as gitremote

_SLOTS = 4


class Probes:
    def __init__(
        self,
        repo: Path,
        remote: str,
        branch: str,
        prefix: str,
        around: Callable[[], AbstractContextManager[object]],
        common: Callable[[], list[str]] = list,
        via: Sequence[str] = (),
    ) -> None:
        """``prefix``: the slots' refs are ``<prefix><n>``; ``around()``: a context
        manager wrapped around each fetch (timing, reachability)."""
        self.repo, self.remote, self.branch, self.prefix = repo, remote, branch, prefix
        self.around = around
        self.common = common  # refs the remote surely has, to negotiate from
        self.via = via
        self._cv = threading.Condition()
        self._flying: dict[int, float] = {}  # slot -> when its fetch began
        # When the newest finished fetch began, and the tip it found.
        self._done: tuple[float, str | None] = (float("-inf"), None)

    def tip_since(self, moment: float) -> str | None:
        """The remote's record tip as a fetch begun after ``moment`` saw it (None: the
        remote has no record yet); its objects are here."""
        with self._cv:
            while True:
                began, tip = self._done
                if began > moment:
                    return tip
                if not any(start > moment for start in self._flying.values()):
                    free = [n for n in range(_SLOTS) if n not in self._flying]
                    if free:
                        slot, began = free[0], time.monotonic()
                        self._flying[slot] = began
                        break
                self._cv.wait()  # one in flight will do, or a slot frees
        fetched: tuple[str | None] | None = None  # set once the fetch succeeded
        try:
            fetched = (self._fetch(slot),)
        finally:
            with self._cv:
                del self._flying[slot]
                if fetched is not None and began > self._done[0]:
                    self._done = (began, fetched[0])
                self._cv.notify_all()
        return fetched[0]

    def _fetch(self, slot: int) -> str | None:
        ref = f"{self.prefix}{slot}"
        with self.around():
            try:
                gitremote.fetch(
                    self.repo,
                    self.remote,
                    [f"+refs/heads/{self.branch}:{ref}"],
                    prune=False,
                    negotiate=self.common(),
                    via=self.via,
                )
            except GitError as exc:
                if "couldn't find remote ref" not in str(exc):
                    raise
                return None
        return refs.resolve(self.repo, ref)
