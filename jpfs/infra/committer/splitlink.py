"""The link extension of a split index: which base it names, and its two EWAH bitmaps
over the base's positions (entries deleted, entries replaced), as git writes them; see
``Documentation/technical/index-format.txt``. The split index that reads and writes it
is :mod:`jpfs.infra.committer.splitindex`.
"""

from __future__ import annotations

import array
import struct
from dataclasses import dataclass


class SplitCorrupt(ValueError):
    """A link extension, bitmap or shared index that does not describe a valid index."""


# -- EWAH bitmaps (git's ewah/ewah_io.c) -----------------------------------------------


def ewah_decode(data: bytes, off: int) -> tuple[list[int], int]:
    """The set bit positions of the EWAH bitmap at ``data[off:]``, and the offset after it.

    A word of the buffer is a marker (bit 0: the running bit; bits 1-32: how many words
    of it follow; bits 33-63: how many literal words come after those) or a literal.
    """
    try:
        _bits, words = struct.unpack_from(">II", data, off)
        buffer = struct.unpack_from(f">{words}Q", data, off + 8)
        end = off + 8 + 8 * words + 4
        if end > len(data):
            raise SplitCorrupt("truncated EWAH bitmap")
    except struct.error as exc:
        raise SplitCorrupt("truncated EWAH bitmap") from exc
    positions: list[int] = []
    pos = 0
    at = 0
    while at < words:
        marker = buffer[at]
        run = (marker >> 1) & 0xFFFFFFFF
        literals = marker >> 33
        if marker & 1:
            positions.extend(range(pos, pos + 64 * run))
        pos += 64 * run
        at += 1
        if at + literals > words:
            raise SplitCorrupt("EWAH bitmap overruns its buffer")
        for word in buffer[at : at + literals]:
            while word:
                low = word & -word
                positions.append(pos + low.bit_length() - 1)
                word ^= low
            pos += 64
        at += literals
    return positions, end


def ewah_encode(bitmap: bytearray, nbits: int) -> bytes:
    """``bitmap`` (bit i in byte i // 8, least significant first) as an EWAH bitmap.

    One marker, then every word as a literal: a few KB for a 100k-entry base, written
    without a loop in Python (git reads any valid encoding)."""
    words = array.array("Q", bytes(bitmap))
    words.byteswap()  # on disk each 64-bit word is big-endian
    count = len(words)
    marker = struct.pack(">Q", count << 33)
    return struct.pack(">II", nbits, count + 1) + marker + words.tobytes() + struct.pack(">I", 0)


# -- the link extension ----------------------------------------------------------------


@dataclass
class Link:
    base: bytes  # the shared index's checksum
    deleted: list[int]
    replaced: list[int]


def parse_link(payload: bytes) -> Link:
    if len(payload) < 20:
        raise SplitCorrupt("link extension too short")
    if len(payload) == 20:
        return Link(payload, [], [])
    deleted, off = ewah_decode(payload, 20)
    replaced, off = ewah_decode(payload, off)
    if off != len(payload):
        raise SplitCorrupt("garbage after the link extension's bitmaps")
    return Link(payload[:20], deleted, replaced)
