"""Index entries as git stores them: parsing an index file's entry table, and the
name-stripped form of a split index's replacement entries
(:mod:`jpfs.infra.committer.splitindex`)."""

from __future__ import annotations

import hashlib
import struct


class IndexUnsupported(Exception):
    """An index this codec must not rewrite (sparse, corrupt, split without its base...)."""


class IndexVersion4(IndexUnsupported):
    """Index version 4 (prefix-compressed paths): handled through libgit2."""


_STAGES = (b"\0\0", b"\0\1", b"\0\2", b"\0\3")


def parse_entries(data: bytes) -> tuple[int, list[bytes], int]:
    """An index file's version, entries (their bytes, in file order), and where its
    extensions start (a split index's replacement entries have empty paths).

    Entries are kept as bytes and their keys (:func:`key_of`) computed when needed:
    at 130,000 entries, keys kept beside them would cost a long-lived process 10 MB."""
    if len(data) < 32 or data[:4] != b"DIRC":
        raise IndexUnsupported("not a git index file")
    version, count = struct.unpack_from(">II", data, 4)
    if version == 4:
        raise IndexVersion4("index version 4")
    if version not in (2, 3):
        raise IndexUnsupported(f"index version {version}")
    # No copy of the body: a shared index is 13 MB at 130,000 entries, and a copy
    # freed after parsing still leaves its footprint in a long-lived process's memory.
    end = len(data) - 20
    checksum = data[end:]
    if checksum != b"\0" * 20 and hashlib.sha1(memoryview(data)[:end]).digest() != checksum:
        raise IndexUnsupported("index checksum mismatch")
    raws: list[bytes] = []
    find = data.find
    off = 12
    try:
        for _ in range(count):
            flags = (data[off + 60] << 8) | data[off + 61]
            start = off + (64 if flags & 0x4000 else 62)
            length = flags & 0xFFF
            stop = find(b"\0", start, end) if length == 0xFFF else start + length
            if stop < 0:
                raise IndexUnsupported("truncated index")
            size = (stop - off + 8) & ~7
            raws.append(data[off : off + size])
            off += size
    except IndexError as exc:
        raise IndexUnsupported("truncated index") from exc
    if off > end:
        raise IndexUnsupported("truncated index")
    return version, raws, off


def key_of(raw: bytes) -> bytes:
    """An entry's sort key, ``path + b"\\0" + stage``: bytewise order is git's (path,
    stage) order, and one range (``path + b"\\0\\0"`` to ``path + b"\\0\\4"``) holds
    all stages of a path."""
    flags = (raw[60] << 8) | raw[61]
    start = 64 if flags & 0x4000 else 62
    length = flags & 0xFFF
    stop = raw.index(b"\0", start) if length == 0xFFF else start + length
    return raw[start:stop] + _STAGES[(flags >> 12) & 3]


def _header_size(raw: bytes) -> int:
    return 64 if raw[60] & 0x40 else 62


def strip_name(raw: bytes) -> bytes:
    """A replacement entry as the split index stores it: no name (the base has it)."""
    head = _header_size(raw)
    flags = ((raw[60] << 8) | raw[61]) & 0xF000
    out = raw[:60] + struct.pack(">H", flags) + raw[62:head]
    return out + b"\0" * (((head + 8) & ~7) - head)


def with_name(raw: bytes, path: bytes) -> bytes:
    """A stripped replacement entry with its base entry's ``path`` put back."""
    head = _header_size(raw)
    flags = ((raw[60] << 8) | raw[61]) & 0xF000 | min(len(path), 0xFFF)
    out = raw[:60] + struct.pack(">H", flags) + raw[62:head] + path
    return out + b"\0" * (((head + len(path) + 8) & ~7) - head - len(path))
