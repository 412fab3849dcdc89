"""Every run claimed, whoever starts it: one sync engine per workspace and process.

The process's :class:`Claims` (owned by its application object,
:mod:`jpfs.services.run.app`) holds them: a daemon's engine, whose thread pushes
(:meth:`Claims.adopt`); in a process without one (``jpfs query`` with no daemon to hand
to) an engine of its own, made for the run and pushing when the run ends.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from jpfs.core.workspace import Workspace
from jpfs.errors import LockError
from jpfs.services.sync import cycling
from jpfs.services.sync.engine import SyncEngine

log = logging.getLogger("jpfs.services.sync")


@dataclass
class _Own:
    """An engine this process made for its runs (no daemon's here): shared by every
    run in the process, its thread renews their leases and pushes; the last run out
    stops it, after a last push."""

    engine: SyncEngine
    stop: threading.Event
    thread: threading.Thread
    users: int = 0


class Claims:
    """The sync engines of a process, by workspace root."""

    def __init__(self) -> None:
        self._engines_lock = threading.Lock()
        self._engines: dict[str, SyncEngine] = {}
        self._own: dict[str, _Own] = {}

    def adopt(self, engine: SyncEngine | None, ws: Workspace) -> None:
        """Make ``engine`` (a daemon's, whose thread pushes) the one this process uses for
        ``ws``; None forgets it."""
        with self._engines_lock:
            if engine is None:
                self._engines.pop(str(ws.root), None)
            else:
                self._engines[str(ws.root)] = engine

    def _enter(self, ws: Workspace) -> tuple[SyncEngine, bool]:
        """The engine for ``ws`` (the daemon's, or this process's own, started if need be);
        True when it is this process's own (then :meth:`_leave` must follow)."""
        key = str(ws.root)
        with self._engines_lock:
            engine = self._engines.get(key)
            if engine is not None:
                return engine, False
            own = self._own.get(key)
            if own is None:
                made = SyncEngine(ws)
                stop = threading.Event()
                thread = threading.Thread(
                    target=cycling.run, args=(made, stop), name="jpfs-sync-runs", daemon=True
                )
                own = self._own[key] = _Own(made, stop, thread)
                thread.start()
            own.users += 1
            return own.engine, True

    def _leave(self, ws: Workspace) -> None:
        key = str(ws.root)
        with self._engines_lock:
            own = self._own[key]
            own.users -= 1
            if own.users:
                return
            del self._own[key]
        own.stop.set()
        own.engine.wake.set()
        own.thread.join()  # its last cycle pushes the results and gives the leases back
        own.engine.close()
        if own.engine.stats.last_error:
            log.warning(
                "sync after the run: %s; `jpfs sync` pushes it", own.engine.stats.last_error
            )

    @contextlib.contextmanager
    def claimed(self, ws: Workspace, conv_id: str) -> Iterator[None]:
        """Hold ``conv_id``'s lease while the block runs a turn (a no-op without
        ``sync.remote``): every run, whoever starts it (the daemon, ``jpfs query``, a
        background run, a parent's ``jp_query``), is claimed on the remote first, so no
        peer runs it too. Re-entrant: a run claimed by its caller is not claimed again.

        In a process with no daemon, a thread renews the leases while runs last, and the
        results and the leases' release are pushed when the last run ends."""
        if not ws.config.sync.remote:
            yield
            return
        engine, own = self._enter(ws)
        try:
            if engine.book.holds(conv_id):
                yield  # claimed by whoever runs us (the daemon's job, the query): it releases
                return
            if not engine.claim(conv_id):
                why = engine.refusal.pop(conv_id, "")
                raise LockError(
                    f"{conv_id} cannot be claimed here: {why}; try again"
                    if why
                    else f"{conv_id} is being run on another machine sharing the record"
                    f" ({engine.remote}); try again when its lease is released"
                )
            try:
                yield
            finally:
                engine.release(conv_id)
        finally:
            if own:
                self._leave(ws)
