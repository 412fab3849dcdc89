"""Index version 4 (prefix-compressed paths), read and written through libgit2.

Slower than :mod:`jpfs.infra.committer.indexfile`'s codec and without stat data for new
entries (``git status`` rehashes them once), but rare: git writes version 4 only when
asked to (``index.version = 4``, ``feature.manyFiles``).
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Callable
from pathlib import Path

import pygit2

from jpfs.infra.committer.fileio import file_stamp
from jpfs.infra.committer.indexentries import IndexUnsupported
from jpfs.infra.committer.indexport import IndexFile
from jpfs.infra.committer.splitindex import NO_SPLIT, SplitPolicy


class Libgit2Index(IndexFile):
    """Fallback for index version 4, through a pygit2 Index bound to a private path."""

    def __init__(self, index: pygit2.Index, tmp: Path) -> None:
        self._index = index
        self._tmp = tmp

    @classmethod
    def load(cls, index_path: Path, tmp_dir: Path, st: os.stat_result) -> Libgit2Index:
        tmp = tmp_dir / f"tmp-index-{os.getpid()}-{secrets.token_hex(6)}"
        # A hard link lets libgit2 read the real index while writing elsewhere: we hold
        # index.lock, so libgit2 must not try to take it.
        os.link(index_path, tmp)
        try:
            index = pygit2.Index(str(tmp))
        except pygit2.GitError as exc:
            raise IndexUnsupported(str(exc)) from exc
        finally:
            os.unlink(tmp)
        result = cls(index, tmp)
        result.stamp = file_stamp(st)
        return result

    def get(self, path: bytes) -> tuple[bytes, int] | None:
        name = os.fsdecode(path)
        try:
            entry = self._index[name]  # stage 0 only: a conflicted path raises
        except KeyError:
            return None
        return entry.id.raw, int(entry.mode)

    def set(self, path: bytes, oid: bytes, mode: int, st: os.stat_result | None) -> None:
        name = os.fsdecode(path)
        self.remove(path)
        with contextlib.suppress(pygit2.GitError, OSError, KeyError):
            self._index.remove_directory(name)  # a directory the file replaces
        self._index.add(pygit2.IndexEntry(name, pygit2.Oid(raw=oid), pygit2.enums.FileMode(mode)))

    def remove(self, path: bytes) -> bool:
        name = os.fsdecode(path)
        found = False
        for stage in range(4):
            with contextlib.suppress(pygit2.GitError, OSError, KeyError):
                self._index.remove(name, stage)
                found = True
        return found

    def save(
        self,
        index_path: Path,
        tmp_dir: Path,
        racy_modified: Callable[[bytes, bytes], bool],
        *,
        fsync: bool,
        skip_hash: bool,
        split: SplitPolicy = NO_SPLIT,
    ) -> None:
        self._index.write()
        os.rename(self._tmp, index_path)
        self.stamp = file_stamp(os.stat(index_path))
