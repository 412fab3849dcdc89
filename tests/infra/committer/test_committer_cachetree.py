"""The cache-tree extension kept as bytes until a changed path goes through it: what
jpfs writes back is git's own bytes where nothing changed, and git's invalidation where
something did; a malformed extension is refused (the index drops it, as it may)."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest

from jpfs.infra.committer.cachetree import CacheTree
from tests.infra.committer.test_committer import git, init_repo, write


def tree_payload(repo: Path) -> bytes:
    data = (repo / ".git/index").read_bytes()
    at = data.index(b"TREE", 12)  # the first extension after the entries here
    (length,) = struct.unpack_from(">I", data, at + 4)
    return data[at + 8 : at + 8 + length]


def nodes(payload: bytes) -> dict[str, int]:
    """Each directory's entry count (-1: invalid), by path, from a serialisation."""
    found: dict[str, int] = {}
    stack: list[tuple[str, int]] = []
    pos = 0
    while pos < len(payload):
        m = re.compile(rb"([^\0]*)\0(-?\d+) (\d+)\n").match(payload, pos)
        assert m is not None
        name, count, subtrees = m.group(1).decode(), int(m.group(2)), int(m.group(3))
        pos = m.end() + (20 if count >= 0 else 0)
        path = "/".join([*(p for p, _ in stack[1:]), name]) if stack else ""
        found[path] = count
        if stack:
            parent, left = stack[-1]
            stack[-1] = (parent, left - 1)
        stack.append((name, subtrees))
        while stack and stack[-1][1] == 0:
            stack.pop()
    return found


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = init_repo(tmp_path / "repo")
    for n in range(24):
        write(path, f"d{n % 3}/s{n % 4}/f{n}.txt", f"{n}\n")
    write(path, "top.txt", "top\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "seed")  # git leaves a fully valid cache-tree
    return path


def test_untouched_subtrees_are_git_s_bytes(repo: Path) -> None:
    payload = tree_payload(repo)
    assert CacheTree.parse(payload).serialize() == payload
    tree = CacheTree.parse(payload)
    tree.invalidate(b"d1/s2/f5.txt")
    before, after = nodes(payload), nodes(tree.serialize())
    invalid = {"", "d1", "d1/s2"}
    assert {p for p, c in after.items() if c < 0} == invalid
    assert {p: c for p, c in after.items() if p not in invalid} == {
        p: c for p, c in before.items() if p not in invalid
    }
    assert tree.serialize().count(b"\0") == payload.count(b"\0")  # no subtree lost


def test_a_changed_path_that_is_a_directory_drops_its_subtree(repo: Path) -> None:
    tree = CacheTree.parse(tree_payload(repo))
    tree.invalidate(b"d2/s0")  # a file now where the directory was
    after = nodes(tree.serialize())
    assert after[""] == -1 and after["d2"] == -1
    assert not any(p == "d2/s0" or p.startswith("d2/s0/") for p in after)
    tree.invalidate(b"nowhere/else.txt")  # no such subtree: the root alone
    assert nodes(tree.serialize())["d1"] >= 0


@pytest.mark.parametrize(
    "cut",
    [
        lambda p: p[:-5],  # truncated inside an object id
        lambda p: p + b"x",  # trailing bytes
        lambda p: p.replace(b" 3\n", b" -3\n", 1),  # a negative subtree count
        lambda p: p.replace(b"\0", b"", 1),  # no name terminator
        lambda p: b"",
    ],
)
def test_a_malformed_cache_tree_is_refused(repo: Path, cut: object) -> None:
    payload = tree_payload(repo)
    assert callable(cut)
    broken = cut(payload)
    assert broken != payload
    with pytest.raises(ValueError):
        CacheTree.parse(broken)
