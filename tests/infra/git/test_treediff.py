"""``Changes.paths`` walks two trees itself (libgit2's diff reads every subtree): checked
against ``git diff --name-only`` on generated histories, as dulwich checks its codecs
against git."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jpfs.infra.git.treediff import Changes
from tests.conftest import git

NAMES = st.sampled_from(["a", "b", "c", "events", "x.md", "d-1"])
PATHS = st.lists(NAMES, min_size=1, max_size=4).map("/".join)
# One step: write a file (new or changed content), or remove whatever is at a path.
STEP = st.tuples(st.sampled_from(["write", "write", "remove"]), PATHS, st.integers(0, 3))


def apply(repo: Path, op: str, path: str, content: int) -> None:
    target = repo / path
    if op == "remove":
        if target.is_dir():
            git(repo, "rm", "-rqf", "--", path)
        elif target.exists():
            git(repo, "rm", "-qf", "--", path)
        return
    # A file where a directory was (and the other way round) is a type change.
    for parent in reversed(Path(path).parents[:-1]):
        if (repo / parent).is_file():
            git(repo, "rm", "-qf", "--", str(parent))
    if target.is_dir():
        git(repo, "rm", "-rqf", "--", path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(f"{content}\n", encoding="utf-8")
    git(repo, "add", "--", path)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(first=st.lists(STEP, min_size=1, max_size=8), then=st.lists(STEP, min_size=0, max_size=8))
def test_paths_are_what_git_diff_names(tmp_path: Path, first: list, then: list) -> None:  # type: ignore[type-arg]
    repo = tmp_path / f"r{os.urandom(4).hex()}"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "keep").write_text("keep\n", encoding="utf-8")
    git(repo, "add", "keep")
    for step in first:
        apply(repo, *step)
    git(repo, "commit", "-q", "--allow-empty", "-m", "old")
    old = git(repo, "rev-parse", "HEAD").strip()
    for step in then:
        apply(repo, *step)
    git(repo, "commit", "-q", "--allow-empty", "-m", "new")
    new = git(repo, "rev-parse", "HEAD").strip()
    expected = set(git(repo, "diff", "--name-only", "--no-renames", old, new).split())
    changes = Changes(repo)
    assert changes.tip() == new
    assert changes.paths(old, new) == expected
    assert changes.paths(new, old) == expected


def test_an_unknown_commit_or_no_commit_is_none(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q", "-b", "main")
    changes = Changes(tmp_path)
    assert changes.tip() is None
    (tmp_path / "f").write_text("x\n", encoding="utf-8")
    git(tmp_path, "add", "f")
    git(tmp_path, "commit", "-q", "-m", "one")
    tip = changes.tip()
    assert tip is not None
    assert changes.paths("0" * 40, tip) is None
    assert changes.paths(tip, tip) == set()
