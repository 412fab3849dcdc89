"""What a sync engine did (:class:`SyncStats`) and where its time went (:class:`Timings`:
count and seconds per step), for ``daemon status`` and bench/.

The steps are the ones that wait on the remote or on the record: ``fetch``,
``integrate`` (a peer's record merged into ours), ``push`` (record and leases),
``renew`` (leases alone), ``claim`` (a lease's compare-and-swap, pushed with the claims
made meanwhile), ``claim-push`` (one push of the claims made together), ``claim-known``
(a claim whose files needed nothing more: its release or a fresh view said so),
``claim-fetch`` (the record fetched after a claim, shared by claims made together),
``claim-pull`` (a merge before acting, when that fetch brought a change to the claimed
conversation), ``give-back`` (a lease put back at once, nothing done under it),
``sweep`` (old released leases and presences deleted), ``present`` (this machine's
presence said, or deleted at stop) and ``lost`` (claims the remote refused).
``jpfs daemon status --format json`` shows them under ``sync.timings``.

The steps in :data:`REMOTE_STEPS` each run one git process that reaches the remote
(one SSH session over a shared connection): their counts are what a turn costs in
round trips (bench/bench_sync.py divides them by the turns).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

REMOTE_STEPS = (
    "fetch", "push", "renew", "claim-push", "claim-fetch", "give-back", "sweep", "present"
)  # fmt: skip


@dataclass
class SyncStats:
    fetches: int = 0
    pushes: int = 0
    merges: int = 0
    claims_won: int = 0
    claims_lost: int = 0
    takeovers: int = 0
    forfeits: int = 0
    last_fetch: float = 0.0  # wall clock, for status
    last_push: float = 0.0
    last_error: str = ""
    # Since when (wall clock) no fetch or push reached the remote; 0 while it answers.
    unreachable_since: float = 0.0
    conflicts: list[str] = field(default_factory=list)
    peers: dict[str, int] = field(default_factory=dict)  # machine -> leases held
    working: set[str] = field(default_factory=set)  # holding leases, or released lately
    present: set[str] = field(default_factory=set)  # whose daemons said they are there

    def report(self, now: float) -> dict[str, Any]:
        """The counters as ``daemon status`` shows them (``now``: the wall clock)."""
        return {
            "last_fetch_s": round(now - self.last_fetch, 1) if self.last_fetch else None,
            "last_push_s": round(now - self.last_push, 1) if self.last_push else None,
            "peers": self.peers,
            "present": sorted(self.present),
            "claims_won": self.claims_won,
            "claims_lost": self.claims_lost,
            "takeovers": self.takeovers,
            "forfeits": self.forfeits,
            "merges": self.merges,
            "conflicts": self.conflicts,
            "last_error": self.last_error,
            "unreachable_since": self.unreachable_since or None,
        }


class Timings:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._steps: dict[str, list[float]] = {}

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        finally:
            self.add(name, time.monotonic() - started)

    def add(self, name: str, seconds: float) -> None:
        with self._lock:
            found = self._steps.setdefault(name, [0, 0.0])
            found[0] += 1
            found[1] += seconds

    def snapshot(self) -> dict[str, dict[str, float]]:
        with self._lock:
            return {
                name: {"count": int(count), "seconds": round(seconds, 3)}
                for name, (count, seconds) in sorted(self._steps.items())
            }
