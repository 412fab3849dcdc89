from __future__ import annotations

import multiprocessing

import pytest

from jpfs.core import ids
from jpfs.errors import IdError


@pytest.mark.parametrize("good", ["a", "refactor", "a/b/c", "c-01jh", "x.y_z-1", "a/b/"])
def test_valid_ids(good: str) -> None:
    assert ids.validate(good) == good.strip("/")


@pytest.mark.parametrize(
    "bad",
    ["", "..", "a/../b", "/abs", "A", "a//b", "-x", ".hidden", "a/events", "inbox", "files/x",
     "a b", "a\x00b", "a..b", "ä", "a\\b"],
)  # fmt: skip
def test_invalid_ids(bad: str) -> None:
    with pytest.raises(IdError):
        ids.validate(bad)


def test_ancestry_is_segment_wise() -> None:
    assert ids.is_descendant("a/b", "a")
    assert not ids.is_descendant("ab", "a")
    assert not ids.is_descendant("a", "a")
    assert ids.is_descendant("a", "a", strict=False)
    assert ids.is_descendant("a/b/c", "a/b")
    assert ids.is_descendant("x", "")
    assert ids.parent("a/b/c") == "a/b"
    assert ids.parent("a") is None


def test_generated_ids_sort_by_creation_and_are_valid() -> None:
    made = [ids.generate() for _ in range(2000)]
    assert made == sorted(made)
    assert len(set(made)) == len(made)
    for m in made[:10]:
        assert ids.validate(m) == m and m.startswith("c-")


def _gen(n: int) -> list[str]:
    return [ids.generate() for _ in range(n)]


def test_generated_ids_do_not_collide_across_processes() -> None:
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        batches = pool.map(_gen, [3000] * 4)
    flat = [i for b in batches for i in b]
    assert len(set(flat)) == len(flat)
