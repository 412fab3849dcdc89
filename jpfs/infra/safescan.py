"""Walking, listing and searching beneath a root, with the guarantees of :mod:`jpfs.infra.safefs`.

Every directory is opened relative to its parent's descriptor without following links,
so a symlink swapped in mid-walk is reported, never entered; ``.git`` (any case) and
``.jpfs/local`` are never shown.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from jpfs.errors import PatternError, ToolError
from jpfs.infra.patterns import Matcher, compile_pattern
from jpfs.infra.safefs import (
    _DIR_FLAGS,
    _GREP_FILE_CAP,
    _GREP_LINE_CHARS,
    _MAX_DEPTH,
    _READ_FLAGS,
    _SCAN_CAP,
    _is_dotgit,
    _is_local_state,
    _open_dir,
    _show,
    open_beneath,
    split_relpath,
)
from jpfs.infra.textfile import read_upto

EntryKind = Literal["file", "dir", "symlink", "other"]


@dataclass(frozen=True)
class Entry:
    path: str  # POSIX, relative to the root
    kind: EntryKind
    size: int  # bytes, files only (0 otherwise)


@dataclass(frozen=True)
class Listing:
    entries: tuple[Entry, ...]
    total: int  # entries seen; more than len(entries) when cut at max_entries
    complete: bool  # False when the walk stopped at the scan cap: total is a lower bound


def _check_cancel(cancel: threading.Event | None) -> None:
    if cancel is not None and cancel.is_set():
        raise ToolError("cancelled")


Hide = Callable[[str], bool]


def _walk(
    dfd: int,
    prefix: str,
    parent: str | None,
    recursive: bool,
    depth: int = 0,
    hide: Hide | None = None,
) -> Iterator[tuple[str, os.DirEntry[str], int]]:
    """Yield (relpath, entry, fd of its directory); links are reported, never entered.

    ``hide(relpath)`` lets the caller keep whole subtrees out of sight (e.g. other
    agents' conversations), neither listed nor entered.
    """
    with os.scandir(dfd) as it:
        entries = sorted(it, key=lambda e: e.name)
    for entry in entries:
        if _is_dotgit(entry.name) or _is_local_state(parent, entry.name):
            continue
        rel = prefix + entry.name
        if hide is not None and hide(rel):
            continue
        yield rel, entry, dfd
        if not (recursive and depth < _MAX_DEPTH and entry.is_dir(follow_symlinks=False)):
            continue
        try:
            sub = os.open(entry.name, _DIR_FLAGS, dir_fd=dfd)
        except OSError:
            continue  # removed or swapped for a link since it was listed
        try:
            yield from _walk(sub, rel + "/", entry.name, recursive, depth + 1, hide)
        finally:
            os.close(sub)


def _kind(entry: os.DirEntry[str]) -> EntryKind:
    if entry.is_symlink():
        return "symlink"
    if entry.is_dir(follow_symlinks=False):
        return "dir"
    return "file" if entry.is_file(follow_symlinks=False) else "other"


def list_dir(
    root: Path,
    relpath: str = ".",
    recursive: bool = False,
    max_entries: int = 1000,
    cancel: threading.Event | None = None,
    hide: Hide | None = None,
) -> Listing:
    """Entries under a directory, sorted (depth-first when recursive), links not followed."""
    parts = split_relpath(relpath)
    dfd = _open_dir(root, parts, _show(relpath))
    entries: list[Entry] = []
    total = 0
    complete = True
    try:
        prefix = "/".join(parts) + "/" if parts else ""
        for rel, entry, _ in _walk(dfd, prefix, parts[-1] if parts else None, recursive, 0, hide):
            if total >= _SCAN_CAP:
                complete = False
                break
            total += 1
            if total % 1000 == 0:
                _check_cancel(cancel)
            if len(entries) < max_entries:
                kind = _kind(entry)
                size = 0
                if kind == "file":
                    with contextlib.suppress(OSError):
                        size = entry.stat(follow_symlinks=False).st_size
                entries.append(Entry(rel, kind, size))
    finally:
        os.close(dfd)
    return Listing(tuple(entries), total, complete)


@dataclass(frozen=True)
class GrepMatch:
    path: str
    line_no: int
    line: str  # cut to a few hundred characters


@dataclass(frozen=True)
class GrepResult:
    matches: tuple[GrepMatch, ...]
    total: int  # all matches found; more than len(matches) when cut at max_matches
    files_scanned: int
    skipped: int  # binary, oversized, non-UTF-8-ish or unreadable files
    complete: bool  # False when the walk stopped at the scan cap


def _grep_fd(fd: int, rel: str, matches: Matcher) -> list[GrepMatch] | None:
    """Matches in one open file, or None when it is skipped (binary, too large, not a file)."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_size > _GREP_FILE_CAP:
        return None
    data = read_upto(fd, _GREP_FILE_CAP)
    if b"\0" in data:
        return None
    lines = data.decode("utf-8", errors="replace").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    found = []
    for no, line in enumerate(lines, 1):
        line = line.removesuffix("\r")
        if matches(line):
            found.append(GrepMatch(rel, no, line[:_GREP_LINE_CHARS]))
    return found


def grep(
    root: Path,
    pattern: str,
    relpath: str = ".",
    regex: bool = False,
    ignore_case: bool = False,
    max_matches: int = 200,
    cancel: threading.Event | None = None,
    hide: Hide | None = None,
) -> GrepResult:
    """Lines matching ``pattern`` (a literal unless ``regex``) in a file or a directory tree."""
    try:
        rx = compile_pattern(pattern, regex=regex, ignore_case=ignore_case)
    except PatternError as exc:
        raise ToolError(str(exc)) from exc
    parts = split_relpath(relpath)
    start = open_beneath(root, relpath, _READ_FLAGS)
    matches: list[GrepMatch] = []
    total = scanned = skipped = seen = 0
    try:
        if not stat.S_ISDIR(os.fstat(start).st_mode):
            found = _grep_fd(start, "/".join(parts), rx)
            if found is None:
                raise ToolError(f"path {_show(relpath)} is not a searchable text file")
            return GrepResult(tuple(found[:max_matches]), len(found), 1, 0, True)
        prefix = "/".join(parts) + "/" if parts else ""
        for rel, entry, dfd in _walk(start, prefix, parts[-1] if parts else None, True, 0, hide):
            seen += 1
            if seen > _SCAN_CAP:
                break
            if not entry.is_file(follow_symlinks=False):
                continue
            _check_cancel(cancel)
            found = None
            with contextlib.suppress(OSError):
                fd = os.open(entry.name, _READ_FLAGS, dir_fd=dfd)
                try:
                    found = _grep_fd(fd, rel, rx)
                finally:
                    os.close(fd)
            if found is None:
                skipped += 1
                continue
            scanned += 1
            total += len(found)
            matches.extend(found[: max(0, max_matches - len(matches))])
    finally:
        os.close(start)
    return GrepResult(tuple(matches), total, scanned, skipped, seen <= _SCAN_CAP)
