"""Replacing a file all at once: the one atomic writer.

The new content goes to a temporary file, written whole (synced to disk if asked, its
mtime held back if asked), which is then renamed over the target: a reader sees the
old content or the new, never half, and a write that fails (a full disk) leaves
nothing. The caller names the temporary file, because where it lives decides who may
see it: :func:`jpfs.infra.textfile.write_atomic` puts it beside the target under a name
that carries the writer's pid (the daemon's recovery sweeps a dead writer's); the
committer puts it in its private directory, while it holds git's lock on the target.

:func:`jpfs.infra.safefs` keeps its own rename for agents' files: every call it makes
is relative to a directory it opened (``dir_fd``), so no path component can be swapped
between its check and its write, which a writer taking paths cannot promise.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from pathlib import Path


def replace(
    target: Path,
    data: bytes | Sequence[bytes],
    tmp: Path,
    *,
    mode: int = 0o666,
    fsync: bool = False,
    exclusive: bool = True,
    mtime_at_most_ns: int | None = None,
    make_parent: bool = False,
) -> None:
    """Write ``data`` (bytes, or buffers written in order) to ``tmp``, then rename it to
    ``target``. ``exclusive``: ``tmp`` must not exist (a name no one else can hold
    need not be); ``mtime_at_most_ns``: the file's mtime is set no later than that;
    ``make_parent``: a missing directory of ``target`` is made before the rename."""
    buffers = [data] if isinstance(data, bytes) else data
    flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | (os.O_EXCL if exclusive else os.O_TRUNC)
    fd = os.open(tmp, flags, mode)
    try:
        try:
            writev_all(fd, buffers)
            if mtime_at_most_ns is not None:
                st = os.fstat(fd)
                if st.st_mtime_ns > mtime_at_most_ns:
                    os.utime(fd, ns=(st.st_atime_ns, mtime_at_most_ns))
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.rename(tmp, target)
        except FileNotFoundError:
            if not make_parent:
                raise
            # The same file renamed once its directory exists, not written a second
            # time: a loose object's fan-out directory is often new (git prunes them).
            os.makedirs(target.parent, exist_ok=True)
            os.rename(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def writev_all(fd: int, buffers: Sequence[bytes]) -> None:
    # Gathered writes spare joining a multi-megabyte index into one buffer first.
    for at in range(0, len(buffers), 512):
        group = buffers[at : at + 512]
        written = os.writev(fd, group)
        for buf in group:
            if written >= len(buf):
                written -= len(buf)
                continue
            write_all(fd, buf[written:])  # short write (rare): finish one by one
            written = 0
