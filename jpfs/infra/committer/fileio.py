"""Low-level file I/O shared by the committer's writers: whole reads, gathered writes,
files replaced or created by rename, and the stat identity that tells a rewritten file."""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Sequence
from pathlib import Path


def read_all(fd: int, size_hint: int) -> bytes:
    # Asking for one byte more than the size usually gets the whole file in one read.
    first = os.read(fd, max(size_hint, 0) + 1)
    if len(first) <= size_hint or not first:
        return first
    chunks = [first]
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def file_stamp(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


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


def replace_file(
    target: Path,
    buffers: Sequence[bytes],
    tmp_dir: Path,
    fsync: bool,
    *,
    mtime_at_most_ns: int | None = None,
) -> None:
    """Replace ``target`` atomically (temp file + rename) while its lock stays held;
    with ``mtime_at_most_ns``, the new file's mtime is set no later than that."""
    tmp = tmp_dir / f"tmp-{os.getpid()}-{secrets.token_hex(6)}"
    _write_renamed(tmp, target, buffers, 0o666, fsync, mtime_at_most_ns)


def write_new(
    target: Path,
    buffers: Sequence[bytes],
    tmp_prefix: Path,
    fsync: bool,
    *,
    make_parent: bool = False,
) -> None:
    """Write an immutable object file (read-only, as git does) via temp file + rename;
    with ``make_parent``, a missing directory of ``target`` is made before the rename."""
    tmp = Path(f"{tmp_prefix}{os.getpid()}_{secrets.token_hex(6)}")
    _write_renamed(tmp, target, buffers, 0o444, fsync, make_parent=make_parent)


def _write_renamed(
    tmp: Path,
    target: Path,
    buffers: Sequence[bytes],
    mode: int,
    fsync: bool,
    mtime_at_most_ns: int | None = None,
    *,
    make_parent: bool = False,
) -> None:
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
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
