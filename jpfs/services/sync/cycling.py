"""The sync thread: one engine's cycles, until told to stop.

A daemon runs it beside its loops (:mod:`jpfs.services.daemon.shared`), and so does a
process without a daemon while its runs hold leases (:mod:`jpfs.services.sync.claims`).
"""

from __future__ import annotations

import logging
import threading
import time

from jpfs.errors import JpfsError
from jpfs.services.sync.engine import SyncEngine

log = logging.getLogger("jpfs.services.sync")


def run(engine: SyncEngine, stop: threading.Event) -> None:
    """Cycle until ``stop``: every ``interval``, or at once when woken."""
    woken = False
    while not stop.is_set():
        engine.wake.clear()
        began, failed = time.monotonic(), True
        try:
            engine.sync_once(eager=woken)
            engine.sweep()
            engine.stats.last_error = ""
            failed = False
        except JpfsError as exc:
            engine.stats.last_error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            log.warning(
                "sync: %s (working locally; trying again in %gs)",
                engine.stats.last_error,
                engine.interval,
            )
        except Exception as exc:  # a bug: say so, keep sharing (leases must be renewed)
            log.exception("sync cycle failed")
            engine.stats.last_error = f"internal error in jpfs ({type(exc).__name__}); see the log"
        # Cycles start every ``interval`` (new work is noticed within one interval,
        # not one plus a cycle), at least a quarter of it apart; after a failure, a
        # whole interval from its end.
        spent = time.monotonic() - began
        woken = engine.wake.wait(
            engine.interval if failed else max(engine.interval / 4, engine.interval - spent)
        )
    try:
        engine.sync_once()  # hand back what we hold
    except JpfsError as exc:
        log.warning("sync at stop: %s", exc)
