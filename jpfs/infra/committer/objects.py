"""git objects as bytes: types and modes, commit serialisation, and writing them.

Creating a file is the most expensive thing a commit does on a busy disk (0.1-1 ms
each), and a group commit of 30 changes makes ~60 objects. A commit's objects therefore
go into one packfile (pack and index, version 2) written by :func:`write_pack`, kept
(a ``.keep`` file) until a ref reaches them, so that a ``git gc --prune=now`` the user
runs meanwhile cannot drop them. :func:`write_loose` (as git does: zlib level 1, a
temporary file renamed into place) is the plain reference the tests compare with.
Both are written here rather than through libgit2, whose ``odb.write`` keeps Python's
global lock for the whole file creation: with 50 writer threads that stalled every
other thread for each object.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from pathlib import Path

import pygit2

from jpfs.infra.committer.fileio import write_new

MODE_BLOB = 0o100644
MODE_EXEC = 0o100755
MODE_LINK = 0o120000
MODE_TREE = 0o040000
COMMIT, TREE, BLOB = 1, 2, 3  # packfile object types
_TYPE_NAMES = {COMMIT: b"commit", TREE: b"tree", BLOB: b"blob"}
# The content of the .keep file that guards a pack no ref reaches yet (write_pack).
KEEP_MARK = b"jpfs: objects of a commit not referenced yet\n"


class Objects:
    """The objects one plan creates, in order, each once."""

    def __init__(self) -> None:
        self.items: list[tuple[int, bytes, bytes]] = []  # (type, data, oid)
        self._seen: set[bytes] = set()

    def add(self, kind: int, data: bytes, oid: bytes | None = None) -> bytes:
        if oid is None:
            oid = hashlib.sha1(b"%s %d\0%s" % (_TYPE_NAMES[kind], len(data), data)).digest()
        if oid not in self._seen:
            self._seen.add(oid)
            self.items.append((kind, data, oid))
        return oid

    def discard(self, oid: bytes) -> None:
        if oid in self._seen:
            self._seen.discard(oid)
            self.items = [item for item in self.items if item[2] != oid]


def write_pack(
    pack_dir: Path,
    objects: list[tuple[int, bytes, bytes]],
    fsync: bool,
    *,
    keep: bool = False,
    tmp_dir: Path | None = None,
) -> Path | None:
    """Write ``objects`` as one packfile (version 2) with its index (version 2).

    With ``keep``, a ``.keep`` file is made first and its path returned: until the
    caller removes it (once a ref reaches the objects), no ``git gc``, ``repack -a -d``
    or ``prune --expire=now`` drops them. Loose objects have no such protection, which
    is why a commit's objects are always packed. The files are prepared in ``tmp_dir``
    (same file system; default ``pack_dir``): `git prune` deletes ``tmp_*`` files in
    ``objects/pack`` under a writer's feet."""
    parts = [b"PACK" + struct.pack(">II", 2, len(objects))]
    offset = 12
    table: list[tuple[bytes, int, int]] = []
    for kind, data, oid in objects:
        size = len(data)
        head = bytearray()
        byte = (kind << 4) | (size & 0x0F)
        size >>= 4
        while size:
            head.append(byte | 0x80)
            byte = size & 0x7F
            size >>= 7
        head.append(byte)
        packed = bytes(head) + zlib.compress(data, 1)
        table.append((oid, zlib.crc32(packed), offset))
        parts.append(packed)
        offset += len(packed)
    if offset >= 1 << 31:
        raise ValueError("packfile too large for 32-bit offsets")
    digest = hashlib.sha1()
    for part in parts:
        digest.update(part)
    checksum = digest.digest()
    parts.append(checksum)
    table.sort()
    fanout = [0] * 256
    for oid, _, _ in table:
        fanout[oid[0]] += 1
    for i in range(1, 256):
        fanout[i] += fanout[i - 1]
    index = b"".join(
        [
            b"\xfftOc" + struct.pack(">I", 2) + struct.pack(">256I", *fanout),
            *(oid for oid, _, _ in table),
            *(struct.pack(">I", crc) for _, crc, _ in table),
            *(struct.pack(">I", at) for _, _, at in table),
            checksum,
        ]
    )
    name = f"pack-{checksum.hex()}"
    kept = None
    if keep:
        # Before the pack is visible: repack decides what it may delete by the .keep
        # files it sees when it starts.
        kept = pack_dir / f"{name}.keep"
        kept.write_bytes(KEEP_MARK)
    tmp = tmp_dir or pack_dir
    try:
        # The pack first, its index last: readers find packs by their index.
        write_new(pack_dir / f"{name}.pack", parts, tmp / "tmp_pack_jpfs_", fsync)
        index_parts = [index, hashlib.sha1(index).digest()]
        write_new(pack_dir / f"{name}.idx", index_parts, tmp / "tmp_idx_jpfs_", fsync)
    except BaseException:
        if kept is not None:
            kept.unlink(missing_ok=True)
        raise
    return kept


def write_loose(objects_dir: Path, kind: int, data: bytes, oid: bytes, fsync: bool) -> None:
    """Write one loose object ``objects/xx/yyyy...`` (``oid`` is its id)."""
    hexid = oid.hex()
    fan = objects_dir / hexid[:2]
    body = zlib.compress(b"%s %d\0%s" % (_TYPE_NAMES[kind], len(data), data), 1)
    # The temporary file sits in objects/ itself, where the debris sweep looks.
    write_new(fan / hexid[2:], [body], objects_dir / "tmp_obj_jpfs_", fsync, make_parent=True)


def commit_object(
    tree: bytes,
    parents: list[str],
    author: pygit2.Signature,
    committer: pygit2.Signature,
    message: str,
) -> bytes:
    """A commit object's content, as git writes it (UTF-8, no encoding header)."""
    lines = [f"tree {tree.hex()}", *(f"parent {p}" for p in parents)]
    lines += [f"author {ident(author)}", f"committer {ident(committer)}"]
    return ("\n".join(lines) + "\n\n" + message).encode()


def ident(sig: pygit2.Signature) -> str:
    """``Name <email> seconds +hhmm``, git's identity line."""
    offset = sig.offset
    zone = f"{'-' if offset < 0 else '+'}{abs(offset) // 60:02d}{abs(offset) % 60:02d}"
    return f"{sig.name} <{sig.email}> {sig.time} {zone}"
