"""Presence: which machines' daemons serve the record, each told by a ref of its own.

A daemon keeps ``refs/jpfs/machines/<key>`` on the remote (``key``: a flat digest of its
machine name), pointing at a tiny commit that names the machine and its incarnation. It
pushes a new value at its first cycle and every third of ``lifetime`` after, and deletes
the ref when it stops. A peer counts the machine present while it has seen that ref
change within ``lifetime`` of its own monotonic clock: as with leases, no two machines'
clocks are compared. Any daemon deletes a ref it has seen unchanged for twice that (a
daemon killed without stopping leaves its ref behind).

*Why:* the rendezvous ranking that keeps peers' claims apart (:meth:`Claimer.pick`)
needs the peers' names. Leases and tombstones name the machines once work has flowed;
at a cold start (a new fleet, or one idle longer than tombstones live) each daemon
knew only itself, and the first picks of machines that saw the same new work collided
(9.8 lost claims per run, 3 daemons and 36 tasks over SSH; bench/RESULTS.md).

Presence only orders work and tells each machine how much its peers may want
(:func:`jpfs.services.daemon.shared.free_wanted`): a machine counted present that is
gone delays nothing for longer than its lifetime, and a refused or failed push of it
fails nothing else.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass

from jpfs.core import ids
from jpfs.infra.git.remote import Update

MACHINES_NS = "refs/jpfs/machines/"
_PRESENT = re.compile(r"^Jpfs-Present: *(\S+) *$", re.MULTILINE)


def machine_ref(machine: str) -> str:
    return MACHINES_NS + ids.file_key(machine)


def read_machine(message: str) -> str:
    """The machine a presence value names ("" for anything else: junk says nothing)."""
    found = _PRESENT.search(message)
    return found[1] if found else ""


@dataclass(frozen=True)
class _Seen:
    oid: str
    machine: str
    since: float  # monotonic time this value was first seen here


class Presence:
    """The presence refs seen on the remote, and this machine's own; thread-safe.

    ``make(message)``: a new value (a commit object, :meth:`LeaseBook.commit`). Every
    method that depends on time takes ``now`` (monotonic seconds)."""

    def __init__(
        self, machine: str, incarnation: str, lifetime: float, make: Callable[[str], str]
    ) -> None:
        self.machine, self.incarnation, self.lifetime = machine, incarnation, lifetime
        self.ref = machine_ref(machine)
        self._make = make
        self._lock = threading.Lock()
        self._seen: dict[str, _Seen] = {}
        self._seq = 0
        self._pushed: tuple[str, float] | None = None  # our value on the remote, and when
        self.refused = ""  # why the remote refused our presence (then we stop asking)

    def observe(self, tracked: dict[str, tuple[str, str]], prefix: str, now: float) -> None:
        """Take in the presence refs a fetch brought: the tracking refs under ``prefix``
        (ref -> (value, its message))."""
        with self._lock:
            found = {MACHINES_NS + ref.removeprefix(prefix): v for ref, v in tracked.items()}
            for ref, (oid, message) in found.items():
                seen = self._seen.get(ref)
                if seen is None or seen.oid != oid:
                    self._seen[ref] = _Seen(oid, read_machine(message), now)
            for ref in set(self._seen) - set(found):
                del self._seen[ref]
            if self._pushed is not None and self._seen.get(self.ref, None) is None:
                self._pushed = None  # swept (we were stalled): say it again

    def present(self, now: float) -> set[str]:
        """The machines whose presence changed within ``lifetime`` (ours included)."""
        with self._lock:
            return {
                seen.machine
                for seen in self._seen.values()
                if seen.machine and now - seen.since < self.lifetime
            }

    def stale(self, now: float) -> list[tuple[str, str]]:
        """Presence refs seen unchanged for twice ``lifetime``, not ours: (ref, value)."""
        with self._lock:
            return [
                (ref, seen.oid)
                for ref, seen in self._seen.items()
                if ref != self.ref and now - seen.since >= 2 * self.lifetime
            ]

    def due(self, now: float) -> Update | None:
        """The push that says we are here, when it is due (never said, or a third of
        ``lifetime`` ago), expecting what the last fetch saw on our ref (a predecessor's
        value, after a restart); None when not due."""
        with self._lock:
            if self.refused:
                return None
            if self._pushed is not None and now - self._pushed[1] < self.lifetime / 3:
                return None
            self._seq += 1
            seen = self._seen.get(self.ref)
            value = self._make(
                f"jpfs machine: {self.machine}\n\n"
                f"Jpfs-Present: {self.machine}\n"
                f"Jpfs-Incarnation: {self.incarnation}\n"
                f"Jpfs-Present-Seq: {self._seq}\n"
                f"Jpfs-Present-Seconds: {self.lifetime:g}\n"
            )
            return Update(self.ref, value, seen.oid if seen else None)

    def pushed(self, value: str, now: float) -> None:
        with self._lock:
            self._pushed = (value, now)
            self._seen[self.ref] = _Seen(value, self.machine, now)

    def leaving(self) -> Update | None:
        """The push that deletes our ref (expecting our value), if we said we are here."""
        with self._lock:
            return Update(self.ref, None, self._pushed[0]) if self._pushed else None
