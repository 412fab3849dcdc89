"""Snapshots of the working tree: which paths may be committed, and their current state.

A file snapshots as its blob and mode, a missing file as a deletion (None), a directory
as every non-ignored file under it (:class:`Dir`). Content filters (``.gitattributes``
clean/eol, LFS) are not applied: jpfs files are stored verbatim.
"""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pygit2

from jpfs.errors import GitError, ScopeError
from jpfs.infra import fsclock
from jpfs.infra.committer.fileio import read_all
from jpfs.infra.committer.objects import MODE_BLOB, MODE_EXEC, MODE_LINK


class TreeView(Protocol):
    """Lookups in the tip's tree (:class:`jpfs.infra.committer.trees.TreeView`)."""

    def contains(self, path: str) -> bool: ...

    def get(self, path: str) -> tuple[int, bytes] | None: ...


_LOCAL_DIR = ".jpfs/local"
# A file whose mtime and ctime are older than this when hashed cannot be rewritten with
# the same stat data unnoticed (timestamps come from a coarse clock).
_SETTLED_NS = fsclock.SETTLED_NS
# Files whose stat data and blob id are remembered, the least recently read first out:
# a daemon reads every file it commits, and kept them all (removed ones too) for life.
_KNOWN_MAX = 32_768


@dataclass
class Blob:
    oid: pygit2.Oid
    mode: int
    data: bytes | None  # None: unchanged since this process hashed it (see Worktree)
    stat: os.stat_result | None


@dataclass
class Dir:
    files: dict[str, Blob]


def check_path(owned: tuple[str, ...], raw: str) -> str:
    """``raw`` as a repo-relative path under ``owned`` (anywhere if ``owned`` is empty;
    ``""`` then names the whole tree); :class:`ScopeError` if it is not. Lexical only:
    :func:`refuse_links` looks at the disk."""
    path = raw.rstrip("/")
    if not path and not owned:
        return path  # the whole tree
    parts = path.split("/")
    if (
        not path
        or path.startswith("/")
        or "\0" in path
        or "" in parts
        or "." in parts
        or ".." in parts
        or (".git" in path.lower() and any(part.lower() == ".git" for part in parts))
    ):
        raise ScopeError(f"{raw!r} is not a repo-relative path")
    if path == _LOCAL_DIR or path.startswith(_LOCAL_DIR + "/"):
        raise ScopeError(f"{raw!r} is under {_LOCAL_DIR}/, which is never committed")
    if owned and not any(path == p or path.startswith(p + "/") for p in owned):
        listed = ", ".join(owned)
        raise ScopeError(f"{raw!r} is outside the paths jpfs commits here ({listed})")
    return path


def refuse_links(root: str, path: str, checked: set[str]) -> None:
    """:class:`ScopeError` if a directory on the way to ``path`` is a symbolic link: git
    refuses paths beyond one, and following it could commit foreign files. ``checked``
    holds the directories already found not to be links, for the paths of one batch.

    The committer runs this on the leader, just before it reads the paths: in the writer
    threads, each ``lstat`` cost every other thread a hand-off of the interpreter."""
    if path.rpartition("/")[0] in checked:
        return  # and so are the directories above it: they are checked top-down
    parts = path.split("/")
    for depth in range(1, len(parts)):
        parent = "/".join(parts[:depth])
        if parent in checked:
            continue
        try:
            if stat.S_ISLNK(os.lstat(os.path.join(root, parent)).st_mode):
                raise ScopeError(f"{path!r} is beyond a symbolic link ({parts[depth - 1]})")
        except (FileNotFoundError, NotADirectoryError):
            return
        checked.add(parent)


class Worktree:
    """Reads the working tree under ``root``; ``filemode`` is git's ``core.fileMode``.

    A conversation is committed as a whole directory, so every commit into it would
    re-read and re-hash all its events: O(events) per commit. Like git's index, the
    worktree remembers each file's stat data with its blob id once the file is older
    than the filesystem's timestamp granularity allows a same-stat rewrite to hide
    (:data:`_SETTLED_NS`), and trusts it while the stat data stays the same; for the
    :data:`_KNOWN_MAX` files read last.
    """

    def __init__(self, root: Path, filemode: bool) -> None:
        self._root = root
        self._filemode = filemode
        self._known: dict[str, tuple[tuple[int, int, int, int, int], pygit2.Oid, int]] = {}

    def read(
        self,
        repo: pygit2.Repository,
        path: str,
        tip: TreeView,
        reads: dict[str, Blob | Dir | None],
    ) -> Blob | Dir | None:
        if path in reads:
            return reads[path]
        full = os.path.join(self._root, path)
        try:
            st = os.lstat(full)
        except (FileNotFoundError, NotADirectoryError):
            if not path:
                # A vanished work tree is not "delete everything".
                raise GitError(f"the work tree {self._root} is missing") from None
            result: Blob | Dir | None = None
        else:
            if stat.S_ISDIR(st.st_mode):
                result = Dir(self._walk(repo, path, tip))
            else:
                result = self._read_file(path, full, st, tip)
        reads[path] = result
        return result

    def _read_file(
        self, path: str, full: str, st: os.stat_result, tip: TreeView | None
    ) -> Blob | None:
        if stat.S_ISLNK(st.st_mode):
            try:
                data = os.fsencode(os.readlink(full))
            except (FileNotFoundError, NotADirectoryError):
                return None  # removed while we looked: snapshot it as gone
            mode = MODE_LINK
        elif stat.S_ISREG(st.st_mode):
            key = (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino, st.st_mode)
            known = self._known.pop(path, None)
            if known is not None and known[0] == key:
                self._known[path] = known  # read last: out last
                return Blob(known[1], known[2], None, st)
            try:
                fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except (FileNotFoundError, NotADirectoryError):
                return None
            try:
                st = os.fstat(fd)
                data = read_all(fd, st.st_size)
            finally:
                os.close(fd)
            mode = MODE_EXEC if st.st_mode & stat.S_IXUSR else MODE_BLOB
            if not self._filemode and tip is not None:
                old = tip.get(path)
                if old is not None and old[0] in (MODE_BLOB, MODE_EXEC):
                    mode = old[0]
            oid = pygit2.hash(data)
            key = (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino, st.st_mode)
            if max(st.st_mtime_ns, st.st_ctime_ns) < time.time_ns() - _SETTLED_NS:
                self._known[path] = (key, oid, mode)
                if len(self._known) > _KNOWN_MAX:
                    del self._known[next(iter(self._known))]
            return Blob(oid, mode, data, st)
        else:
            return None  # fifos, sockets, devices: git cannot store them either
        return Blob(pygit2.hash(data), mode, data, st)

    def data(self, repo: pygit2.Repository, path: str, blob: Blob) -> bytes | None:
        """The content of ``blob`` if its object must be written, else None."""
        if blob.data is not None:
            return blob.data
        if blob.oid in repo.odb:
            return None
        self._known.pop(path, None)
        fresh = self._read_file(
            path, os.path.join(self._root, path), os.lstat(os.path.join(self._root, path)), None
        )
        if fresh is None or fresh.oid != blob.oid:
            raise GitError(f"{path} changed while it was being committed; retry")
        return fresh.data

    def _walk(self, repo: pygit2.Repository, top: str, tip: TreeView) -> dict[str, Blob]:
        files: dict[str, Blob] = {}
        stack = [top]
        while stack:
            rel = stack.pop()
            try:
                entries = list(os.scandir(os.path.join(self._root, rel)))
            except (FileNotFoundError, NotADirectoryError):
                continue
            for entry in entries:
                child = f"{rel}/{entry.name}" if rel else entry.name
                if entry.name.lower() == ".git" or child == _LOCAL_DIR:
                    continue
                if not _utf8(entry.name):
                    continue  # no path of ours (git paths are text here); the daemon says so
                tracked = tip.contains(child)
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    if os.path.lexists(os.path.join(entry.path, ".git")):
                        continue  # a nested repository: not ours to snapshot
                    if not tracked and repo.path_is_ignored(child + "/"):
                        continue
                    stack.append(child)
                    continue
                if not tracked and repo.path_is_ignored(child):
                    continue
                blob = self._read_file(child, entry.path, st, tip)
                if blob is not None:
                    files[child] = blob
        return files


def _utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
