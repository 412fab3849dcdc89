"""The index's cache-tree extension (``TREE``): tree ids of index directories, kept
valid along unchanged paths so ``git commit`` and ``git status`` need not rehash them.

Parsed once per index read, invalidated along each changed path exactly as git's
``cache_tree_invalidate_path`` does, and re-serialised with each node's bytes cached:
re-emitting it after a few changes copies bytes instead of rebuilding the whole tree.
"""

from __future__ import annotations


class CacheTree:
    """One node of the ``TREE`` extension, caching its own serialization."""

    __slots__ = ("cached", "children", "count", "name", "oid")

    def __init__(self, name: bytes, count: int, oid: bytes | None) -> None:
        self.name = name
        self.count = count
        self.oid = oid
        self.children: list[CacheTree] = []
        self.cached: bytes | None = None

    @classmethod
    def parse(cls, data: bytes) -> CacheTree:
        pos = 0

        def node() -> CacheTree:
            nonlocal pos
            nul = data.index(b"\0", pos)
            space = data.index(b" ", nul)
            newline = data.index(b"\n", space)
            count = int(data[nul + 1 : space])
            subtrees = int(data[space + 1 : newline])
            name = data[pos:nul]
            pos = newline + 1
            oid = None
            if count >= 0:
                oid = data[pos : pos + 20]
                pos += 20
            result = cls(name, count, oid)
            result.children = [node() for _ in range(subtrees)]
            return result

        root = node()
        if pos != len(data):
            raise ValueError("trailing bytes in cache-tree")
        return root

    def invalidate(self, path: bytes) -> None:
        # git's do_invalidate_path: mark every tree along the path, drop a subtree that
        # is itself the changed path.
        node = self
        while True:
            node.count, node.oid, node.cached = -1, None, None
            head, sep, rest = path.partition(b"/")
            if not sep:
                node.children = [c for c in node.children if c.name != head]
                return
            for child in node.children:
                if child.name == head:
                    node, path = child, rest
                    break
            else:
                return

    def serialize(self) -> bytes:
        if self.cached is None:
            parts = [b"%s\0%d %d\n" % (self.name, self.count, len(self.children))]
            if self.oid is not None:
                parts.append(self.oid)
            parts.extend(child.serialize() for child in self.children)
            self.cached = b"".join(parts)
        return self.cached
