"""Claiming a conversation's lease, and acting only on its files as the remote has them.

A claim is a compare-and-swap push of the lease ref (:mod:`jpfs.services.sync.batch`
pushes the claims made together in one push). Won, the files must hold whatever the
previous holder pushed with its release before the daemon acts on them. Three cases,
cheapest first (protocol/sync.md, "Claims"):

* the lease was released: its value (a tombstone) names the record commit holding the
  work done under it; if this clone's record has that conversation as that commit has
  it, nothing needs fetching;
* the lease was absent at a fetch of ours begun less than ``sync.lease / 2`` ago (at
  most 30 s): any release since would have left a tombstone there (tombstones live
  ``2 x sync.lease``, at least a minute), so the record of that fetch holds every
  release's work;
* otherwise (a takeover, an old view), the record is fetched once more after the claim
  (:mod:`jpfs.services.sync.probe`), and merged first if it changed that conversation.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

from jpfs.errors import GitError, JpfsError
from jpfs.infra.git import refs
from jpfs.infra.git import remote as gitremote
from jpfs.infra.git.remote import Update
from jpfs.services.sync.batch import ClaimBatch
from jpfs.services.sync.leases import LeaseBook, Observed, lease_ref
from jpfs.services.sync.probe import Probes
from jpfs.services.sync.record import Integration
from jpfs.services.sync.stats import SyncStats, Timings

log = logging.getLogger("jpfs.services.sync")

# The longest a view of "no lease" is trusted (half a lease, at most this).
FRESH_MAX = 30.0
# Waits before trying a merge again when the record worktree is busy (a claim).
_BUSY_RETRIES = (0.02, 0.05, 0.1, 0.2, 0.4)
# Lost claims remembered before those older than the last fetch are dropped.
_LOST_KEPT = 256


class Engine(Protocol):
    """What claims need of their sync engine (:class:`jpfs.services.sync.engine.SyncEngine`)."""

    repo: Path
    remote: str
    branch: str
    machine: str
    track_record: str
    via: tuple[str, ...]  # git settings for reaching the remote (the SSH command)
    observed_at: float  # when the fetch whose leases the book holds began
    book: LeaseBook
    stats: SyncStats
    timings: Timings
    refusal: dict[str, str]

    def probing(self) -> AbstractContextManager[None]: ...
    def common_ground(self) -> list[str]: ...
    def fetch(self) -> dict[str, str]: ...
    def pull(self, *, fetched: bool = False) -> Integration: ...
    def pull_since(self, moment: float) -> Integration: ...
    def release(self, conv_id: str) -> None: ...


class Claimer:
    """The claims of one sync engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.book = engine.book
        self.batch = ClaimBatch(self._push)
        # Claims fetch the record into refs of their own: no wait on the cycle's fetch.
        self.probes = Probes(
            engine.repo,
            engine.remote,
            engine.branch,
            f"refs/jpfs/sync/{engine.remote}/claimed-",
            engine.probing,
            engine.common_ground,
            engine.via,
        )
        # How old a view of an absent lease may be: shorter than any machine's tombstones
        # live (leases.TOMBSTONE_MIN_AGE), whatever each one's sync.lease.
        self.fresh = min(self.book.duration / 2, FRESH_MAX)
        # Leases whose claim lost since the last fetch: another machine holds them though
        # our view says free; not claimed again until a fetch shows them (a second push
        # could only lose too).
        self.lost = LostClaims()

    def _push(self, updates: Sequence[Update]) -> gitremote.PushResult:
        """One push of the claims made together (each won or lost alone)."""
        engine = self.engine
        with engine.timings.step("claim-push"):
            return gitremote.push(engine.repo, engine.remote, updates, atomic=False, via=engine.via)

    def claim(self, conv_id: str, *, looked: bool = False) -> bool:
        engine, book = self.engine, self.book
        if book.holds(conv_id):
            return True
        ref = lease_ref(conv_id)
        view = engine.observed_at  # the fetch the book's view comes from
        seen = book.seen(ref)
        if not self._could_win(ref, seen):
            engine.stats.claims_lost += 1
            return False
        oid, seq = book.make(conv_id)
        with engine.timings.step("claim"):
            won = self.batch.claim(Update(ref, oid, seen.oid if seen else None))
        if not won:
            engine.stats.claims_lost += 1
            engine.timings.add("lost", 0.0)
            if seen is None and not looked and not self.fresh_view(view):
                # Our view was old (or there was none yet: a process without a daemon):
                # the lease may just be released. Look, and try once more.
                if engine.observed_at == view:
                    engine.fetch()
                return self.claim(conv_id, looked=True)
            self.lost.add(ref, time.monotonic(), engine.observed_at)
            return False
        if seen is not None and seen.released is None:
            engine.stats.takeovers += 1
            log.info("sync: took over the lease on %s (unchanged for %gs)", conv_id, book.duration)
        # Only a fetch begun after the remote took our claim is sure to see what the
        # previous holder pushed with its release.
        claimed = time.monotonic()
        engine.stats.claims_won += 1
        book.taken(conv_id, oid, seq, previous=seen)
        try:
            if self.current(conv_id, claimed, seen):
                return True
            with engine.timings.step("claim-pull"):
                outcome = engine.pull_since(claimed)
            pause = threading.Event()
            for delay in _BUSY_RETRIES:
                if outcome.kind != "busy":
                    break
                # Mostly the index lock of a commit in flight here: gone in milliseconds.
                pause.wait(delay)
                outcome = engine.pull()
        except JpfsError:
            self.give_back(conv_id)
            raise
        if outcome.kind == "busy":
            log.info(
                "sync: %s claimed, but the record could not be merged yet (%s)",
                conv_id,
                outcome.reason,
            )
            self.give_back(conv_id)
            engine.refusal[conv_id] = f"its files could not be brought up to date: {outcome.reason}"
            return False
        return True

    def looks_free(self, conv_id: str) -> bool:
        """Whether a claim of ``conv_id`` could win as far as we know: no lease held on
        it in our view, and no claim of ours lost since that view."""
        ref = lease_ref(conv_id)
        return self._could_win(ref, self.book.seen(ref))

    def _could_win(self, ref: str, seen: Observed | None) -> bool:
        return self.book.free(seen) and not self.lost_since_view(ref)

    def unseen(self) -> int:
        """How many claims of ours lost since the fetch our view comes from began: each
        a lease another machine holds that our view shows free."""
        return self.lost.since(self.engine.observed_at)

    def lost_since_view(self, ref: str) -> bool:
        """Whether a claim of ``ref`` lost after the fetch our view of the leases comes
        from began (forgotten once a fetch began after it)."""
        return self.lost.lost_since(ref, self.engine.observed_at)

    def current(self, conv_id: str, claimed: float, seen: Observed | None) -> bool:
        """Whether this clone's record holds every change the remote has under
        ``conv_id`` (see the module's docstring). A forfeit not yet taken back always
        merges first."""
        engine = self.engine
        if self.book.forfeits():
            return False
        ours = refs.resolve(engine.repo, f"refs/heads/{engine.branch}")
        if ours is None:
            return False
        basis: str | None
        if seen is not None and seen.released is not None:
            basis = seen.released
        elif seen is None and self.fresh_view():
            basis = refs.resolve(engine.repo, engine.track_record)
            if basis is None:
                return True  # that fetch found no record on the remote: nobody worked
        else:
            basis = None
        if basis is not None:
            try:
                if not refs.changed_since_fork(engine.repo, ours, basis, conv_id):
                    engine.timings.add("claim-known", 0.0)
                    return True
            except GitError:
                pass  # that commit is not here yet: ask the remote
        tip = self.probes.tip_since(claimed)
        if tip is None:
            return True  # the remote has no record yet: nobody worked on it
        return not refs.changed_since_fork(engine.repo, ours, tip, conv_id)

    def fresh_view(self, view: float | None = None) -> bool:
        """Whether the leases seen (as of the fetch begun at ``view``; default: the
        last) come from a fetch begun less than half a lease ago."""
        began = self.engine.observed_at if view is None else view
        return time.monotonic() - began < self.fresh

    def give_back(self, conv_id: str) -> None:
        """Put a lease under which nothing was done back as it was before our claim, at
        once and on its own (a release normally waits for the push of the work done
        under it)."""
        lease = self.book.get(conv_id)
        if lease is None:
            return
        previous = lease.previous.oid if lease.previous is not None else None
        try:
            with self.engine.timings.step("give-back"):
                done = gitremote.push(
                    self.engine.repo,
                    self.engine.remote,
                    [Update(lease.ref, previous, lease.oid)],
                    via=self.engine.via,
                )
        except JpfsError:
            done = None
        if done is not None and done.ok:
            self.book.given_back(conv_id)
        else:
            self.engine.release(conv_id)  # the next push with the record takes it

    def rank(self, conv_id: str) -> int:
        """Where this machine stands among those that would pick ``conv_id`` (0: first):
        its place in the rendezvous hash of the conversation among the machines holding
        leases now or releasing one lately (and this one)."""
        return self.pick(conv_id)[0]

    def pick(self, conv_id: str) -> tuple[int, int]:
        """The order in which this machine starts queued conversations, lowest first:
        its place among the machines for ``conv_id`` (:meth:`rank`; peers that see the
        same queue start on different conversations, and two that ran out of their own
        never reach for the same one); then, among those another machine picks first,
        the one that machine will reach last (each queues new work in the order of its
        own hash, :meth:`order`), so that taking it seldom races the owner."""
        scores = [_rank(machine, conv_id) for machine in self.engine.stats.working]
        mine = self.order(conv_id)
        place = sum(1 for score in scores if score > mine)
        if place == 0:
            return (0, 0)
        return (place, -int.from_bytes(max(scores), "big"))

    def order(self, conv_id: str) -> bytes:
        """This machine's order for new work queued together (the daemon's reconciler
        sorts by it): its rendezvous score, which peers can compute too."""
        return _rank(self.engine.machine, conv_id)


class LostClaims:
    """The leases whose claim by this machine lost (ref -> when), each until a fetch
    begun after it; thread-safe: workers' claims add to it while the pool counts it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._at: dict[str, float] = {}

    def add(self, ref: str, when: float, view: float) -> None:
        """``ref``'s claim lost at ``when``; ``view``: when the last fetch began (the
        ones it has shown since are dropped once many are kept)."""
        with self._lock:
            if len(self._at) > _LOST_KEPT:
                self._at = {r: t for r, t in self._at.items() if t > view}
            self._at[ref] = when

    def lost_since(self, ref: str, view: float) -> bool:
        """Whether ``ref``'s claim lost after ``view`` (forgotten if before it)."""
        with self._lock:
            lost = self._at.get(ref)
            if lost is None:
                return False
            if lost > view:
                return True
            del self._at[ref]
            return False

    def since(self, view: float) -> int:
        """How many claims lost after ``view``."""
        with self._lock:
            return sum(1 for lost in self._at.values() if lost > view)


def _rank(machine: str, conv_id: str) -> bytes:
    return hashlib.blake2b(f"{machine}\0{conv_id}".encode(), digest_size=8).digest()
