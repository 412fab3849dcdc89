"""Snapshots of the working tree: which paths may be committed, and their current state.

A file snapshots as its blob and mode, a missing file as a deletion (None), a directory
as every non-ignored file under it (:class:`Dir`). Content filters (``.gitattributes``
clean/eol, LFS) are not applied: jpfs files are stored verbatim.
"""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import pygit2

from jpfs.committer.fileio import read_all
from jpfs.committer.objects import MODE_BLOB, MODE_EXEC, MODE_LINK
from jpfs.errors import GitError, ScopeError

_LOCAL_DIR = ".jpfs/local"


@dataclass
class Blob:
    oid: pygit2.Oid
    mode: int
    data: bytes
    stat: os.stat_result | None


@dataclass
class Dir:
    files: dict[str, Blob]


def check_path(root: Path, owned: tuple[str, ...], raw: str) -> str:
    """``raw`` as a repo-relative path under ``owned`` (anywhere if ``owned`` is empty;
    ``""`` then names the whole tree); :class:`ScopeError` if it is not."""
    path = raw.rstrip("/")
    if not path and not owned:
        return path  # the whole tree
    parts = path.split("/")
    if (
        not path
        or path.startswith("/")
        or "\0" in path
        or any(part in ("", ".", "..") or part.lower() == ".git" for part in parts)
    ):
        raise ScopeError(f"{raw!r} is not a repo-relative path")
    if path == _LOCAL_DIR or path.startswith(_LOCAL_DIR + "/"):
        raise ScopeError(f"{raw!r} is under {_LOCAL_DIR}/, which is never committed")
    if owned and not any(path == p or path.startswith(p + "/") for p in owned):
        listed = ", ".join(owned)
        raise ScopeError(f"{raw!r} is outside the paths jpfs commits here ({listed})")
    # git refuses paths beyond a symlink; following one could commit foreign files.
    parent = root
    for part in parts[:-1]:
        parent = parent / part
        try:
            if stat.S_ISLNK(os.lstat(parent).st_mode):
                raise ScopeError(f"{raw!r} is beyond a symbolic link ({part})")
        except (FileNotFoundError, NotADirectoryError):
            break
    return path


class Worktree:
    """Reads the working tree under ``root``; ``filemode`` is git's ``core.fileMode``."""

    def __init__(self, root: Path, filemode: bool) -> None:
        self._root = root
        self._filemode = filemode

    def read(
        self,
        repo: pygit2.Repository,
        path: str,
        tip_tree: pygit2.Tree | None,
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
                result = Dir(self._walk(repo, path, tip_tree))
            else:
                result = self._read_file(path, full, st, tip_tree)
        reads[path] = result
        return result

    def _read_file(
        self, path: str, full: str, st: os.stat_result, tip_tree: pygit2.Tree | None
    ) -> Blob | None:
        if stat.S_ISLNK(st.st_mode):
            try:
                data = os.fsencode(os.readlink(full))
            except (FileNotFoundError, NotADirectoryError):
                return None  # removed while we looked: snapshot it as gone
            mode = MODE_LINK
        elif stat.S_ISREG(st.st_mode):
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
            if not self._filemode and tip_tree is not None:
                with contextlib.suppress(KeyError):
                    old = tip_tree[path].filemode
                    if old in (MODE_BLOB, MODE_EXEC):
                        mode = old
        else:
            return None  # fifos, sockets, devices: git cannot store them either
        return Blob(pygit2.hash(data), mode, data, st)

    def _walk(
        self, repo: pygit2.Repository, top: str, tip_tree: pygit2.Tree | None
    ) -> dict[str, Blob]:
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
                tracked = tip_tree is not None and child in tip_tree
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
                blob = self._read_file(child, entry.path, st, tip_tree)
                if blob is not None:
                    files[child] = blob
        return files
