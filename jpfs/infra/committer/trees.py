"""git trees: looking files up in them, and writing a tree with changes applied.

The new tree of a commit is the tip's tree with only the trees along changed paths
rewritten: whatever others committed meanwhile is kept. Trees are immutable, so each
one read or written is cached by id as its entries in git's order, each entry's bytes
as they are in the object: a lookup is a bisect, and a tree with a few changes is the
old entry list with those entries spliced in and the bytes joined, never re-sorted nor
re-serialised. A conversation's ``events`` tree holds one entry per event and the
record's root one per conversation, so this keeps a commit's Python work O(changes)
(only the copying and hashing of the rewritten trees' bytes stay O(entries), in C).
"""

from __future__ import annotations

import bisect
import os
import re

import pygit2

from jpfs.errors import RepositoryFault
from jpfs.infra.committer.objects import MODE_TREE, TREE, Objects
from jpfs.infra.committer.worktree import Blob

_TREE_CACHE_MAX = 512  # trees
# Their entries in all: each commit makes a new version of the root tree (one entry per
# conversation), and 512 versions of a 10,000-entry root held 80 MB of entry lists.
_TREE_CACHE_ENTRIES = 100_000
# One tree entry: "<octal mode> <name>\0<20-byte id>".
_ENTRY = re.compile(rb"(([0-7]+) ([^\0]*)\0.{20})", re.DOTALL)
_TREE_MODES = (b"40000", b"040000")


class _Tree:
    """One tree's entries: ``keys`` in git's order (a directory's name as if it ended in
    "/"), ``raws`` the entries' bytes, parallel to ``keys``."""

    __slots__ = ("keys", "raws")

    def __init__(self, keys: list[bytes], raws: list[bytes]) -> None:
        self.keys = keys
        self.raws = raws

    @classmethod
    def parse(cls, data: bytes) -> _Tree:
        found = _ENTRY.findall(data)
        if sum(len(raw) for raw, _, _ in found) != len(data):
            raise ValueError("malformed tree object")
        keys = [name + b"/" if mode in _TREE_MODES else name for _, mode, name in found]
        raws = [raw for raw, _, _ in found]
        if any(keys[i] >= keys[i + 1] for i in range(len(keys) - 1)):
            # Not in git's order (fsck's treeNotSorted): put it right as we rewrite it.
            pairs = sorted(zip(keys, raws, strict=True))
            keys, raws = [k for k, _ in pairs], [r for _, r in pairs]
        return cls(keys, raws)

    def find(self, name: bytes) -> int:
        """The index of entry ``name`` (file or directory), or -1."""
        keys = self.keys
        for key in (name, name + b"/"):
            at = bisect.bisect_left(keys, key)
            if at < len(keys) and keys[at] == key:
                return at
        return -1

    def get(self, name: bytes) -> tuple[int, bytes] | None:
        at = self.find(name)
        if at < 0:
            return None
        raw = self.raws[at]
        return int(raw[: raw.index(b" ")], 8), raw[-20:]


class TreeCache:
    """Trees by id, read once; the trees this process writes go in as they are built.

    The least recently used go first, once there are more than :data:`_TREE_CACHE_MAX`
    or they hold more than :data:`_TREE_CACHE_ENTRIES` entries: a superseded version of
    the root is never used again, the tip's root at every commit."""

    def __init__(self) -> None:
        self._trees: dict[bytes, _Tree] = {}  # least recently used first
        self.entries = 0

    def get(self, repo: pygit2.Repository, oid: bytes) -> _Tree:
        tree = self._trees.pop(oid, None)
        if tree is not None:
            self._trees[oid] = tree
        else:
            try:
                kind, data = repo.odb.read(pygit2.Oid(raw=oid))
            except (KeyError, ValueError, pygit2.GitError) as exc:
                raise RepositoryFault(
                    f"tree {oid.hex()} cannot be read ({exc}): run `git fsck`"
                ) from exc
            if kind != pygit2.enums.ObjectType.TREE:
                raise RepositoryFault(f"object {oid.hex()} is not a tree: run `git fsck`")
            try:
                tree = _Tree.parse(data)
            except ValueError as exc:
                raise RepositoryFault(f"tree {oid.hex()} is corrupt: run `git fsck`") from exc
            self.remember(oid, tree)
        return tree

    def remember(self, oid: bytes, tree: _Tree) -> None:
        """Cache ``tree`` (no longer changed) as ``oid``."""
        old = self._trees.pop(oid, None)
        if old is not None:
            self.entries -= len(old.keys)
        self._trees[oid] = tree
        self.entries += len(tree.keys)
        while len(self._trees) > 1 and (
            len(self._trees) > _TREE_CACHE_MAX or self.entries > _TREE_CACHE_ENTRIES
        ):
            self.entries -= len(self._trees.pop(next(iter(self._trees))).keys)

    def __len__(self) -> int:
        return len(self._trees)

    def view(self, repo: pygit2.Repository, root: bytes | None) -> TreeView:
        return TreeView(self, repo, root)

    def build(
        self,
        repo: pygit2.Repository,
        base: bytes | None,
        changes: dict[str, Blob | None],
        objects: Objects,
    ) -> bytes | None:
        """Write ``base`` with ``changes``; only trees along changed paths are new."""
        old = self.get(repo, base) if base is not None else _Tree([], [])
        tree = _Tree(list(old.keys), list(old.raws))
        nested: dict[bytes, dict[str, Blob | None]] = {}
        files: set[bytes] = set()
        for path, blob in changes.items():
            head, sep, rest = path.partition("/")
            name = os.fsencode(head)
            if sep:
                nested.setdefault(name, {})[rest] = blob
            else:
                _put(tree, name, None if blob is None else (blob.mode, blob.oid.raw))
                if blob is not None:
                    files.add(name)
        for name, sub in nested.items():
            current = old.get(name)
            child = current[1] if current is not None and current[0] == MODE_TREE else None
            if child is None and all(blob is None for blob in sub.values()):
                continue  # deleting under a directory that does not exist
            oid = self.build(repo, child, sub, objects)
            if oid is None and name in files:
                continue  # emptied because a file took its place: keep the file
            _put(tree, name, None if oid is None else (MODE_TREE, oid))
        if not tree.keys:
            return None
        oid = objects.add(TREE, b"".join(tree.raws))
        if oid == base:
            objects.discard(oid)  # unchanged: it exists already
        else:
            self.remember(oid, tree)
        return oid


def _put(tree: _Tree, name: bytes, entry: tuple[int, bytes] | None) -> None:
    """Set (or with None, remove) entry ``name`` of ``tree``, keeping git's order."""
    at = tree.find(name)
    if at >= 0:
        del tree.keys[at]
        del tree.raws[at]
    if entry is None:
        return
    mode, oid = entry
    key = name + b"/" if mode == MODE_TREE else name
    at = bisect.bisect_left(tree.keys, key)
    tree.keys.insert(at, key)
    tree.raws.insert(at, b"%o %s\0%s" % (mode, name, oid))


class TreeView:
    """File lookups in one tree (``root``, None for no tree), through the cache."""

    def __init__(self, cache: TreeCache, repo: pygit2.Repository, root: bytes | None) -> None:
        self._cache = cache
        self._repo = repo
        self.root = root
        self._dirs: dict[str, _Tree | None] = {}  # a batch looks in the same few

    def _dir(self, parent: str) -> _Tree | None:
        if parent in self._dirs:
            return self._dirs[parent]
        tree: _Tree | None = None
        if not parent:
            if self.root is not None:
                tree = self._cache.get(self._repo, self.root)
        else:
            up, _, name = parent.rpartition("/")
            above = self._dir(up)
            found = above.get(os.fsencode(name)) if above is not None else None
            if found is not None and found[0] == MODE_TREE:
                tree = self._cache.get(self._repo, found[1])
        self._dirs[parent] = tree
        return tree

    def lookup(self, path: str) -> tuple[int, bytes] | None:
        """(mode, id) of ``path``, a file or a directory, or None."""
        if not path:
            return None if self.root is None else (MODE_TREE, self.root)
        parent, _, name = path.rpartition("/")
        tree = self._dir(parent)
        return None if tree is None else tree.get(os.fsencode(name))

    def contains(self, path: str) -> bool:
        """Whether ``path`` is in the tree, as a file or a directory."""
        return self.lookup(path) is not None

    def get(self, path: str) -> tuple[int, bytes] | None:
        """(mode, id) of file ``path``, or None (absent, or a directory)."""
        found = self.lookup(path)
        return None if found is None or found[0] == MODE_TREE else found

    def files(self, path: str) -> list[str]:
        """Every file path tracked under directory ``path`` (``""``: the whole tree)."""
        top = self.lookup(path)
        if top is None or top[0] != MODE_TREE:
            return []
        found: list[str] = []
        stack: list[tuple[str, bytes]] = [(path, top[1])]
        while stack:
            prefix, oid = stack.pop()
            tree = self._cache.get(self._repo, oid)
            for key, raw in zip(tree.keys, tree.raws, strict=True):
                tree_entry = key.endswith(b"/")
                name = os.fsdecode(key[:-1] if tree_entry else key)
                child = f"{prefix}/{name}" if prefix else name
                if tree_entry:
                    stack.append((child, raw[-20:]))
                else:
                    found.append(child)
        return found


def same(current: tuple[int, bytes] | Blob | None, blob: Blob | None) -> bool:
    if blob is None or current is None:
        return blob is None and current is None
    if isinstance(current, Blob):
        return current.oid == blob.oid and current.mode == blob.mode
    return current[1] == blob.oid.raw and current[0] == blob.mode
