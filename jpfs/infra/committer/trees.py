"""git trees: looking files up in them, and writing a tree with changes applied.

The new tree of a commit is the tip's tree with only the trees along changed paths
rewritten (serialised here, with the few trees along jpfs's paths cached): whatever
others committed meanwhile is kept.
"""

from __future__ import annotations

import os

import pygit2

from jpfs.infra.committer.objects import MODE_TREE, TREE, Objects
from jpfs.infra.committer.worktree import Blob

_TREE_CACHE_MAX = 512


class TreeBuilder:
    """Writes trees with changes applied, caching the entries of the trees it reads."""

    def __init__(self) -> None:
        self._cache: dict[bytes, dict[bytes, tuple[int, bytes]]] = {}

    def build(
        self,
        repo: pygit2.Repository,
        base: bytes | None,
        changes: dict[str, Blob | None],
        objects: Objects,
    ) -> bytes | None:
        """Serialise ``base`` with ``changes``; only trees along changed paths are new."""
        entries = dict(self._entries(repo, base, objects)) if base is not None else {}
        nested: dict[bytes, dict[str, Blob | None]] = {}
        for path, blob in changes.items():
            head, sep, rest = path.partition("/")
            name = os.fsencode(head)
            if sep:
                nested.setdefault(name, {})[rest] = blob
            elif blob is None:
                entries.pop(name, None)
            else:
                entries[name] = (blob.mode, blob.oid.raw)
        for name, sub in nested.items():
            current = entries.get(name)
            child = current[1] if current is not None and current[0] == MODE_TREE else None
            if child is None and all(blob is None for blob in sub.values()):
                continue  # deleting under a directory that does not exist
            oid = self.build(repo, child, sub, objects)
            if oid is None:
                entries.pop(name, None)
            else:
                entries[name] = (MODE_TREE, oid)
        if not entries:
            return None
        # git orders tree entries by name, a directory's name as if it ended in "/".
        ordered = sorted(
            entries.items(), key=lambda e: e[0] + b"/" if e[1][0] == MODE_TREE else e[0]
        )
        data = b"".join(b"%o %s\0%s" % (mode, name, oid) for name, (mode, oid) in ordered)
        oid = objects.add(TREE, data)
        if oid == base:
            objects.discard(oid)  # unchanged: it exists already
        else:
            objects.trees[oid] = entries
            self._remember(oid, entries)
        return oid

    def _entries(
        self, repo: pygit2.Repository, oid: bytes, objects: Objects
    ) -> dict[bytes, tuple[int, bytes]]:
        entries = objects.trees.get(oid) or self._cache.get(oid)
        if entries is None:
            tree = repo[pygit2.Oid(raw=oid)].peel(pygit2.Tree)
            entries = {e.raw_name: (e.filemode, e.id.raw) for e in tree if e.raw_name}
            self._remember(oid, entries)
        return entries

    def _remember(self, oid: bytes, entries: dict[bytes, tuple[int, bytes]]) -> None:
        # Trees are immutable: the few along jpfs's paths are needed at every commit.
        self._cache[oid] = entries
        if len(self._cache) > _TREE_CACHE_MAX:
            del self._cache[next(iter(self._cache))]


class TreeView:
    """File lookups in one tree, listing each directory once.

    pygit2's ``tree[path]`` walks and loads every level on each call (~20 µs).
    """

    def __init__(self, tree: pygit2.Tree | None) -> None:
        self._tree = tree
        self._dirs: dict[str, dict[str, tuple[pygit2.Oid, int]]] = {}

    def contains(self, path: str) -> bool:
        """Whether ``path`` is in the tree, as a file or a directory."""
        parent, _, name = path.rpartition("/")
        listing = self._dirs.get(parent)
        if listing is None:
            listing = self._dirs[parent] = self._list(parent)
        return name in listing

    def get(self, path: str) -> tuple[pygit2.Oid, int] | None:
        parent, _, name = path.rpartition("/")
        listing = self._dirs.get(parent)
        if listing is None:
            listing = self._dirs[parent] = self._list(parent)
        found = listing.get(name)
        return None if found is None or found[1] == MODE_TREE else found

    def _list(self, parent: str) -> dict[str, tuple[pygit2.Oid, int]]:
        tree = self._tree
        if tree is None:
            return {}
        if parent:
            try:
                obj = tree[parent]
            except KeyError:
                return {}
            if obj.filemode != MODE_TREE:
                return {}
            tree = obj.peel(pygit2.Tree)
        return {entry.name: (entry.id, entry.filemode) for entry in tree if entry.name}


def same(current: tuple[pygit2.Oid, int] | Blob | None, blob: Blob | None) -> bool:
    if blob is None or current is None:
        return blob is None and current is None
    if isinstance(current, Blob):
        return current.oid == blob.oid and current.mode == blob.mode
    return current[0] == blob.oid and current[1] == blob.mode


def tree_files(tree: pygit2.Tree | None, path: str) -> list[str]:
    """Every file path tracked under directory ``path`` (``""``: the whole ``tree``)."""
    if tree is None:
        return []
    if path:
        try:
            obj = tree[path]
        except KeyError:
            return []
        if obj.filemode != MODE_TREE:
            return []
        tree = obj.peel(pygit2.Tree)
    found: list[str] = []
    stack: list[tuple[str, pygit2.Tree]] = [(path, tree)]
    while stack:
        prefix, sub = stack.pop()
        for entry in sub:
            name = entry.name or ""
            child = f"{prefix}/{name}" if prefix else name
            if entry.filemode == MODE_TREE:
                stack.append((child, entry.peel(pygit2.Tree)))
            else:
                found.append(child)
    return found
