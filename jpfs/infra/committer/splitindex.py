"""git's split index, so that a commit rewrites what changed, not the whole index.

A large index is two files: ``sharedindex.<sha1>`` in the git directory holds a base
(every entry at some moment; immutable, named by its checksum), and ``index`` holds
only what differs from it, plus the ``link`` extension naming the base with two EWAH
bitmaps over its positions: entries deleted, and entries replaced by the index's first
entries (written with empty names, in position order); the index's other entries are
new. git reads, writes and cleans this format itself (``core.splitIndex``,
``git update-index --split-index``); see ``Documentation/technical/index-format.txt``.
The link extension itself, its bitmaps and :class:`SplitCorrupt` are
:mod:`jpfs.infra.committer.splitlink`'s.

Rewriting the record's whole index cost ~25 ms per commit at 10,000 conversations
(131k entries: SHA-1 over 13 MB); the split part costs what changed since the base.
:class:`SplitState` keeps that part up to date as entries are set and removed, so a
write serialises it without looking at the base; when it outgrows
``splitIndex.maxPercentChange`` of the index (git's rule and default, 20%), the next
write makes a new base. With that setting unset, jpfs also makes one once the part
holds :data:`MAX_CHANGES` entries: every commit writes and hashes the whole part, and
20% of a 145k-entry index (10,000 conversations) is 29k entries, 2.3 MB per commit of a
busy daemon. The cap is not lower because a new base costs 30-140 ms at that size (13
MB joined, hashed and written), paid by the one commit that makes it: at 2,048 entries
that was every 40 rounds of 50 writers, a p99 of its own; at 8,192, every 160. Base
files superseded by jpfs are deleted an hour after anyone last used them (git's readers
touch the base they read), unless
``splitIndex.sharedIndexExpire`` is set, in which case git's own cleaning applies.
"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import itertools
import operator
import os
import re
import struct
import time
from dataclasses import dataclass
from pathlib import Path

from jpfs.infra.committer.fileio import replace_file
from jpfs.infra.committer.indexentries import key_of, parse_entries, strip_name, with_name
from jpfs.infra.committer.splitlink import SplitCorrupt, ewah_encode, parse_link

_SHARED_PREFIX = "sharedindex."
_SHARED_RE = re.compile(r"sharedindex\.[0-9a-f]{40}")
_EXPIRE_SECONDS = 3600.0
_FRESHEN_SECONDS = 60.0
_CHUNK = 256  # replacement positions per cached chunk of the split part
_SPARSE = 32  # base entries per sparse key: a position is a bisect in those, then in 32
SPLIT_MIN_ENTRIES = 10_000  # with core.splitIndex unset, indexes this large are split
MAX_CHANGES = 8_192  # with splitIndex.maxPercentChange unset, a new base past this many


@dataclass(frozen=True)
class SplitPolicy:
    """git's split-index settings as jpfs applies them to an index it writes.

    ``enabled``: ``core.splitIndex`` (None when unset: split from
    :data:`SPLIT_MIN_ENTRIES` entries on, and keep an index git split). ``clean``: delete
    superseded base files (False when ``splitIndex.sharedIndexExpire`` is set).
    """

    enabled: bool | None = False
    max_percent: int = 20
    clean: bool = True
    max_changes: int | None = None  # and at most this many (None: the percentage alone)

    def wanted(self, count: int, split_now: bool) -> bool:
        if self.enabled is None:
            return split_now or count >= SPLIT_MIN_ENTRIES
        return self.enabled

    def outgrown(self, changes: int, count: int) -> bool:
        """Whether a split part of ``changes`` entries calls for a new base."""
        if self.max_changes is not None and changes > self.max_changes:
            return True
        return changes * 100 > self.max_percent * count


NO_SPLIT = SplitPolicy(enabled=False)


# -- the split part ------------------------------------------------------------------------


def _bitmap(count: int) -> bytearray:
    return bytearray(((count + 63) // 64) * 8)


class SplitState:
    """The base an index is split from and what the index holds beside it.

    A base entry's position is found by bisect on the base's keys (:func:`key_of`,
    git's order), first in ``sparse`` (every :data:`_SPARSE`-th key), then among the
    entries: a dict of all keys cost 80 bytes per entry, the keys themselves 70 more,
    20 MB of a daemon's memory at 130,000 entries. Replacements are kept per chunk of
    positions with their joined bytes cached, so that a write re-joins the chunks that
    changed; new entries are kept sorted by key.
    """

    def __init__(
        self, sha: bytes, version: int, raws: list[bytes], sparse: list[bytes] | None = None
    ) -> None:
        self.sha = sha
        self.version = version  # the index version of its entries
        self.raws = raws  # the base's entries: never changed (a base is immutable)
        self.count = len(raws)
        if sparse is None:
            sparse = [key_of(raws[at]) for at in range(0, self.count, _SPARSE)]
        self.sparse = sparse
        self.deleted = _bitmap(self.count)
        self.ndeleted = 0
        self.replaced = _bitmap(self.count)
        self.chunks: dict[int, dict[int, bytes]] = {}
        self.joined: dict[int, bytes] = {}
        self.nreplaced = 0
        self.new_keys: list[bytes] = []
        self.new_raws: list[bytes] = []
        self.last_freshen = time.monotonic()

    def changes(self) -> int:
        return self.ndeleted + self.nreplaced + len(self.new_keys)

    def _flip(self, bitmap: bytearray, at: int, on: bool) -> bool:
        byte, bit = divmod(at, 8)
        was = bool(bitmap[byte] >> bit & 1)
        if on:
            bitmap[byte] |= 1 << bit
        else:
            bitmap[byte] &= ~(1 << bit) & 0xFF
        return was != on

    def _replace(self, at: int, raw: bytes | None) -> None:
        chunk_no = at // _CHUNK
        chunk = self.chunks.setdefault(chunk_no, {})
        self.joined.pop(chunk_no, None)
        if raw is None:
            chunk.pop(at, None)
            if not chunk:
                del self.chunks[chunk_no]
        else:
            chunk[at] = strip_name(raw)
        if self._flip(self.replaced, at, raw is not None):
            self.nreplaced += 1 if raw is not None else -1

    def _position(self, key: bytes) -> int | None:
        lo = (bisect.bisect_right(self.sparse, key) - 1) * _SPARSE
        if lo < 0:
            return None
        hi = min(lo + _SPARSE, self.count)
        at = bisect.bisect_left(self.raws, key, lo, hi, key=key_of)
        return at if at < hi and key_of(self.raws[at]) == key else None

    def set(self, key: bytes, raw: bytes) -> None:
        at = self._position(key)
        if at is None:
            i = bisect.bisect_left(self.new_keys, key)
            if i < len(self.new_keys) and self.new_keys[i] == key:
                self.new_raws[i] = raw
            else:
                self.new_keys.insert(i, key)
                self.new_raws.insert(i, raw)
            return
        if self._flip(self.deleted, at, False):
            self.ndeleted -= 1
        self._replace(at, None if raw == self.raws[at] else raw)

    def delete(self, key: bytes) -> None:
        at = self._position(key)
        if at is None:
            i = bisect.bisect_left(self.new_keys, key)
            if i < len(self.new_keys) and self.new_keys[i] == key:
                del self.new_keys[i]
                del self.new_raws[i]
            return
        self._replace(at, None)
        if self._flip(self.deleted, at, True):
            self.ndeleted += 1

    def entries(self) -> tuple[int, list[bytes]]:
        """The split part's entry count and bytes: replacements in base order, then new."""
        parts = []
        for chunk_no in sorted(self.chunks):
            joined = self.joined.get(chunk_no)
            if joined is None:
                chunk = self.chunks[chunk_no]
                joined = self.joined[chunk_no] = b"".join(chunk[at] for at in sorted(chunk))
            parts.append(joined)
        parts.extend(self.new_raws)
        return self.nreplaced + len(self.new_keys), parts

    def link(self) -> bytes:
        return (
            self.sha
            + ewah_encode(self.deleted, self.count)
            + ewah_encode(self.replaced, self.count)
        )

    def freshen(self, gitdir: Path) -> None:
        """Touch the base now and then, as git does, so that no cleaner expires it."""
        now = time.monotonic()
        if now - self.last_freshen < _FRESHEN_SECONDS:
            return
        self.last_freshen = now
        with contextlib.suppress(OSError):
            os.utime(gitdir / shared_name(self.sha))


def shared_name(sha: bytes) -> str:
    return _SHARED_PREFIX + sha.hex()


def read_shared(gitdir: Path, sha: bytes) -> bytes:
    path = gitdir / shared_name(sha)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SplitCorrupt(f"the shared index {path.name} cannot be read: {exc}") from exc
    checksum = data[-20:]  # hashed in place: no copy of the base (13 MB at 130,000 entries)
    if (
        len(data) < 32
        or checksum != sha
        or hashlib.sha1(memoryview(data)[:-20]).digest() != checksum
    ):
        raise SplitCorrupt(f"the shared index {path.name} does not match its name")
    return data


def write_shared(
    gitdir: Path, tmp_dir: Path, version: int, count: int, parts: list[bytes], fsync: bool
) -> bytes:
    """Write a base holding ``parts`` (entries, no extensions); its checksum."""
    buffers = [b"DIRC" + struct.pack(">II", version, count), *parts]
    digest = hashlib.sha1()
    for part in buffers:
        digest.update(part)
    sha = digest.digest()
    target = gitdir / shared_name(sha)
    if not target.exists():
        replace_file(target, [*buffers, sha], tmp_dir, fsync)
    return sha


def expire_shared(gitdir: Path, keep: set[bytes]) -> None:
    """Delete base files nobody used for an hour, except ``keep`` (best effort)."""
    cutoff = time.time() - _EXPIRE_SECONDS
    kept = {shared_name(sha) for sha in keep}
    with contextlib.suppress(OSError), os.scandir(gitdir) as entries:
        for entry in entries:
            if entry.name in kept or not _SHARED_RE.fullmatch(entry.name):
                continue
            with contextlib.suppress(OSError):
                if entry.stat(follow_symlinks=False).st_mtime < cutoff:
                    os.unlink(entry.path)


def merge_base(
    version: int,
    payload: bytes,
    gitdir: Path,
    raws: list[bytes],
    known: SplitState | None = None,
) -> tuple[SplitState, list[bytes]]:
    """The entries of a split index (``raws`` in file order, ``link`` extension
    ``payload``): its base with the file's changes applied, as git's
    ``merge_base_index`` does, and the :class:`SplitState` holding those changes.

    A base read before (``known``, when it is the one named) is not read again: git
    rewrites the split part (`git status` does, to refresh stat data) and keeps the
    base, and re-reading it cost 150 ms and 20 MB of new objects at 130,000 entries."""
    link = parse_link(payload)
    if known is not None and known.sha == link.base and version == known.version:
        base_raws = known.raws
        state = SplitState(link.base, version, base_raws, known.sparse)
    else:
        base_version, base_raws, _ = parse_entries(read_shared(gitdir, link.base))
        # git writes a version-3 split part over a version-2 base once an entry gets an
        # extended flag (`git update-index --skip-worktree`); their entries differ only
        # there, so the merged index is of the higher version.
        pairs = itertools.pairwise(map(key_of, base_raws))
        if not all(itertools.starmap(operator.lt, pairs)):
            raise SplitCorrupt("the shared index's entries are out of order")  # git dies too
        state = SplitState(link.base, max(version, base_version), base_raws)
    merged = list(base_raws)
    if len(link.replaced) > len(raws):
        raise SplitCorrupt("more replaced entries than the index holds")
    for k, at in enumerate(link.replaced):
        key = key_of(raws[k])
        if at >= len(base_raws) or key[:-2]:
            raise SplitCorrupt("a replacement entry out of range or with a name")
        base_key = key_of(base_raws[at])
        if key[-2:] != base_key[-2:]:
            raise SplitCorrupt("a replacement entry changes its entry's stage")
        merged[at] = raw = with_name(raws[k], base_key[:-2])
        state.set(base_key, raw)
    gone = set(link.deleted)
    if any(at >= len(base_raws) for at in gone) or gone & set(link.replaced):
        raise SplitCorrupt("a deleted entry out of range or also replaced")
    for at in gone:
        state.delete(key_of(base_raws[at]))
    if gone:
        merged = [raw for at, raw in enumerate(merged) if at not in gone]
    added = [(key_of(raw), raw) for raw in raws[len(link.replaced) :]]
    if any(not key[:-2] for key, _ in added):
        raise SplitCorrupt("a new entry without a name")
    for key, raw in added:
        state.set(key, raw)
    if not added:
        return state, merged
    # New entries go in by bisect (they are few beside the base); a later one for the
    # same key overrides an earlier one, and a new entry its base entry.
    added.sort(key=operator.itemgetter(0))
    added = [e for i, e in enumerate(added) if i + 1 == len(added) or added[i + 1][0] != e[0]]
    out: list[bytes] = []
    prev = 0
    for key, raw in added:
        at = bisect.bisect_left(merged, key, prev, key=key_of)
        out.extend(merged[prev:at])
        out.append(raw)
        prev = at + 1 if at < len(merged) and key_of(merged[at]) == key else at
    out.extend(merged[prev:])
    return state, out
