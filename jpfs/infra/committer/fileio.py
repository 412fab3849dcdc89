"""Low-level file I/O shared by the committer's writers: whole reads, files replaced or
created by rename (through :mod:`jpfs.infra.atomic`, the one atomic writer), and the
stat identity that tells a rewritten file."""

from __future__ import annotations

import os
import secrets
from collections.abc import Sequence
from pathlib import Path

from jpfs.infra.atomic import replace, write_all

__all__ = ["file_stamp", "read_all", "replace_file", "write_all", "write_new"]


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
    replace(target, buffers, tmp, fsync=fsync, mtime_at_most_ns=mtime_at_most_ns)


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
    replace(target, buffers, tmp, mode=0o444, fsync=fsync, make_parent=make_parent)
