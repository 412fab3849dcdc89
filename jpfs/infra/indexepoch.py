"""Whether every write of a work tree's index since some moment was the committer's.

A cache of what git does not track (:mod:`jpfs.infra.git.untracked`) can outlive index
writes that only add the files committed, or drop those whose files are gone: that is
all the committer does. Anyone else (git run by hand, ``read-tree`` in a record sync)
may drop a path and leave its file, which no directory's stamp would show.

So the committer leaves, with every index it writes (``index.lock`` held), a marker in
its private directory: the stat stamp of the index it wrote and an epoch, a counter
that moves whenever the index it found was not the one the marker names (someone else
wrote it since). A reader holds a cache built at ``(epoch, index stamp)`` while the
index is the same file, or the epoch is the same and the marker names the index now.
A crash between the index and the marker moves the epoch too: a cache is only ever
dropped for nothing, never kept for something.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import NamedTuple

from jpfs.infra import textfile

FILE = "index-epoch"  # in the git directory's private ``jpfs/`` directory

# (inode, size, mtime, ctime): the committer's ``fileio.file_stamp`` of the index.
Stamp = tuple[int, int, int, int]


class Marker(NamedTuple):
    epoch: int
    written: Stamp  # the stamp of the index the committer last wrote


View = tuple[Marker | None, Stamp | None]  # what :func:`current` read


def stamp(gitdir: Path) -> Stamp | None:
    """The stamp of ``gitdir``'s index now (None: there is none)."""
    try:
        st = os.stat(gitdir / "index")
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def read(gitdir: Path) -> Marker | None:
    try:
        fields = [int(f) for f in (gitdir / "jpfs" / FILE).read_text("ascii").split()]
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    if len(fields) != 5:
        return None
    return Marker(fields[0], (fields[1], fields[2], fields[3], fields[4]))


def record(gitdir: Path, found: Stamp | None, written: Stamp) -> None:
    """After the committer replaced the index ``found`` (its stamp when read) with one
    stamped ``written``: move the epoch unless ``found`` was the committer's own."""
    old = read(gitdir)
    if old is None:
        epoch = 1
    else:
        epoch = old.epoch if found is not None and found == old.written else old.epoch + 1
    text = " ".join(str(n) for n in (epoch, *written)) + "\n"
    # Best effort: without the marker a reader drops its cache, which costs a rescan.
    with contextlib.suppress(OSError):
        textfile.write_atomic(gitdir / "jpfs" / FILE, text, parents=False)


def current(gitdir: Path) -> View:
    """The marker and the index's stamp now, the marker first: a write landing in
    between leaves it naming an older index, which errs on the side of a rebuild."""
    marker = read(gitdir)
    return marker, stamp(gitdir)


def holds(then: View, now: View) -> bool:
    """Whether what was true of the index's membership at ``then`` still is at ``now``
    (both read by :func:`current`): the same index, or only the committer wrote since."""
    (marker, index), (now_marker, now_index) = then, now
    if now_index == index:
        return True
    return (
        marker is not None
        and now_marker is not None
        and now_marker.epoch == marker.epoch
        and now_marker.written == now_index
    )
