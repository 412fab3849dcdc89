"""Conversation ids: paths under the conversation root, checked segment by segment.

An id is ``seg/seg/...``; each segment is a slug ``[a-z0-9][a-z0-9._-]*`` without
``..``. Ancestry is segment-wise prefix (``ab`` is not under ``a``). Generated
segments are ULID-like (``c-`` + 10 chars of millisecond time + 16 random chars, in
Crockford base32, lower case) so they sort by creation time and do not collide across
processes; creation still uses an exclusive ``mkdir`` as the last word.
"""

from __future__ import annotations

import os
import re
import threading
import time

from jpfs.errors import IdError

SEGMENT_RE = re.compile(r"[a-z0-9][a-z0-9._-]{0,127}")
RESERVED = frozenset({"events", "inbox", "files"})
MAX_DEPTH = 32
_CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"

_lock = threading.Lock()
_last: tuple[int, int] = (0, 0)


def validate(conv_id: str) -> str:
    """Return the canonical form of ``conv_id`` or raise :class:`IdError` saying why."""
    if not isinstance(conv_id, str) or not conv_id:
        raise IdError("conversation id must not be empty")
    if "\x00" in conv_id:
        raise IdError("conversation id contains a NUL byte")
    if conv_id.startswith("/") or conv_id.startswith("\\"):
        raise IdError(f"conversation id {conv_id!r} is absolute; ids are paths under the root")
    segments = conv_id.strip("/").split("/")
    if len(segments) > MAX_DEPTH:
        raise IdError(f"conversation id {conv_id!r} is deeper than {MAX_DEPTH} levels")
    for seg in segments:
        if seg in ("", ".", ".."):
            raise IdError(f"conversation id {conv_id!r} has an empty, '.' or '..' segment")
        if ".." in seg or not SEGMENT_RE.fullmatch(seg):
            raise IdError(
                f"conversation id {conv_id!r}: segment {seg!r} must match [a-z0-9][a-z0-9._-]*"
                " (lower case, no '..')"
            )
        if seg in RESERVED:
            raise IdError(f"conversation id {conv_id!r}: {seg!r} is a reserved name")
    return "/".join(segments)


def segments(conv_id: str) -> list[str]:
    return conv_id.split("/") if conv_id else []


def parent(conv_id: str) -> str | None:
    head, _, _ = conv_id.rpartition("/")
    return head or None


# Who sends mail that no conversation sent (the CLI, the MCP server, a file saved by hand).
HUMAN = "@human"


def is_caller(sender: str, to: str) -> bool:
    """Whether ``sender`` is ``to``'s caller: its parent conversation, or a human."""
    return sender == HUMAN or sender == parent(to)


def ancestors(conv_id: str) -> list[str]:
    """The ids above ``conv_id``, nearest first (``a/b/c`` -> ``a/b``, ``a``)."""
    parts = segments(conv_id)
    return ["/".join(parts[:n]) for n in range(len(parts) - 1, 0, -1)]


def join(parent_id: str | None, segment: str) -> str:
    return validate(f"{parent_id}/{segment}" if parent_id else segment)


def is_descendant(conv_id: str, ancestor: str, *, strict: bool = True) -> bool:
    """Segment-wise ancestry. ``ancestor == ""`` is the root, above every id."""
    if ancestor == "":
        return bool(conv_id) or not strict
    if conv_id == ancestor:
        return not strict
    return conv_id.startswith(ancestor + "/")


def depth(conv_id: str) -> int:
    return len(segments(conv_id))


def encode(value: int, length: int) -> str:
    """The low ``5 * length`` bits of ``value`` in Crockford base32 (sortable)."""
    return "".join(_CROCKFORD[(value >> (5 * i)) & 31] for i in reversed(range(length)))


def file_key(text: str, length: int = 20) -> str:
    """A flat, fixed-length file name for ``text`` (a conversation id, deep ids
    included, would otherwise exceed NAME_MAX or need escaping)."""
    import hashlib  # here: loading OpenSSL costs every command ~3 ms; few need a key

    return hashlib.sha1(text.encode()).hexdigest()[:length]


def generate(prefix: str = "c") -> str:
    """A fresh, time-sortable segment such as ``c-01jh5w7x2k...``.

    Within one process the random part is incremented when the millisecond repeats,
    so ids made in a tight loop still sort in creation order.
    """
    global _last
    with _lock:
        ms = time.time_ns() // 1_000_000
        last_ms, last_rand = _last
        if ms <= last_ms:
            ms, rand = last_ms, last_rand + 1
        else:
            rand = int.from_bytes(os.urandom(10), "big")
        _last = (ms, rand)
    return f"{prefix}-{encode(ms, 10)}{encode(rand & ((1 << 80) - 1), 16)}"


def is_child_dir(entry: os.DirEntry[str]) -> bool:
    """Whether a directory entry can be a conversation below the one listed: a real
    directory (no link followed) whose name is a well-formed, unreserved segment. The one
    rule for every walk of the tree (listings, prefix resolution)."""
    name = entry.name
    return (
        name not in RESERVED
        and SEGMENT_RE.fullmatch(name) is not None
        and ".." not in name
        and entry.is_dir(follow_symlinks=False)
    )
