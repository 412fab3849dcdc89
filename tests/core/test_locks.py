"""jpfs.core.locks.is_held against the kernel's real lock table: a held flock is seen as
held however large ``/proc/locks`` is and however fast other locks come and go (the
table is handed out a page per read; an entry skipped between two reads once made
``jpfs daemon status`` say a running daemon was not running)."""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from jpfs.core import locks

pytestmark = pytest.mark.skipif(not Path("/proc/locks").exists(), reason="Linux's lock table")


@pytest.fixture()
def crowded(tmp_path: Path) -> Iterator[Path]:
    """``daemon.lock`` held first, as a daemon's is (the kernel lists the newest locks
    first, so it sits past the first page), then 300 more (a table of several pages),
    and a thread taking and releasing 50 others as fast as it can."""
    first = os.open(tmp_path / "daemon.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC)
    fcntl.flock(first, fcntl.LOCK_EX)
    held = [first]
    for number in range(300):
        fd = os.open(tmp_path / f"held-{number}", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC)
        fcntl.flock(fd, fcntl.LOCK_EX)
        held.append(fd)
    churning = [
        os.open(tmp_path / f"churn-{n}", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC) for n in range(50)
    ]
    stop = threading.Event()

    def churn() -> None:
        while not stop.is_set():
            for fd in churning:
                fcntl.flock(fd, fcntl.LOCK_EX)
            for fd in churning:
                fcntl.flock(fd, fcntl.LOCK_UN)

    worker = threading.Thread(target=churn, daemon=True)
    worker.start()
    try:
        yield tmp_path
    finally:
        stop.set()
        worker.join(timeout=30)
        assert not worker.is_alive()
        for fd in held + churning:
            os.close(fd)


def test_a_held_lock_is_always_seen_in_a_table_of_many_pages(crowded: Path) -> None:
    assert len(Path("/proc/locks").read_bytes()) > 3 * 4096  # read in several pieces
    missed = sum(1 for _ in range(2000) if not locks.is_held(crowded / "daemon.lock"))
    assert missed == 0


def test_a_free_lock_is_seen_free_in_a_table_of_many_pages(crowded: Path) -> None:
    free = crowded / "free.lock"
    free.touch()
    assert not any(locks.is_held(free) for _ in range(200))
    assert not locks.is_held(crowded / "absent.lock")


def test_one_look_at_the_table_answers_for_many_files(crowded: Path) -> None:
    """``jpfs tree`` asks of every row: one look (one table, read up to five times when
    it comes in pieces) answers all of them, held and free alike."""
    free = crowded / "free.lock"
    free.touch()
    table = locks.lock_table()
    assert table.keys is not None and len(table.keys) >= 301
    assert table.holds(crowded / "daemon.lock")
    assert all(table.holds(crowded / f"held-{n}") for n in range(300))
    assert not table.holds(free) and not table.holds(crowded / "absent.lock")
