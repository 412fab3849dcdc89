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
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from jpfs.core import ids
from jpfs.errors import ConfigError
from jpfs.infra.git import objects

LEASE_NS = "refs/jpfs/leases/"


def timing(every: float, duration: float) -> tuple[float, float]:
    """``sync.interval`` and ``sync.lease`` (seconds) as given, or why they cannot work:
    a lease is renewed every third of it, at a cycle."""
    if not 0 < every <= 3600 or not 0 < duration <= 86400:
        raise ConfigError(
            f"sync.interval ({every:g}) and sync.lease ({duration:g}) must be positive"
            " numbers of seconds (at most an hour and a day): `jpfs config set sync.lease 30`"
        )
    if duration < 3 * every - 1e-9:  # 0.6 is three times 0.2
        raise ConfigError(
            f"sync.lease ({duration:g} s) must be at least 3 x sync.interval"
            f" ({every:g} s): a lease is renewed every third of it"
        )
    return every, duration


def lease_ref(conv_id: str) -> str:
    return LEASE_NS + ids.file_key(conv_id)


def new_incarnation() -> str:
    return uuid.uuid4().hex[:16]


@dataclass(frozen=True)
class Observed:
    oid: str
    since: float  # monotonic time we first saw this value
    # A released lease (a tombstone): the record commit that holds the work done under it.
    released: str | None = None


@dataclass(frozen=True)
class Sent:
    """A value pushed for a lease held, before the push said whether the remote took it.
    A push can take effect and still fail here (the connection ended after the remote
    updated its refs, before it reported): a fetch that finds this value finds the
    push done, not another machine's claim (values are ours alone: our incarnation and
    a sequence number)."""

    oid: str
    seq: int
    record: str  # a release: the record commit its tombstone names ("" for a renewal)
    at: float  # monotonic time the push began (an adopted renewal counts from it)


@dataclass
class Lease:
    conv_id: str
    ref: str
    oid: str  # the value we last pushed: what the remote holds while we hold it
    seq: int
    renewed: float  # monotonic time of the last successful push of it
    releasing: bool = False
    previous: Observed | None = None  # what the ref held before our claim
    # Values pushed since the last push known to have landed, whose push failed or is in
    # flight: what the remote may hold instead of ``oid``.
    sent: dict[str, Sent] = field(default_factory=dict)
    taken: float = 0.0  # monotonic time of our claim


# A released lease is swept once unchanged for 2 x sync.lease, and never sooner than
# this: longer than any machine trusts a view of no lease (claiming.FRESH_MAX), whatever
# the sync.lease of each.
TOMBSTONE_MIN_AGE = 60.0
LEASE_ROOT = "jpfs leases\n\nEvery lease value is a child of this commit.\n"
_RELEASED = re.compile(r"^Jpfs-Released: *([0-9a-f]{40,64}) *$", re.MULTILINE)
_HOLDER = re.compile(r"^Jpfs-Machine: *(\S+) *$", re.MULTILINE)
_RELEASER = re.compile(r"^Jpfs-Released-By: *(\S+) *$", re.MULTILINE)


def read_value(message: str) -> tuple[str, str, str]:
    """What a lease value's commit message says: (the machine holding it, the record
    commit a release names, the machine that released it); "" for what it does not say
    (junk says nothing)."""
    released = _RELEASED.search(message)
    if released:
        releaser = _RELEASER.search(message)
        return "", released[1], releaser[1] if releaser else ""
    holder = _HOLDER.search(message)
    return (holder[1] if holder else ""), "", ""


@dataclass(frozen=True)
class RemoteLeases:
    """The lease refs a fetch brought, as the book and the ranking read them."""

    values: dict[str, str]  # lease ref -> its value
    released: dict[str, str]  # lease ref -> the record commit its tombstone names
    peers: dict[str, int]  # machine -> leases it holds
    releasers: set[str]  # the machines that released one lately (tombstones live a while)


def read_remote(tracked: dict[str, tuple[str, str]], prefix: str) -> RemoteLeases:
    """``tracked``: the tracking refs a fetch wrote the leases to (ref -> (value, its
    message)), under ``prefix``."""
    found = RemoteLeases({}, {}, {}, set())
    for ref, (oid, message) in tracked.items():
        name = LEASE_NS + ref.removeprefix(prefix)
        found.values[name] = oid
        holder, record, releaser = read_value(message)
        if record:
            found.released[name] = record
            found.releasers.add(releaser)
        elif holder:
            found.peers[holder] = found.peers.get(holder, 0) + 1
    return found


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
        self._store: objects.Store | None = None
        self._root: str | None = None
        self.forfeited: set[str] = set()

    # -- what the remote holds -------------------------------------------------------------
    def observe(self, remote: dict[str, str], released: dict[str, str]) -> None:
        """Take in the lease refs fetched from the remote (ref -> object id; and for the
        released ones, ref -> the record commit their tombstone names)."""
        now = time.monotonic()
        with self._lock:
            for ref, oid in remote.items():
                seen = self._seen.get(ref)
                if seen is None or seen.oid != oid:
                    self._seen[ref] = Observed(oid, now, released.get(ref))
            for ref in list(self._seen):
                if ref not in remote:
                    del self._seen[ref]
            for lease in list(self._held.values()):
                sent = lease.sent.get(remote.get(lease.ref, ""))
                if sent is not None:
                    self._landed(lease, sent)

    def _landed(self, lease: Lease, sent: Sent) -> None:
        """A push of ours took effect though it failed here (see :class:`Sent`): the
        lease is renewed, or released, as that push said; never lost to ourselves. (The
        view of the ref is the observation's.)"""
        if sent.record:
            del self._held[lease.conv_id]
        else:
            lease.oid, lease.seq, lease.renewed = sent.oid, sent.seq, sent.at
            lease.sent.clear()

    def seen(self, ref: str) -> Observed | None:
        with self._lock:
            return self._seen.get(ref)

    def remote_count(self) -> int:
        """Leases held on the remote (released ones left out)."""
        with self._lock:
            return sum(1 for seen in self._seen.values() if seen.released is None)

    def expired(self, seen: Observed) -> bool:
        return time.monotonic() - seen.since >= self.duration

    def free(self, seen: Observed | None) -> bool:
        """Whether a lease seen so may be claimed: absent, released, or expired."""
        return seen is None or seen.released is not None or self.expired(seen)

    def tombstones(self, older_than: float) -> list[tuple[str, str]]:
        """Released leases seen unchanged for ``older_than`` seconds: (ref, value)."""
        now = time.monotonic()
        with self._lock:
            return [
                (ref, seen.oid)
                for ref, seen in self._seen.items()
                if seen.released is not None and now - seen.since >= older_than
            ]

    def wait_for(self, conv_id: str) -> float:
        """Seconds until the lease on ``conv_id`` we saw may be taken over (0: now)."""
        seen = self.seen(lease_ref(conv_id))
        if seen is None or seen.released is not None:
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
        return self.commit(message), seq

    def tombstone(self, conv_id: str, record: str) -> str:
        """The value a lease is released to: it names the record commit that holds the
        work done under it (and no holder)."""
        return self.commit(
            f"jpfs lease released: {conv_id}\n\n"
            f"Jpfs-Conversation: {conv_id}\n"
            f"Jpfs-Released: {record}\n"
            f"Jpfs-Released-By: {self.machine}\n"
            f"Jpfs-Incarnation: {self.incarnation}\n"
        )

    def root(self) -> str:
        """The one parent of every lease value: a commit every machine makes alike
        (fixed message, identity and time), so a fetch of new lease values finds common
        ground with the remote in one round of negotiation (a parentless commit has
        none, and the remote then asks for round after round of what this clone has)."""
        with self._lock:
            return self._root_locked()

    def _root_locked(self) -> str:
        if self._store is None:
            self._store = objects.Store(self.repo)
        if self._root is None:
            self._root = self._store.empty_commit(LEASE_ROOT, [], epoch=True)
        return self._root

    def commit(self, message: str) -> str:
        # In process (no git process per lease: a push renews every lease held).
        with self._lock:
            root = self._root_locked()
            assert self._store is not None
            return self._store.empty_commit(message, [root])

    def taken(self, conv_id: str, oid: str, seq: int, previous: Observed | None = None) -> None:
        now = time.monotonic()
        with self._lock:
            self._held[conv_id] = Lease(
                conv_id, lease_ref(conv_id), oid, seq, now, False, previous, taken=now
            )
            self._seen[lease_ref(conv_id)] = Observed(oid, now)

    def sending(self, conv_id: str, sent: Sent) -> None:
        """``sent`` is about to be pushed for ``conv_id`` (see :class:`Sent`)."""
        with self._lock:
            lease = self._held.get(conv_id)
            if lease is not None:
                lease.sent[sent.oid] = sent

    def renewed(self, conv_id: str, oid: str, seq: int) -> None:
        now = time.monotonic()
        with self._lock:
            lease = self._held.get(conv_id)
            if lease is not None:
                lease.oid, lease.seq, lease.renewed = oid, seq, now
                lease.sent.clear()
                self._seen[lease.ref] = Observed(oid, now)

    def release(self, conv_id: str) -> None:
        """Give the lease back at the next push (with the commits made under it)."""
        with self._lock:
            lease = self._held.get(conv_id)
            if lease is not None:
                lease.releasing = True

    def released(self, tombstones: dict[str, tuple[str, str]]) -> None:
        """These leases were pushed released: conversation -> (tombstone, record)."""
        now = time.monotonic()
        with self._lock:
            for conv_id, (oid, record) in tombstones.items():
                lease = self._held.pop(conv_id, None)
                if lease is not None:
                    self._seen[lease.ref] = Observed(oid, now, record)

    def given_back(self, conv_id: str) -> None:
        """Pushed back to what it held before our claim (nothing was done under it)."""
        with self._lock:
            lease = self._held.pop(conv_id, None)
            if lease is None:
                return
            if lease.previous is None:
                self._seen.pop(lease.ref, None)
            else:
                self._seen[lease.ref] = lease.previous

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
