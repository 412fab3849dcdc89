"""The sync thread: one engine's cycles, until told to stop.

A daemon runs it beside its loops (:mod:`jpfs.services.daemon.shared`), and so does a
process without a daemon while its runs hold leases (:mod:`jpfs.services.sync.claims`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection

from jpfs.errors import Contended, JpfsError
from jpfs.services.sync.engine import SyncEngine
from jpfs.services.sync.leases import LeaseBook

log = logging.getLogger("jpfs.services.sync")

# How often wait_started asks (a claim takes 15-150 ms).
_STARTING_POLL = 0.005
# A daemon whose workers all run fetches every this many intervals at most (see run).
FULL_FETCH_EVERY = 2
# The longest a run's result waits for the runs that started before it ended
# (wait_released); half an interval when that is shorter.
GATHER_MAX = 0.25


def run(
    engine: SyncEngine,
    stop: threading.Event,
    starting: Callable[[], bool] | None = None,
    full: Callable[[], bool] | None = None,
    waiting: Callable[[], Collection[str]] = frozenset,
) -> None:
    """Cycle until ``stop``: every ``interval``, or at once when woken (a run ended).
    ``starting()``: whether a run is about to start here; a cycle waits for those first
    (:func:`wait_started`), at most an ``interval``, and not while a lease held would
    meanwhile go half its duration without a renewal; woken by a run's end, it also waits
    for the runs that started before it to end too (:func:`wait_released`, at most
    :data:`GATHER_MAX`; not for the conversations in ``waiting()``, claimed ahead of a
    run, Pool.wait_turn). ``full()``: whether every worker
    here is running a run; then a cycle fetches only if the last fetch began
    :data:`FULL_FETCH_EVERY` intervals ago (or a quarter lease: a claim trusts a view
    half a lease old, and a takeover waits a lease from the first sight of a value),
    and otherwise only pushes (results, renewals): news of new work could start nothing
    here, and each fetch is a process and a session on the remote, beside the runs and
    the peers' fetches."""
    woken, woke_at = False, 0.0
    gather = min(engine.interval / 2, GATHER_MAX)
    while not stop.is_set():
        engine.wake.clear()
        if starting is not None and not engine.book.urgent(time.monotonic() + engine.interval):
            wait_started(starting, stop, engine.interval)
        if woken and not engine.book.urgent(time.monotonic() + gather):
            wait_released(engine.book, stop, woke_at, gather, waiting())
        began, failed = time.monotonic(), True
        fetch = (
            full is None
            or began - engine.observed_at
            >= min(FULL_FETCH_EVERY * engine.interval, engine.book.duration / 4)
            or not full()
        )
        try:
            # Woken: a run ended, its work to push.
            engine.sync_once(eager=woken, fetch=fetch)
            engine.sweep()
            engine.announce()
            engine.stats.last_error = ""
            failed = False
        except Contended as exc:
            # Peers' pushes won every race: not an error, and the next cycle comes as
            # usual (a failure's would wait a whole interval from here).
            log.info("sync: %s", exc)
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
        woke_at = time.monotonic()
    try:
        engine.sync_once()  # hand back what we hold
    except JpfsError as exc:
        log.warning("sync at stop: %s", exc)


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


def wait_released(
    book: LeaseBook,
    stop: threading.Event,
    since: float,
    seconds: float,
    waiting: Collection[str] = (),
) -> None:
    """Until every lease held since before ``since`` (a run's end woke the cycle then) is
    being given back, ``stop``, or ``seconds`` after ``since``; the leases of
    ``waiting`` (claimed ahead, no run under way) are not waited for. Runs that started
    together tend to end together (a wave of claims, the same model): one push then
    carries all their results, where a push each would race one another and the peers'
    pushes on the record branch (each lost race costs a fetch, a merge and a push)."""
    deadline = since + seconds
    while (left := deadline - time.monotonic()) > 0:
        if not any(
            lease.taken < since and not lease.releasing and lease.conv_id not in waiting
            for lease in book.held()
        ):
            return
        if stop.wait(min(left, _STARTING_POLL)):
            return
