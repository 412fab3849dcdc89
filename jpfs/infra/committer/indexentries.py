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


def parse_entries(data: bytes) -> tuple[int, list[bytes], list[bytes], int]:
    """An index file's version, entry keys and bytes in file order, and where its
    extensions start (a split index's replacement entries have empty paths)."""
    if len(data) < 32 or data[:4] != b"DIRC":
        raise IndexUnsupported("not a git index file")
    version, count = struct.unpack_from(">II", data, 4)
    if version == 4:
        raise IndexVersion4("index version 4")
    if version not in (2, 3):
        raise IndexUnsupported(f"index version {version}")
    body, checksum = data[:-20], data[-20:]
    if checksum != b"\0" * 20 and hashlib.sha1(body).digest() != checksum:
        raise IndexUnsupported("index checksum mismatch")
    keys: list[bytes] = []
    raws: list[bytes] = []
    find = body.find
    stages = [b"\0\0", b"\0\1", b"\0\2", b"\0\3"]
    off = 12
    try:
        for _ in range(count):
            flags = (body[off + 60] << 8) | body[off + 61]
            start = off + (64 if flags & 0x4000 else 62)
            length = flags & 0xFFF
            end = find(b"\0", start) if length == 0xFFF else start + length
            size = (end - off + 8) & ~7
            keys.append(body[start:end] + stages[(flags >> 12) & 3])
            raws.append(body[off : off + size])
            off += size
    except IndexError as exc:
        raise IndexUnsupported("truncated index") from exc
    if off > len(body):
        raise IndexUnsupported("truncated index")
    return version, keys, raws, off


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
