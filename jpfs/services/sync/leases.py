"""Leases: which machine may act on a conversation, decided by the remote, not by clocks.

A lease is a ref on the remote, ``refs/jpfs/leases/<key>`` (``key`` = a flat digest of
the conversation id), pointing at a tiny commit whose message says who holds it (machine,
incarnation, a sequence number, the duration). Every change to a lease is a push with
compare-and-swap (:func:`jpfs.infra.git.remote.push`), so of two daemons claiming one
conversation exactly one wins.

Expiry uses no one's wall clock: a daemon that sees a lease *unchanged* for ``duration``
seconds of its own monotonic clock may take it over (compare-and-swap against the
value it saw). The holder renews well within that (every third of it) by pushing a new
commit. Clock skew between machines therefore cannot make two holders; a slow holder
can lose its lease, and then :mod:`jpfs.services.sync.record` forfeits its late work.

The incarnation (a fresh random id per daemon start) is what makes a restarted daemon
a different holder: it never mistakes its predecessor's lease for its own.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pygit2

from jpfs.core import ids
from jpfs.infra.git import identity

LEASE_NS = "refs/jpfs/leases/"


def lease_ref(conv_id: str) -> str:
    return LEASE_NS + ids.file_key(conv_id)


def new_incarnation() -> str:
    return uuid.uuid4().hex[:16]


@dataclass
class Lease:
    conv_id: str
    ref: str
    oid: str  # the value we last pushed: what the remote holds while we hold it
    seq: int
    renewed: float  # monotonic time of the last successful push of it
    releasing: bool = False


@dataclass(frozen=True)
class Observed:
    oid: str
    since: float  # monotonic time we first saw this value


class LeaseBook:
    """The leases this daemon holds and the ones it has seen on the remote; thread-safe."""

    def __init__(self, repo: Path, machine: str, incarnation: str, duration: float) -> None:
        self.repo = repo
        self.machine = machine
        self.incarnation = incarnation
        self.duration = duration
        self._lock = threading.Lock()
        self._held: dict[str, Lease] = {}
        self._seen: dict[str, Observed] = {}
        self._seq = 0
        self._repo: pygit2.Repository | None = None
        self.forfeited: set[str] = set()

    # -- what the remote holds -------------------------------------------------------------
    def observe(self, remote: dict[str, str]) -> None:
        """Take in the lease refs fetched from the remote (ref -> object id)."""
        now = time.monotonic()
        with self._lock:
            for ref, oid in remote.items():
                seen = self._seen.get(ref)
                if seen is None or seen.oid != oid:
                    self._seen[ref] = Observed(oid, now)
            for ref in list(self._seen):
                if ref not in remote:
                    del self._seen[ref]

    def seen(self, ref: str) -> Observed | None:
        with self._lock:
            return self._seen.get(ref)

    def remote_count(self) -> int:
        with self._lock:
            return len(self._seen)

    def expired(self, seen: Observed) -> bool:
        return time.monotonic() - seen.since >= self.duration

    def wait_for(self, conv_id: str) -> float:
        """Seconds until the lease on ``conv_id`` we saw may be taken over (0: now)."""
        seen = self.seen(lease_ref(conv_id))
        if seen is None:
            return 0.0
        return max(0.0, self.duration - (time.monotonic() - seen.since))

    # -- what we hold ----------------------------------------------------------------------
    def held(self) -> list[Lease]:
        with self._lock:
            return list(self._held.values())

    def get(self, conv_id: str) -> Lease | None:
        with self._lock:
            return self._held.get(conv_id)

    def holds(self, conv_id: str) -> bool:
        with self._lock:
            lease = self._held.get(conv_id)
            return lease is not None and not lease.releasing

    def make(self, conv_id: str) -> tuple[str, int]:
        """A new lease value for ``conv_id`` (a commit object, unique by its sequence)."""
        with self._lock:
            self._seq += 1
            seq = self._seq
        message = (
            f"jpfs lease: {conv_id}\n\n"
            f"Jpfs-Conversation: {conv_id}\n"
            f"Jpfs-Machine: {self.machine}\n"
            f"Jpfs-Incarnation: {self.incarnation}\n"
            f"Jpfs-Lease-Seq: {seq}\n"
            f"Jpfs-Lease-Seconds: {self.duration:g}\n"
            f"Jpfs-Lease-Pid: {os.getpid()}\n"
        )
        # In process (no git process per lease: a push renews every lease held).
        with self._lock:
            if self._repo is None:
                self._repo = pygit2.Repository(str(self.repo))
            signature = pygit2.Signature(identity.FALLBACK_NAME, identity.FALLBACK_EMAIL)
            tree = self._repo.TreeBuilder().write()
            oid = self._repo.create_commit(None, signature, signature, message, tree, [])
        return str(oid), seq

    def taken(self, conv_id: str, oid: str, seq: int) -> None:
        now = time.monotonic()
        with self._lock:
            self._held[conv_id] = Lease(conv_id, lease_ref(conv_id), oid, seq, now)
            self._seen[lease_ref(conv_id)] = Observed(oid, now)

    def renewed(self, conv_id: str, oid: str, seq: int) -> None:
        now = time.monotonic()
        with self._lock:
            lease = self._held.get(conv_id)
            if lease is not None:
                lease.oid, lease.seq, lease.renewed = oid, seq, now
                self._seen[lease.ref] = Observed(oid, now)

    def release(self, conv_id: str) -> None:
        """Give the lease back at the next push (with the commits made under it)."""
        with self._lock:
            lease = self._held.get(conv_id)
            if lease is not None:
                lease.releasing = True

    def released(self, conv_ids: Iterable[str]) -> None:
        with self._lock:
            for conv_id in conv_ids:
                lease = self._held.pop(conv_id, None)
                if lease is not None:
                    self._seen.pop(lease.ref, None)

    def lost(self, conv_id: str) -> None:
        """Another machine holds it now: our work on it since the last push is forfeit."""
        with self._lock:
            lease = self._held.pop(conv_id, None)
            if lease is not None:
                self._seen.pop(lease.ref, None)
            self.forfeited.add(conv_id)

    def forfeits(self) -> list[str]:
        """The conversations forfeited and not yet taken back from the remote."""
        with self._lock:
            return sorted(self.forfeited)

    def settled(self, conv_ids: list[str]) -> None:
        """Their remote version is ours now: no longer forfeit."""
        with self._lock:
            self.forfeited.difference_update(conv_ids)

    def urgent(self, now: float) -> bool:
        """Whether a lease held went half its duration without a renewal."""
        with self._lock:
            return any(now - lease.renewed >= self.duration / 2 for lease in self._held.values())

    def due(self, now: float) -> bool:
        """Whether a renewal is due (a third of the duration since the oldest renewal)."""
        with self._lock:
            return any(
                lease.releasing or now - lease.renewed >= self.duration / 3
                for lease in self._held.values()
            )
