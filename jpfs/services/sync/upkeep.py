"""What a daemon's engine keeps tidy on the remote besides its cycles, each in a push of
its own (nothing else waits on it or fails with it): its presence, said at the first
cycle and when due, deleted at stop (:mod:`.presence`); and what machines left behind,
swept: tombstones unchanged for ``age`` seconds, presences for twice their lifetime
(protocol/sync.md, "A lease is released together with the work", "A daemon says it is
there"). Any machine may sweep: each deletion is a compare-and-swap of its own.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from jpfs.errors import GitError
from jpfs.infra.git.remote import PushResult, Update
from jpfs.services.sync.leases import LeaseBook
from jpfs.services.sync.presence import Presence

log = logging.getLogger("jpfs.services.sync")

# A push of ``updates`` counted under a timing step: (step, updates, atomic) -> result.
Push = Callable[[str, Sequence[Update], bool], PushResult]


class Upkeep:
    def __init__(
        self,
        book: LeaseBook,
        presence: Presence,
        age: float,
        push: Push,
        *,
        remote: str,
        announcing: bool,
    ) -> None:
        """``age``: how long a tombstone lives (and a presence, unrenewed); ``remote``:
        the remote's name, for messages; ``announcing``: this engine keeps a presence (a
        daemon's)."""
        self.book, self.presence, self.age, self._push = book, presence, age, push
        self.remote = remote
        self.announcing = announcing
        self._swept = time.monotonic()

    def sweep(self) -> None:
        """Delete the tombstones and presences left unchanged too long (looked for every
        half ``age``)."""
        now = time.monotonic()
        if now - self._swept < self.age / 2:
            return
        self._swept = now
        old = [*self.book.tombstones(self.age), *self.presence.stale(now)]
        if old:
            self._push("sweep", [Update(ref, None, oid) for ref, oid in old], False)

    def announce(self) -> None:
        """Push our presence when it is due. A refusal is said once, and ends it."""
        began = time.monotonic()
        update = self.presence.due(began) if self.announcing else None
        if update is None or update.new is None:
            return
        result = self._push("present", [update], True)
        if result.ok:
            self.presence.pushed(update.new, began)
        elif refused := result.refusal():
            self.presence.refused = refused
            log.warning(
                "sync: %s refused this machine's presence: %s; the daemon goes on without"
                " it (let this machine push refs/jpfs/machines/* for its peers to count it"
                " before it holds a lease)",
                self.remote,
                refused,
            )

    def leave(self) -> None:
        """Delete our presence, if we said it (at stop: peers stop counting us at once)."""
        leaving = self.presence.leaving()
        if leaving is None:
            return
        try:
            self._push("present", [leaving], True)
        except GitError as exc:  # the peers sweep it in its time
            log.info("sync: this machine's presence stays on %s: %s", self.remote, exc)
