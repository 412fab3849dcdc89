"""The committer's pack roll-up: git's geometric choice, without ``git prune-packed``.

A user's ``git add`` writes a loose object into ``objects/xx/`` and fails if that
directory vanishes under it, which ``git repack -d`` (through prune-packed) does to every
empty one. The roll-up must shrink the pack count and leave loose objects, their
directories and kept packs exactly as they were.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import jpfs.infra.committer.core as committer_core
from jpfs.infra.committer import Change, Committer
from jpfs.infra.committer.maintenance import packs_by_size, rolled_up
from tests.conftest import wait_until
from tests.infra.committer.test_committer import _isolated_git, assert_consistent, git, repo, write

__all__ = ["_isolated_git", "repo"]  # fixtures shared with test_committer


@given(st.lists(st.integers(min_value=1, max_value=10**9), max_size=40))
def test_rolled_up_leaves_a_geometric_progression(sizes: list[int]) -> None:
    packs = [(size, f"pack-{n:04d}") for n, size in enumerate(sorted(sizes))]
    chosen = rolled_up(packs)
    assert chosen == [name for _, name in packs[: len(chosen)]]  # always the smallest
    kept = [size for size, _ in packs[len(chosen) :]]
    # What stays is a progression with factor 2, starting at least twice the new pack
    # (when something was rolled up): the count stays logarithmic in the total size.
    assert all(b >= 2 * a for a, b in itertools.pairwise(kept))
    if chosen and kept:
        assert kept[0] >= 2 * sum(size for size, _ in packs[: len(chosen)])


def test_roll_up_keeps_loose_objects_and_their_directories(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(committer_core, "_REPACK_EVERY", 6)
    objects = repo / ".git/objects"
    # The user's loose object, and an empty fan-out directory git's add may be about to
    # write into: prune-packed would delete the object (once packed) and the directory.
    blob = repo.parent / "user-blob.txt"
    blob.write_text("the user's blob\n")
    loose = git(repo, "hash-object", "-w", str(blob)).strip()
    empty = objects / "ee"
    empty.mkdir(exist_ok=True)
    pack_dir = objects / "pack"
    with Committer(repo) as c:
        for n in range(6):
            c.commit(Change((write(repo, f"conversations/r/{n}.md", f"{n}\n" * (n + 1)),), "r"))
        wait_until(
            lambda: len(list(pack_dir.glob("*.pack"))) < 6, timeout=30, message="the roll-up"
        )
        c.close(wait=True)
    assert empty.is_dir()
    assert (objects / loose[:2] / loose[2:]).is_file()
    assert len(packs_by_size(pack_dir)) < 6
    for idx in pack_dir.glob("*.idx"):
        git(repo, "verify-pack", str(idx))
    for n in range(6):
        assert git(repo, "show", f"HEAD:conversations/r/{n}.md") == f"{n}\n" * (n + 1)
    assert_consistent(repo)


def test_roll_up_leaves_kept_packs(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(committer_core, "_REPACK_EVERY", 4)
    pack_dir = repo / ".git/objects/pack"
    with Committer(repo) as c:
        for n in range(2):
            c.commit(Change((write(repo, f"conversations/k/{n}.md", f"{n}\n"),), "k"))
        (_, kept), (_, other) = packs_by_size(pack_dir)
        (pack_dir / f"{kept}.keep").write_text("the user's\n")
        for n in range(2, 4):  # the fourth pack starts the roll-up (still ours, kept)
            c.commit(Change((write(repo, f"conversations/k/{n}.md", f"{n}\n"),), "k"))
        wait_until(
            lambda: not (pack_dir / f"{other}.pack").exists(), timeout=30, message="the roll-up"
        )
        c.close(wait=True)
    assert {f"{kept}.pack", f"{kept}.idx", f"{kept}.keep"} <= {p.name for p in pack_dir.iterdir()}
    assert len(list(pack_dir.glob("*.pack"))) == 3  # the user's, the roll-up, the fourth
    assert_consistent(repo)
