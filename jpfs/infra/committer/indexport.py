"""The index as the committer keeps it in step: the interface of its two codecs,
:class:`~jpfs.infra.committer.indexfile.FastIndex` (versions 2 and 3, jpfs's own) and
:class:`~jpfs.infra.committer.libgit2index.Libgit2Index` (version 4, through libgit2);
:mod:`jpfs.infra.committer.userindex` picks one by the file's version."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from jpfs.infra.committer.splitindex import NO_SPLIT, SplitPolicy


class IndexFile:
    """The operations the committer needs on its work tree's index."""

    stamp: tuple[int, int, int, int] | None = None
    foreign = False  # last written by someone else (not by this committer)

    def get(self, path: bytes) -> tuple[bytes, int] | None:
        """(oid, mode) of the stage-0 entry, or None if absent or conflicted."""
        raise NotImplementedError

    def set(self, path: bytes, oid: bytes, mode: int, st: os.stat_result | None) -> None:
        raise NotImplementedError

    def remove(self, path: bytes) -> bool:
        raise NotImplementedError

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
        """Replace the index file (whose lock the caller holds) with this content."""
        raise NotImplementedError
