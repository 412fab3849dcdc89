"""Every run claimed, whoever starts it: one sync engine per workspace and process.

The daemon registers its engine (:func:`adopt_engine`), whose thread pushes; a process
without one (``jpfs query`` with no daemon to hand to) makes its own for the run and
pushes when the run ends.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator

from jpfs.core.workspace import Workspace
from jpfs.errors import JpfsError, LockError
from jpfs.services.sync.engine import SyncEngine

log = logging.getLogger("jpfs.services.sync")

_engines: dict[str, SyncEngine] = {}
_engines_lock = threading.Lock()


def adopt_engine(engine: SyncEngine | None, ws: Workspace) -> None:
    """Make ``engine`` (a daemon's, whose thread pushes) the one this process uses for
    ``ws``; None forgets it."""
    with _engines_lock:
        if engine is None:
            _engines.pop(str(ws.root), None)
        else:
            _engines[str(ws.root)] = engine


@contextlib.contextmanager
def claimed(ws: Workspace, conv_id: str) -> Iterator[None]:
    """Hold ``conv_id``'s lease while the block runs a turn (a no-op without
    ``sync.remote``): every run, whoever starts it (the daemon, ``jpfs query``, a
    parent's ``jp_query``), is claimed on the remote first, so no peer runs it too.

    In a process with no daemon's engine, the results and the lease's release are
    pushed when the block ends."""
    if not ws.config["sync.remote"]:
        yield
        return
    with _engines_lock:
        engine = _engines.get(str(ws.root))
    own = engine is None
    if engine is None:
        engine = SyncEngine(ws)
    if engine.book.holds(conv_id):
        yield  # claimed by whoever runs us (the daemon's job): it releases
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
        if own:
            try:
                engine.sync_once()
            except JpfsError as exc:
                log.warning("sync after the run of %s: %s; `jpfs sync` pushes it", conv_id, exc)
