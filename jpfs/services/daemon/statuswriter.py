"""daemon.json as a running daemon writes it: what ``jpfs daemon status`` and ``jpfs top``
show of it (its runs, queue, scans, last error, sync), refreshed within 0.25 s of a
change, else every 2 s (the times: a run's elapsed seconds, the sync's seconds since its
last fetch and push, its timings).

The daemon (:class:`jpfs.services.daemon.service.Daemon`) is seen through
:class:`Shown`, the parts of it the status reads, so this module imports nothing above
it; the file itself is written by :func:`jpfs.services.daemon.process.write_status`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any, Protocol

from jpfs.core import failures
from jpfs.core.workspace import Workspace
from jpfs.services.daemon import process
from jpfs.services.daemon.lasterror import LastError
from jpfs.services.daemon.pool import Pool
from jpfs.services.daemon.reconciler import Reconciler
from jpfs.services.daemon.shared import SharedRecord
from jpfs.services.sync import report

log = logging.getLogger("jpfs.services.daemon")


class Shown(Protocol):
    """What of a daemon its status shows."""

    ws: Workspace
    files: process.Files
    pool: Pool
    reconciler: Reconciler
    errors: LastError
    stats: process.Stats
    ready: threading.Event
    stop: threading.Event
    catching_up: bool
    shared: SharedRecord | None


class StatusWriter:
    """Writes a daemon's daemon.json, skipping writes that would change nothing."""

    def __init__(self) -> None:
        self._last_status = 0.0
        self._last_key = ""
        self._failing = ""  # why the last write failed ("" while writes succeed)
        self._failed = 0  # writes failed in a row

    def write(self, daemon: Shown, force: bool = False) -> None:
        """Refresh daemon.json: within 0.25 s of a change, else every 2 s (times move on)."""
        now = time.time()
        if not force and now - self._last_status < 0.25:
            return
        jobs, queued = daemon.pool.snapshot()
        agents = []
        ahead = sorted(job.conv_id for job in jobs if not job.slot)
        for job in jobs:
            if not job.slot:
                continue  # claimed ahead, no run yet (pool.py): listed apart
            watch = job.info.get("watch")  # actions.RunWatch, once its runner is made
            agents.append(
                {
                    "id": job.conv_id,
                    "agent": job.info.get("agent", ""),
                    "model": job.info.get("model", ""),
                    "since": process.iso(job.started),
                    "elapsed": round(now - job.started, 1),
                    "provider_calls": getattr(watch, "provider_calls", 0),
                    "tokens": getattr(watch, "tokens", 0),
                    "note": getattr(watch, "last_note", ""),
                }
            )
        data: dict[str, Any] = {
            "pid": os.getpid(),
            "ready": daemon.ready.is_set() and not daemon.stop.is_set(),
            "catching_up": daemon.catching_up,
            "stopping": daemon.stop.is_set(),
            "started": daemon.stats.started,
            "started_at": process.iso(daemon.stats.started),
            "workspace": str(daemon.ws.root),
            "max_agents": daemon.pool.size,
            "agents_running": len(agents),
            "agents": agents,
            "queue": queued,
            "claimed_ahead": ahead,
            "runs": daemon.stats.runs,
            "failures": daemon.stats.failures,
            "scans": daemon.reconciler.scans,
            "last_scan_s": round(daemon.reconciler.last_scan_seconds, 3),
            "conversations": len(daemon.reconciler.seen),
            "last_error": daemon.errors.shown(daemon.ws.conv_root, daemon.ws.local_dir),
            # Failed, though their own files refused the error (jpfs.core.failures).
            "unrecorded": [
                f.to_json()
                for f in failures.every(daemon.ws.local_dir, daemon.ws.conv_root).values()
            ],
            # What of .jpfs/ the last good copy stands in for (jpfs.services.workspace.policy).
            "policy": dict(sorted(daemon.ws.notes.items())),
        }
        if daemon.shared is not None:
            data["sync"] = report.status(daemon.shared.engine)
        key = repr({**data, "agents": [{**a, "elapsed": 0} for a in agents], **_moving(data)})
        if not force and key == self._last_key and now - self._last_status < 2.0:
            return
        try:
            process.write_status(daemon.files, {**data, "updated_at": process.iso(now)})
        except OSError as exc:
            # A full disk must not stop the daemon: its runs wait for room (postponed),
            # and status shows the last file written until this one can be. Said once
            # per streak; tried again at the next tick.
            self._failed += 1
            if not self._failing:
                log.warning("cannot write %s (%s); trying again", daemon.files.status, exc)
            self._failing = exc.strerror or str(exc)
            return
        if self._failing:
            log.info(
                "%s written again, after %d failed writes (%s)",
                daemon.files.status.name,
                self._failed,
                self._failing,
            )
            self._failing, self._failed = "", 0
        self._last_status, self._last_key = now, key


def _moving(data: dict[str, Any]) -> dict[str, Any]:
    """``data``'s parts that move on by themselves, as the change key sees them: the
    sync's seconds since its last fetch and push and its step timings change at every
    cycle (4 a second at a 0.25 s ``sync.interval``), and a rewrite for each would cost
    every shared daemon a file creation a cycle; they are refreshed with the times."""
    sync = data.get("sync")
    if sync is None:
        return {}
    return {
        "sync": {
            **sync,
            "last_fetch_s": sync["last_fetch_s"] is None,
            "last_push_s": sync["last_push_s"] is None,
            "timings": sorted(sync["timings"]),
        }
    }
