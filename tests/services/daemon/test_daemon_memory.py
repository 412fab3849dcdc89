"""The daemon's threads share two malloc arenas (glibc): read off the real process's
memory map, where each arena a thread got for itself is a 64 MB-aligned heap."""

from __future__ import annotations

import platform
from collections.abc import Iterator
from pathlib import Path

import pytest

from jpfs.services.daemon.process import MALLOC_ARENAS
from tests.conftest import wait_until
from tests.services.daemon.test_daemon_helpers import (
    DaemonProc,
    daemon_proc_fixture,
    setup_workspace,
    state_of,
    write_in_place,
)

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
    reason="malloc arenas are glibc's",
)

_HEAP = 64 << 20  # a thread arena's heap on 64-bit glibc (HEAP_MAX_SIZE)


@pytest.fixture
def daemon_proc(ws: Path) -> Iterator[DaemonProc]:
    yield from daemon_proc_fixture(ws)


def thread_arenas(pid: int) -> int:
    """Anonymous 64 MB-aligned runs of 64 MB in ``pid``'s map: glibc's thread heaps."""
    rows = []
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        fields = line.split()
        lo, hi = (int(x, 16) for x in fields[0].split("-"))
        rows.append((lo, hi, len(fields) < 6))
    found = 0
    for at, (lo, hi, anon) in enumerate(rows):
        if not anon or lo % _HEAP:
            continue
        end = hi
        for nlo, nhi, nanon in rows[at + 1 :]:
            if nlo != end or not nanon or end - lo >= _HEAP:
                break
            end = nhi
        found += end - lo == _HEAP
    return found


@pytest.mark.parametrize("user_setting", [None, "8"])
def test_threads_share_two_malloc_arenas_unless_the_user_says(
    ws: Path, daemon_proc: DaemonProc, monkeypatch: pytest.MonkeyPatch, user_setting: str | None
) -> None:
    setup_workspace(ws, default_agent="lead")
    if user_setting is None:
        monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    else:
        monkeypatch.setenv("MALLOC_ARENA_MAX", user_setting)
    pid = daemon_proc.start()
    ids = [f"t{n}" for n in range(6)]
    for conv_id in ids:
        (ws / "conversations" / conv_id).mkdir(parents=True)
        write_in_place(ws / "conversations" / conv_id / "task.md", "Work on it.\n")
    wait_until(
        lambda: all(state_of(ws, c) == "waiting" for c in ids), timeout=60, message="the runs"
    )
    arenas = thread_arenas(pid)
    if user_setting is None:
        assert arenas <= MALLOC_ARENAS - 1  # the main arena is not a thread heap
    else:
        assert arenas > MALLOC_ARENAS - 1, "the user's MALLOC_ARENA_MAX is left to glibc"
