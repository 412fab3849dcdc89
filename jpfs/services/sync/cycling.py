"""The sync thread: one engine's cycles, until told to stop.

A daemon runs it beside its loops (:mod:`jpfs.services.daemon.shared`), and so does a
process without a daemon while its runs hold leases (:mod:`jpfs.services.sync.claims`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from jpfs.errors import JpfsError
from jpfs.services.sync.engine import SyncEngine

log = logging.getLogger("jpfs.services.sync")

# How often wait_started asks (a claim takes 15-150 ms).
_STARTING_POLL = 0.005


def run(
    engine: SyncEngine,
    stop: threading.Event,
    wanted: Callable[[], bool] | None = None,
    starting: Callable[[], bool] | None = None,
) -> None:
    """Cycle until ``stop``: every ``interval``, or at once when woken. ``wanted()``:
    whether the daemon is idle (new work would start at once); while it is, the remote
    is looked at every quarter ``interval`` between cycles, and a cycle starts when its
    record moved (:mod:`jpfs.services.sync.looks`). ``starting()``: whether a run is
    about to start here; a cycle waits for those first (:func:`wait_started`), at most
    an ``interval``, and not while a lease held would meanwhile go half its duration
    without a renewal."""
    after = "due"
    while not stop.is_set():
        engine.wake.clear()
        if starting is not None and not engine.book.urgent(time.monotonic() + engine.interval):
            wait_started(starting, stop, engine.interval)
        began, failed = time.monotonic(), True
        try:
            # Woken: a run ended, its work to push; moved: a look found news to fetch.
            engine.sync_once(eager=after == "woken", look=after == "due")
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
        after = wait_cycle(
            engine,
            engine.interval if failed else max(engine.interval / 4, engine.interval - spent),
            None if failed else wanted,
        )
    try:
        engine.sync_once()  # hand back what we hold
    except JpfsError as exc:
        log.warning("sync at stop: %s", exc)


def wait_cycle(engine: SyncEngine, seconds: float, wanted: Callable[[], bool] | None) -> str:
    """Until the next cycle is due (``"due"``: ``seconds`` passed), ``"woken"`` (a run
    ended, or stop) or ``"moved"``: the remote's record moved while ``wanted()``."""
    deadline = time.monotonic() + seconds
    step = engine.interval / 4
    while (left := deadline - time.monotonic()) > 0:
        if engine.wake.wait(min(left, step)):
            return "woken"
        if wanted is not None and left > 1.5 * step and wanted() and engine.looks.record_moved():
            return "moved"
    return "due"


def wait_started(starting: Callable[[], bool], stop: threading.Event, seconds: float) -> None:
    """Until no run is about to start here (``starting()`` false), ``stop``, or
    ``seconds``. A wave of runs ending frees workers that claim their next
    conversations at once: those claims are on the path of the next turns, and the
    cycle's fetch, merge and push are not (except the last results'); run beside them,
    they race the claims for the remote and the processor. After them, one push
    carries every result of the wave."""
    deadline = time.monotonic() + seconds
    while starting() and (left := deadline - time.monotonic()) > 0:
        if stop.wait(min(left, _STARTING_POLL)):
            return
