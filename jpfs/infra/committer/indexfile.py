"""A codec for git's index file, fast enough to rewrite a 100k-entry index per commit.

Writing a 100k-entry index with libgit2 costs ~33 ms (SHA-1DC hashing), more than the
rest of a commit, so the index is handled here: entries stay in memory as their on-disk
bytes in chunks with cached joined bytes (their sort keys only for the chunks written to
last: a daemon keeps this index for its life, 20 MB at 130,000 entries), re-parsed only
when the file's stat identity changed (someone else wrote it); changes go in by bisect;
the file is re-emitted with a gathered write and OpenSSL SHA-1. A large index is written split
(:mod:`jpfs.infra.committer.splitindex`): only what changed since its shared base. New
entries carry the stat data of the file we read (fstat before reading, as git does), so
``git status`` does not rehash them. As in git, racily clean entries are re-checked
against the working tree and smudged (size 0) if modified (see :meth:`FastIndex.save`).
The cache-tree (``TREE``, :mod:`jpfs.infra.committer.cachetree`) is invalidated along
changed paths; ``REUC`` is kept; other optional extensions (``UNTR``, ``FSMN``, ``EOIE``,
``IEOT``) are dropped, which only costs git a rebuild. Index version 4 goes through
libgit2 (:mod:`jpfs.infra.committer.libgit2index`). Sparse indexes (mandatory extension
``sdir``) raise :class:`IndexUnsupported`."""

from __future__ import annotations

import bisect
import hashlib
import os
import struct
import time
from collections.abc import Callable
from pathlib import Path

from jpfs.infra.committer import splitindex
from jpfs.infra.committer.cachetree import CacheTree
from jpfs.infra.committer.fileio import file_stamp, replace_file
from jpfs.infra.committer.indexentries import (
    IndexUnsupported,
    IndexVersion4,
    key_of,
    parse_entries,
)
from jpfs.infra.committer.indexport import IndexFile
from jpfs.infra.committer.splitindex import NO_SPLIT, SplitPolicy, SplitState
from jpfs.infra.committer.splitlink import SplitCorrupt

__all__ = ["MASK32", "FastIndex", "IndexUnsupported", "IndexVersion4"]

MASK32 = 0xFFFFFFFF


class _Chunk:
    """A run of consecutive index entries, while unchanged their joined bytes, and
    while written to their keys (:func:`key_of`; see :meth:`FastIndex._keys`)."""

    __slots__ = ("joined", "keys", "raws")

    def __init__(self, raws: list[bytes], keys: list[bytes] | None = None) -> None:
        self.raws = raws
        self.keys = keys
        self.joined: bytes | None = None

    def bisect(self, key: bytes, lo: int = 0) -> int:
        if self.keys is not None:
            return bisect.bisect_left(self.keys, key, lo)
        return bisect.bisect_left(self.raws, key, lo, key=key_of)

    def data(self) -> bytes:
        if self.joined is None:
            self.joined = b"".join(self.raws)
        return self.joined


_CHUNK = 256
_KEYED = 128  # chunks whose keys are kept (the ones written to last), at most
_RECHECKS = 128  # racily clean entries re-checked per index write, at most
_NEVER = 1 << 62
_CLOCK_SLACK = 0.05  # seconds


class FastIndex(IndexFile):
    """Index versions 2 and 3, entries kept as their on-disk bytes.

    Entries live in chunks (a rope) whose joined bytes are cached, so re-emitting a
    100k-entry index after a few changes copies bytes instead of re-joining 100k
    objects. Entries are found by bisect on their keys (:func:`key_of`): ``firsts``
    holds each chunk's first key, and the chunks written to last keep their keys.
    """

    def __init__(self, version: int) -> None:
        self.version = version
        self.chunks: list[_Chunk] = []
        self.firsts: list[bytes] = []  # first key of each chunk, for bisect
        self.count = 0
        self.cache_tree: CacheTree | None = None
        self.reuc: bytes | None = None
        self.mtime_sec = 0
        # Entries that are racily clean relative to the index they were read from or
        # written to; git re-checks those before writing a newer index, and so do we.
        self.racy: dict[bytes, int] = {}
        self.racy_floor = _NEVER  # no racy entry is older than this (seconds)
        self.stamp: tuple[int, int, int, int] | None = None
        self.split: SplitState | None = None  # the base this index is split from
        self.keyed: dict[_Chunk, None] = {}  # chunks whose keys are kept, oldest first

    @classmethod
    def empty(cls) -> FastIndex:
        return cls(2)

    @classmethod
    def parse(
        cls,
        data: bytes,
        st: os.stat_result,
        gitdir: Path | None = None,
        known: SplitState | None = None,
    ) -> FastIndex:
        """The index file ``data`` (stat ``st``); a split index's base is read from
        ``gitdir`` (none given: a split index is :class:`IndexUnsupported`) unless it
        is ``known``'s (the base of the index this one replaces)."""
        version, raws, off = parse_entries(data)
        end = len(data) - 20  # the checksum's offset; the data is not copied
        index = cls(version)
        index.mtime_sec = int(st.st_mtime)
        index.stamp = file_stamp(st)
        link: bytes | None = None
        unpack = struct.unpack_from
        while off + 8 <= end:
            sig = data[off : off + 4]
            (length,) = unpack(">I", data, off + 4)
            payload = data[off + 8 : min(off + 8 + length, end)]
            off += 8 + length
            if sig == b"TREE":
                try:
                    index.cache_tree = CacheTree.parse(payload)
                except (ValueError, IndexError):
                    index.cache_tree = None  # optional cache; dropping it is always valid
            elif sig == b"REUC":
                index.reuc = payload
            elif sig == b"link" and gitdir is not None:
                link = payload
            elif not b"A" <= sig[:1] <= b"Z":
                raise IndexUnsupported(f"mandatory index extension {sig!r}")
        if off != end:
            raise IndexUnsupported("truncated index")
        if link is not None and gitdir is not None:
            try:
                index.split, raws = splitindex.merge_base(index.version, link, gitdir, raws, known)
                index.version = index.split.version
            except SplitCorrupt as exc:
                raise IndexUnsupported(f"split index: {exc}") from exc
        newer = index.mtime_sec
        racy = index.racy
        for raw in raws:
            mtime = unpack(">I", raw, 8)[0]
            if mtime >= newer:
                racy[key_of(raw)[:-2]] = mtime
        index.racy_floor = newer  # every racy entry is at least as new as the file
        for at in range(0, len(raws), _CHUNK):
            index.chunks.append(_Chunk(raws[at : at + _CHUNK]))
            index.firsts.append(key_of(raws[at]))
        index.count = len(raws)
        return index

    def _keys(self, chunk: _Chunk) -> list[bytes]:
        """The keys of a chunk about to be written to, kept while it is among the
        :data:`_KEYED` last written (see :meth:`_forget_keys`): a chunk written once is
        likely written again (a conversation's next event), and a bisect on kept keys
        costs a twelfth of one computing them (0.15 against 1.8 us in 256 entries)."""
        if chunk.keys is None:
            chunk.keys = [key_of(raw) for raw in chunk.raws]
        else:
            self.keyed.pop(chunk, None)
        self.keyed[chunk] = None
        return chunk.keys

    def _forget_keys(self) -> None:
        # Between writes only: a write holds keys lists across its lookups.
        while len(self.keyed) > _KEYED:
            chunk = next(iter(self.keyed))
            del self.keyed[chunk]
            chunk.keys = None

    def _slices(self, lo: bytes, hi: bytes) -> list[tuple[_Chunk, int, int]]:
        """(chunk, i, j) runs of the entries with lo <= key < hi, in order."""
        found = []
        at = max(bisect.bisect_right(self.firsts, lo) - 1, 0)
        while at < len(self.chunks):
            chunk = self.chunks[at]
            i = chunk.bisect(lo)
            j = chunk.bisect(hi, i)
            if j > i:
                found.append((chunk, i, j))
            if j < len(chunk.raws):
                break
            at += 1
        return found

    def _delete(self, lo: bytes, hi: bytes) -> bool:
        slices = self._slices(lo, hi)
        for chunk, i, j in reversed(slices):
            keys = self._keys(chunk)
            for key in keys[i:j]:
                path = key[:-2]
                self.racy.pop(path, None)
                if self.split is not None:
                    self.split.delete(key)
                if self.cache_tree is not None:
                    self.cache_tree.invalidate(path)
            del keys[i:j]
            del chunk.raws[i:j]
            chunk.joined = None
            self.count -= j - i
            at = self.chunks.index(chunk)
            if keys:
                self.firsts[at] = keys[0]
            else:
                del self.chunks[at]
                del self.firsts[at]
                del self.keyed[chunk]
        return bool(slices)

    def _insert(self, key: bytes, raw: bytes) -> None:
        if not self.chunks:
            self.chunks.append(_Chunk([]))
            self.firsts.append(key)
        at = max(bisect.bisect_right(self.firsts, key) - 1, 0)
        chunk = self.chunks[at]
        keys = self._keys(chunk)
        i = bisect.bisect_left(keys, key)
        keys.insert(i, key)
        chunk.raws.insert(i, raw)
        chunk.joined = None
        if self.split is not None:
            self.split.set(key, raw)
        self.firsts[at] = keys[0]
        self.count += 1
        if len(keys) > 2 * _CHUNK:
            tail = _Chunk(chunk.raws[_CHUNK:], keys[_CHUNK:])
            del keys[_CHUNK:]
            del chunk.raws[_CHUNK:]
            self.chunks.insert(at + 1, tail)
            self.firsts.insert(at + 1, self._keys(tail)[0])

    def get(self, path: bytes) -> tuple[bytes, int] | None:
        slices = self._slices(path + b"\0\0", path + b"\0\4")
        if len(slices) != 1:
            return None
        chunk, i, j = slices[0]
        raw = chunk.raws[i]
        if j - i != 1 or key_of(raw)[-1] != 0:
            return None
        return raw[40:60], struct.unpack_from(">I", raw, 24)[0]

    def remove(self, path: bytes) -> bool:
        # Exactly this path: a directory of the same name is described by its files.
        return self._delete(path + b"\0\0", path + b"\0\4")

    def set(self, path: bytes, oid: bytes, mode: int, st: os.stat_result | None) -> None:
        self.remove(path)
        self._delete(path + b"/", path + b"0")  # a directory the file replaces
        # A file where a parent directory used to be a file: drop those entries (git's
        # add_index_entry_with_check does the same).
        parts = path.split(b"/")
        for depth in range(1, len(parts)):
            parent = b"/".join(parts[:depth])
            self._delete(parent + b"\0\0", parent + b"\0\4")
        if st is None:
            fields = (0,) * 6 + (mode,) + (0,) * 3
        else:
            fields = (
                st.st_ctime_ns // 1_000_000_000 & MASK32,
                st.st_ctime_ns % 1_000_000_000,
                st.st_mtime_ns // 1_000_000_000 & MASK32,
                st.st_mtime_ns % 1_000_000_000,
                st.st_dev & MASK32,
                st.st_ino & MASK32,
                mode,
                st.st_uid & MASK32,
                st.st_gid & MASK32,
                st.st_size & MASK32,
            )
        head = struct.pack(">10I20sH", *fields, oid, min(len(path), 0xFFF))
        self._insert(path + b"\0\0", head + path + b"\0" * (8 - (62 + len(path)) % 8))
        if fields[2]:
            self.racy[path] = fields[2]
            self.racy_floor = min(self.racy_floor, fields[2])
        if self.cache_tree is not None:
            self.cache_tree.invalidate(path)

    def _smudge_racy(self, racy_modified: Callable[[bytes, bytes], bool], second: int) -> int:
        """Re-check the racily clean entries older than ``second``, oldest first and at
        most :data:`_RECHECKS`; the second the new index's mtime must not pass.

        An entry checked once its second is over is racy no more: a later change of its
        file gets a later mtime, which git sees in the stat data alone."""
        if self.racy_floor >= second:
            return second  # the usual case: every racy entry is of this second
        cut = second
        due = sorted((m, p) for p, m in self.racy.items() if m < second)
        for done, (mtime, path) in enumerate(due):
            if done == _RECHECKS:
                cut = mtime  # the rest stay racy in the new index: checked next time
                break
            del self.racy[path]
            slices = self._slices(path + b"\0\0", path + b"\0\1")
            if not slices:
                continue
            chunk, i, _ = slices[0]
            raw = chunk.raws[i]
            if raw[36:40] != b"\0\0\0\0" and racy_modified(path, raw):
                chunk.raws[i] = raw[:36] + b"\0\0\0\0" + raw[40:]
                chunk.joined = None
                if self.split is not None:
                    self.split.set(path + b"\0\0", chunk.raws[i])
        self.racy_floor = min(self.racy.values(), default=_NEVER)
        return cut

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
        # git re-checks each racily clean entry (mtime not older than the index's, in
        # seconds) before writing a later index, which would make it look clean for
        # good. Doing so at every commit made a commit O(commits per second); so the
        # current second's entries wait, older ones go a few at a time, and the new
        # index's mtime is set back to the oldest second left unchecked: those stay
        # racy for every reader (an earlier index mtime only widens that set). A second
        # is over a little after the clock says so: file timestamps may lag behind.
        cut = self._smudge_racy(racy_modified, int(time.time() - _CLOCK_SLACK))
        if split.wanted(self.count, self.split is not None):
            parts = self._split_parts(index_path.parent, tmp_dir, split, fsync)
        else:
            self.split = None
            parts = [b"DIRC" + struct.pack(">II", self.version, self.count)]
            parts.extend(chunk.data() for chunk in self.chunks)
        if self.cache_tree is not None:
            payload = self.cache_tree.serialize()
            parts += [b"TREE", struct.pack(">I", len(payload)), payload]
        if self.reuc is not None:
            parts += [b"REUC", struct.pack(">I", len(self.reuc)), self.reuc]
        if skip_hash:
            parts.append(b"\0" * 20)
        else:
            digest = hashlib.sha1()
            for part in parts:
                digest.update(part)
            parts.append(digest.digest())
        replace_file(index_path, parts, tmp_dir, fsync, mtime_at_most_ns=cut * 1_000_000_000)
        self._forget_keys()
        st = os.stat(index_path)
        self.stamp = file_stamp(st)
        self.mtime_sec = int(st.st_mtime)
        if self.racy_floor < self.mtime_sec:
            self.racy = {p: m for p, m in self.racy.items() if m >= self.mtime_sec}
            self.racy_floor = min(self.racy.values(), default=_NEVER)

    def _split_parts(
        self, gitdir: Path, tmp_dir: Path, policy: SplitPolicy, fsync: bool
    ) -> list[bytes]:
        """The entries and ``link`` extension of a split index, on a new base when the
        split part has outgrown ``policy`` (:meth:`SplitPolicy.outgrown`)."""
        state = self.split
        if state is None or policy.outgrown(state.changes(), self.count):
            # The base in one buffer, freed once written: a split index is written from
            # its changes, so the chunks' joined bytes would be a second copy of every
            # entry kept for nothing (13 MB of a daemon's memory at 130,000 entries).
            data = b"".join([raw for chunk in self.chunks for raw in chunk.raws])
            for chunk in self.chunks:
                chunk.joined = None
            sha = splitindex.write_shared(gitdir, tmp_dir, self.version, self.count, [data], fsync)
            del data
            raws = [raw for chunk in self.chunks for raw in chunk.raws]
            state = self.split = SplitState(sha, self.version, raws)
            if policy.clean:
                splitindex.expire_shared(gitdir, {sha})
        else:
            state.freshen(gitdir)
        count, entries = state.entries()
        link = state.link()
        return [
            b"DIRC" + struct.pack(">II", self.version, count),
            *entries,
            b"link",
            struct.pack(">I", len(link)),
            link,
        ]
