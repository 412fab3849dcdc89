"""jpfs.infra.git.refs against real git: a handle kept for HANDLE_TTL still answers what
git itself answers after other processes moved refs, packed them, fetched objects into a
new pack or repacked everything."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jpfs.infra.git import refs


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True)
    return done.stdout.strip()


def rev(repo: Path, ref: str) -> str | None:
    done = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    return done.stdout.strip() or None


@pytest.fixture()
def pair(tmp_path: Path) -> tuple[Path, Path]:
    """A repository with one commit, and another to fetch new objects from."""
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    for repo in (ours, theirs):
        git(tmp_path, "init", "-q", "-b", "main", str(repo))
        git(repo, "commit", "-q", "--allow-empty", "-m", f"first of {repo.name}")
    return ours, theirs


@pytest.fixture()
def kept_long(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every question in a test asked of one kept handle, however slow the machine."""
    monkeypatch.setattr(refs, "HANDLE_TTL", 3600.0)


def test_a_thread_keeps_its_handle_within_the_ttl_until_it_forgets_them(
    pair: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    ours, _ = pair
    monkeypatch.setattr(refs, "HANDLE_TTL", 3600.0)
    first = refs.repository(ours)
    assert refs.repository(ours) is first
    refs.forget()  # a thread going idle drops them
    second = refs.repository(ours)
    assert second is not first and refs.repository(ours) is second
    monkeypatch.setattr(refs, "HANDLE_TTL", 0.0)
    assert refs.repository(ours) is not second


def test_threads_do_not_share_handles(pair: tuple[Path, Path], kept_long: None) -> None:
    ours, _ = pair
    mine = refs.repository(ours)
    theirs: list[object] = []
    worker = threading.Thread(target=lambda: theirs.append(refs.repository(ours)))
    worker.start()
    worker.join(timeout=30)
    assert not worker.is_alive()
    assert theirs and theirs[0] is not mine
    assert refs.fresh(ours) is not mine  # for objects that keep one


def test_a_kept_handle_sees_what_git_wrote_since(pair: tuple[Path, Path], kept_long: None) -> None:
    ours, theirs = pair
    kept = refs.repository(ours)
    first = rev(ours, "main")
    git(ours, "commit", "-q", "--allow-empty", "-m", "second")
    second = rev(ours, "main")
    assert refs.resolve(ours, "refs/heads/main") == second != first
    git(ours, "update-ref", "refs/heads/side", str(first))
    git(ours, "pack-refs", "--all")
    assert refs.resolve(ours, "refs/heads/side") == first
    git(ours, "update-ref", "refs/heads/side", str(second))  # loose again, over the packed one
    assert refs.resolve(ours, "refs/heads/side") == second
    git(ours, "update-ref", "-d", "refs/heads/side")
    assert refs.resolve(ours, "refs/heads/side") is None
    git(ours, "fetch", "-q", str(theirs), "main:refs/heads/fetched")
    fetched = str(rev(ours, "refs/heads/fetched"))
    assert refs.resolve(ours, "refs/heads/fetched") == fetched
    assert refs.messages_under(ours, "refs/heads/fetched")["refs/heads/fetched"][1].startswith(
        "first of theirs"
    )
    git(ours, "gc", "-q", "--prune=now")  # every object moved into one new pack
    assert refs.is_ancestor(ours, str(first), str(second))
    assert refs.ahead_behind(ours, "refs/heads/main", "refs/heads/fetched") == (2, 1)
    assert refs.repository(ours) is kept


OPERATIONS = st.lists(
    st.sampled_from(["commit", "branch", "move", "delete", "pack-refs", "fetch", "gc"]),
    min_size=1,
    max_size=8,
)


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=OPERATIONS)
def test_generated_histories_read_the_same_through_a_kept_handle_as_through_git(
    tmp_path_factory: pytest.TempPathFactory, steps: list[str]
) -> None:
    root = tmp_path_factory.mktemp("refs")
    ours, theirs = root / "ours", root / "theirs"
    for repo in (ours, theirs):
        git(root, "init", "-q", "-b", "main", str(repo))
        git(repo, "commit", "-q", "--allow-empty", "-m", "first")
    previous = refs.HANDLE_TTL
    refs.HANDLE_TTL = 3600.0
    try:
        kept = refs.repository(ours)
        for number, step in enumerate(steps):
            if step == "commit":
                git(ours, "commit", "-q", "--allow-empty", "-m", f"step {number}")
            elif step == "branch":
                git(ours, "branch", "-f", f"b{number % 3}", "main")
            elif step == "move":
                git(ours, "update-ref", "refs/heads/b0", "main~0")
            elif step == "delete":
                git(ours, "update-ref", "-d", "refs/heads/b0")
            elif step == "pack-refs":
                git(ours, "pack-refs", "--all")
            elif step == "fetch":
                git(theirs, "commit", "-q", "--allow-empty", "-m", f"theirs {number}")
                git(ours, "fetch", "-q", str(theirs), "main:refs/heads/b1", "--force")
            else:
                git(ours, "gc", "-q", "--prune=now")
            for name in ("main", "b0", "b1", "b2"):
                assert refs.resolve(ours, f"refs/heads/{name}") == rev(ours, name), (steps, name)
        assert refs.repository(ours) is kept
    finally:
        refs.HANDLE_TTL = previous
