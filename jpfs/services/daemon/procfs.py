"""Which files some process has open, from Linux ``/proc``.

Used where an event stream cannot tell: whether a file seen only as ``created`` is
still being written (it was written before the watch on its new directory existed),
and whether a git lock file still has a holder.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

_WRITE_MODES = (os.O_WRONLY, os.O_RDWR)


def open_files(paths: Iterable[Path], *, writing: bool = False) -> set[Path]:
    """Those of ``paths`` that a process we can see has open (for writing if ``writing``).

    Without a readable ``/proc`` nothing can be told; every path is then reported open,
    the cautious answer for both callers.
    """
    wanted = {os.fspath(p): p for p in paths}
    if not wanted:
        return set()
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except FileNotFoundError:
        return set(wanted.values())
    found: set[Path] = set()
    for pid in pids:
        fd_dir = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"{fd_dir}/{fd}")
            except OSError:
                continue
            if target not in wanted:
                continue
            if writing and not _writable(pid, fd):
                continue
            found.add(wanted[target])
            if len(found) == len(wanted):
                return found
    return found


def _writable(pid: str, fd: str) -> bool:
    try:
        with open(f"/proc/{pid}/fdinfo/{fd}", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("flags:"):
                    return int(line.split()[1], 8) & os.O_ACCMODE in _WRITE_MODES
    except (OSError, ValueError):
        return True
    return True
