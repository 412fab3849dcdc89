"""Per-conversation run locks, shared by every process that runs agents.

``flock`` on a file under ``.jpfs/local/locks/``: the kernel drops the lock when the
holder dies, so a SIGKILLed daemon or ``jpfs query`` never leaves a lock behind, and
two opens in one process conflict like two processes do (flock locks belong to the
open file description), so threads are serialised too.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from jpfs.core import ids
from jpfs.errors import LockError


def lock_path(local_dir: Path, conv_id: str) -> Path:
    return local_dir / "locks" / f"{ids.file_key(conv_id)}.lock"


@contextlib.contextmanager
def conversation_lock(
    local_dir: Path, conv_id: str, *, wait: float = 0.0, cancel: threading.Event | None = None
) -> Iterator[None]:
    """Hold the run lock of ``conv_id``; wait up to ``wait`` seconds, then :class:`LockError`."""
    path = lock_path(local_dir, conv_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + wait
        pause = threading.Event() if cancel is None else cancel
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline or (cancel is not None and cancel.is_set()):
                    raise LockError(
                        f"conversation {conv_id!r} is busy: another run holds its lock"
                        " (wait for it, or check `jpfs daemon status`)"
                    ) from None
                pause.wait(0.02)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()} {conv_id}\n".encode())
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def is_locked(local_dir: Path, conv_id: str, table: LockTable | None = None) -> bool:
    """Whether a run holds ``conv_id``'s lock; ``table``: one look at the lock table
    shared by many questions (:func:`lock_table`), else a look of its own."""
    return (table or lock_table()).holds(lock_path(local_dir, conv_id))


def is_held(path: Path) -> bool:
    """Whether some process holds the flock on ``path``, asked without taking it.

    Taking the lock to test it would make a real contender see "busy" for that moment,
    so Linux's lock table (``/proc/locks``) is read instead (:func:`lock_table`); only
    where it cannot be read does this fall back to a non-blocking probe.
    """
    return lock_table().holds(path)


# How many times a lock table read in several pieces is read (see lock_table).
_TABLE_READS = 5


class LockTable:
    """The flocks held, as one look at ``/proc/locks`` saw them (:func:`lock_table`):
    a view that asks of many files (``jpfs tree``, of every row) reads the table once."""

    def __init__(self, keys: frozenset[str] | None) -> None:
        self.keys = keys  # "dev:ino" of each file flocked; None: the table is unreadable

    def holds(self, path: Path) -> bool:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return False
        if self.keys is None:
            return _probe(path)
        return f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}" in self.keys


def lock_table() -> LockTable:
    """One look at the flocks held. A table read in one piece is taken as it is; one
    read in several is read :data:`_TABLE_READS` times and what any read listed counts:
    the kernel hands the table out a page per read and starts each read again by
    position, so locks taken and released between two reads can make it skip an entry
    (3.6% of the answers for a held lock, with an 18 KB table and another process's
    locks coming and going; a busy daemon's runs make such a table). Probing a lock
    instead would, for that moment, make a run starting on it fail to take it."""
    keys: set[str] = set()
    for _ in range(_TABLE_READS):
        pieces = _read_lock_table()
        if pieces is None:
            return LockTable(None)
        # Lines read "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"; waiters add "->".
        for line in b"".join(pieces).decode("ascii", errors="replace").splitlines():
            fields = line.split()
            if "->" not in fields and len(fields) >= 6 and fields[1] == "FLOCK":
                keys.add(fields[5])
        if len(pieces) <= 1:
            break
    return LockTable(frozenset(keys))


def _read_lock_table() -> list[bytes] | None:
    """``/proc/locks`` as the reads returned it (None: it cannot be read)."""
    try:
        fd = os.open("/proc/locks", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        pieces = []
        while piece := os.read(fd, 1 << 16):
            pieces.append(piece)
        return pieces
    except OSError:
        return None
    finally:
        os.close(fd)


def _probe(path: Path) -> bool:
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)
