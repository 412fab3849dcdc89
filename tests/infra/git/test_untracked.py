"""The untracked-file scan (:mod:`jpfs.infra.git.untracked`) against git's own answer.

Every test compares with ``git ls-files --others --exclude-standard`` run on the same
real repository, after the changes a user or the committer makes: the cache may only
ever save work, never change the answer.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from jpfs.infra import fsclock, indexepoch
from jpfs.infra.committer import Change, Committer
from jpfs.infra.git import untracked
from tests.conftest import wait_until
from tests.infra.committer.test_committer import git, init_repo


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = init_repo(tmp_path / "repo")
    for rel in ("a/events/0001-user.md", "a/b/task.md", "c/task.md", "README"):
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_text(f"{rel}\n")
    (path / ".gitignore").write_text("*.log\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "initial")
    return path


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "local"


def truth(repo: Path, *tops: str) -> list[str]:
    spec = [f":(literal){t}" for t in tops] or ["."]
    out = git(repo, "ls-files", "-z", "-o", "--exclude-standard", "--", *spec)
    return sorted(p for p in out.split("\0") if p)


def scan(repo: Path, cache: Path, *tops: str) -> list[str]:
    return sorted(untracked.untracked(repo, tops or ("",), cache_dir=cache))


def settled(repo: Path) -> None:
    """Wait until every stamp in the tree is older than the file system's clock: then
    the cache trusts them, which is the path under test."""
    newest = max(os.lstat(d).st_mtime_ns for d, _, _ in os.walk(repo))
    probe = repo.parent / "clock"
    wait_until(
        lambda: probe.touch() or os.stat(probe).st_mtime_ns > newest + fsclock.SETTLED_NS,
        timeout=10,
        message="the file system clock to pass the tree's stamps",
    )


def warm(repo: Path, cache: Path) -> None:
    """Scan until the cache trusts every directory (the first look keeps fresh ones
    unsettled)."""
    scan(repo, cache)
    settled(repo)
    scan(repo, cache)


def named_runs(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The pathspecs of every ``git ls-files`` the scan runs."""
    runs: list[list[str]] = []
    real = untracked._start

    def spy(root: Path, options: list[str], spec: list[str]) -> subprocess.Popen[bytes]:
        runs.append(spec)
        return real(root, options, spec)

    monkeypatch.setattr(untracked, "_start", spy)
    return runs


def test_a_first_scan_is_gits_answer(repo: Path, cache: Path) -> None:
    (repo / "a/new.md").write_text("new\n")
    (repo / "a/b/deep").mkdir()
    (repo / "a/b/deep/x.md").write_text("x\n")
    (repo / "c/debug.log").write_text("ignored\n")
    (repo / "c/link").symlink_to("/etc/passwd")
    os.mkfifo(repo / "c/fifo")
    assert scan(repo, cache) == truth(repo) == ["a/b/deep/x.md", "a/new.md", "c/link"]
    assert (cache / untracked.FILE).is_file()


def test_without_a_cache_directory_git_answers_alone(repo: Path) -> None:
    (repo / "a/new.md").write_text("new\n")
    assert sorted(untracked.untracked(repo, cache_dir=None)) == ["a/new.md"]


def test_changes_after_the_cache_settled_are_seen(repo: Path, cache: Path) -> None:
    (repo / "a/old.md").write_text("old\n")
    warm(repo, cache)
    assert scan(repo, cache) == ["a/old.md"]
    (repo / "a/events/0002-user.md").write_text("new in a known directory\n")
    (repo / "c/d/e").mkdir(parents=True)
    (repo / "c/d/e/f.md").write_text("in new directories\n")
    (repo / "a/old.md").unlink()
    (repo / "a/b").rename(repo / "a/renamed")
    assert scan(repo, cache) == truth(repo)
    assert "c/d/e/f.md" in truth(repo) and "a/renamed/task.md" in truth(repo)


def test_an_unchanged_tree_runs_no_git_at_all(
    repo: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    warm(repo, cache)
    runs = named_runs(monkeypatch)
    assert scan(repo, cache) == []
    assert runs == []


def test_files_the_committer_commits_leave_the_list_without_a_rescan(
    repo: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Committer(repo) as committer:
        # The last index write is the committer's, as in a record jpfs keeps: after
        # someone else's, the first look trusts nothing (see the tests below).
        (repo / "c/seed.md").write_text("seed\n")
        committer.commit(Change(("c/seed.md",), "seed"))
        (repo / "a/new.md").write_text("new\n")
        warm(repo, cache)
        assert scan(repo, cache) == ["a/new.md"]
        committer.commit(Change(("a/new.md",), "commit it"))
    runs = named_runs(monkeypatch)
    assert scan(repo, cache) == truth(repo) == []
    # Only the remembered name was asked about: the tree was not listed again.
    assert runs == [[":(literal)a/new.md"]]


def test_a_path_dropped_from_the_index_by_hand_is_found(repo: Path, cache: Path) -> None:
    with Committer(repo) as committer:
        (repo / "c/extra.md").write_text("extra\n")
        committer.commit(Change(("c/extra.md",), "by jpfs"))
    warm(repo, cache)
    # git rm --cached keeps the file and no directory moves: only the index tells.
    git(repo, "rm", "-q", "--cached", "c/extra.md", "a/b/task.md")
    s = untracked.Scan(repo, cache)
    assert sorted(s.run(["a"])) == truth(repo, "a") == ["a/b/task.md"]
    assert s.stamps == {}  # git listed what it no longer tracks; no directory was read
    # What that scoped look learnt of the rest of the tree holds too.
    assert scan(repo, cache) == truth(repo) == ["a/b/task.md", "c/extra.md"]


def test_a_committer_write_after_a_foreign_one_does_not_hide_it(repo: Path, cache: Path) -> None:
    with Committer(repo) as committer:
        (repo / "c/extra.md").write_text("extra\n")
        committer.commit(Change(("c/extra.md",), "by jpfs"))
        warm(repo, cache)  # built on the index the committer wrote
        git(repo, "rm", "-q", "--cached", "a/b/task.md")
        (repo / "README").write_text("changed\n")
        committer.commit(Change(("README",), "after a foreign write"))
    assert scan(repo, cache) == truth(repo) == ["a/b/task.md"]


def test_ignore_rules_changed_in_place_are_followed(repo: Path, cache: Path) -> None:
    (repo / "a/b/trace.log").write_text("ignored\n")
    warm(repo, cache)
    assert scan(repo, cache) == []
    with open(repo / ".gitignore", "r+") as fh:  # in place: no directory moves
        fh.truncate(0)
    assert scan(repo, cache) == truth(repo) == ["a/b/trace.log"]
    with open(repo / ".gitignore", "w") as fh:
        fh.write("*.log\n")
    assert scan(repo, cache) == []


def test_another_repository_inside_is_reported_as_its_directory(repo: Path, cache: Path) -> None:
    nested = init_repo(repo / "c/clone")
    (nested / "f.md").write_text("x\n")
    assert scan(repo, cache) == truth(repo) == ["c/clone/"]
    warm(repo, cache)
    assert scan(repo, cache) == ["c/clone/"]
    (repo / "c/more.md").write_text("beside it\n")
    assert scan(repo, cache) == truth(repo) == ["c/clone/", "c/more.md"]


def test_a_scoped_scan_keeps_what_it_did_not_look_at(repo: Path, cache: Path) -> None:
    (repo / "a/b/new.md").write_text("new\n")
    (repo / "c/new.md").write_text("new\n")
    assert scan(repo, cache) == ["a/b/new.md", "c/new.md"]
    assert scan(repo, cache, "a/b") == truth(repo, "a/b") == ["a/b/new.md"]
    assert scan(repo, cache, "c", "a/b") == ["a/b/new.md", "c/new.md"]
    assert scan(repo, cache, "gone") == []
    assert scan(repo, cache) == ["a/b/new.md", "c/new.md"]


def test_a_directory_changed_within_a_clock_tick_is_listed_again(
    repo: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A clock so coarse that every stamp is recent: each may be shared with a change
    # to come, so none is trusted.
    monkeypatch.setattr(fsclock, "SETTLED_NS", 3600 * 10**9)
    s = untracked.Scan(repo, cache)
    s.run([""])
    assert s.stamps["a"] == untracked._UNSETTLED
    monkeypatch.undo()
    settled(repo)
    s = untracked.Scan(repo, cache)
    s.run([""])
    assert s.stamps["a"] not in (None, untracked._UNSETTLED)
    s = untracked.Scan(repo, cache)
    s.run([""])
    assert "a" not in s.stamps  # trusted: not listed again


@pytest.mark.parametrize(
    "damage", [b"", b"\x00garbage", b"\xfb\x02", "marshal of another shape"], ids=repr
)
def test_a_damaged_cache_is_rebuilt(repo: Path, cache: Path, damage: bytes | str) -> None:
    import marshal

    (repo / "a/new.md").write_text("new\n")
    cache.mkdir()
    data = marshal.dumps({"keys": 1, "flat": "x"}) if isinstance(damage, str) else damage
    (cache / untracked.FILE).write_bytes(data)
    assert scan(repo, cache) == ["a/new.md"]
    assert scan(repo, cache) == ["a/new.md"]


def test_the_cache_is_written_only_when_something_moved(repo: Path, cache: Path) -> None:
    warm(repo, cache)
    st = os.stat(cache / untracked.FILE)
    scan(repo, cache)
    after = os.stat(cache / untracked.FILE)
    assert (after.st_ino, after.st_mtime_ns) == (st.st_ino, st.st_mtime_ns)


def test_the_index_epoch_moves_only_for_other_writers(repo: Path) -> None:
    gitdir = repo / ".git"
    with Committer(repo) as committer:
        (repo / "c/one.md").write_text("1\n")
        committer.commit(Change(("c/one.md",), "one"))
        first = indexepoch.read(gitdir)
        assert first is not None and first.written == indexepoch.stamp(gitdir)
        built = indexepoch.current(gitdir)
        (repo / "c/two.md").write_text("2\n")
        committer.commit(Change(("c/two.md",), "two"))
        second = indexepoch.read(gitdir)
        assert second is not None and second.epoch == first.epoch
        assert indexepoch.holds(built, indexepoch.current(gitdir))
        (repo / "README").write_text("by hand\n")
        git(repo, "add", "README")
        assert not indexepoch.holds(built, indexepoch.current(gitdir))
        (repo / "c/three.md").write_text("3\n")
        committer.commit(Change(("c/three.md",), "three"))
        third = indexepoch.read(gitdir)
        assert third is not None and third.epoch == second.epoch + 1
        assert not indexepoch.holds(built, indexepoch.current(gitdir))


def test_a_directory_replaced_by_a_link_is_never_walked_through(
    repo: Path, cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (repo / "a/b/new.md").write_text("new\n")
    outside = tmp_path / "outside"
    (outside / "b").mkdir(parents=True)
    (outside / "b/secret.md").write_text("secret\n")
    warm(repo, cache)
    assert scan(repo, cache) == ["a/b/new.md"]
    # The cache still knows a/b and a/events; through the link they would be outside.
    (repo / "a").rename(tmp_path / "a-moved")
    (repo / "a").symlink_to(outside)
    runs = named_runs(monkeypatch)
    assert scan(repo, cache) == truth(repo) == ["a"]
    # Nothing behind the link was even named to git (git itself refuses such paths).
    assert not [p for spec in runs for p in spec if p.startswith(":(literal)a/")]


def test_stamps_that_moved_are_kept_for_the_next_look(repo: Path, cache: Path) -> None:
    """The usual case of a busy record: known directories moved, none came or went."""
    warm(repo, cache)
    (repo / "a/events/0002-user.md").write_text("new\n")
    (repo / "c/new.md").write_text("new\n")
    assert scan(repo, cache) == ["a/events/0002-user.md", "c/new.md"]
    settled(repo)
    s = untracked.Scan(repo, cache)
    assert sorted(s.run([""])) == ["a/events/0002-user.md", "c/new.md"]
    assert set(s.stamps) == {"a/events", "c"}  # listed again once, as they settled
    s = untracked.Scan(repo, cache)
    assert sorted(s.run([""])) == ["a/events/0002-user.md", "c/new.md"]
    assert s.stamps == {}  # trusted from then on
    (repo / "c/new.md").unlink()
    assert scan(repo, cache) == truth(repo) == ["a/events/0002-user.md"]
