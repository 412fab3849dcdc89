"""Files a change creates (``Change.creates``): made by the committing thread, all or
nothing, never over an existing file or beyond a link, and committed with the change."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pygit2
import pytest

import jpfs.infra.committer.core as committer_core
from jpfs.errors import ExistsError, FormatError, NotFoundError, ScopeError
from jpfs.infra.committer import Change, Committer
from tests.conftest import wait_until
from tests.infra.committer.test_committer import assert_consistent, changed_paths, git


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    from tests.infra.committer.test_committer import init_repo

    path = init_repo(tmp_path / "repo")
    (path / "events").mkdir()
    (path / "README").write_text("readme\n")
    git(path, "add", "README")
    git(path, "commit", "-q", "-m", "initial")
    return path


def head(repo: Path) -> str:
    return git(repo, "rev-parse", "HEAD").strip()


def test_a_created_file_is_made_and_committed_in_one_commit(repo: Path) -> None:
    with Committer(repo) as committer:
        sha = committer.commit(
            Change(("events",), "add", creates=(("events/0001-user.md", "hello\n"),))
        )
    assert sha == head(repo)
    assert (repo / "events/0001-user.md").read_text() == "hello\n"
    assert changed_paths(repo, sha) == {"events/0001-user.md"}
    assert_consistent(repo)


def test_an_existing_file_is_never_replaced(repo: Path) -> None:
    (repo / "events/0001-user.md").write_text("by hand\n")
    before = head(repo)
    with Committer(repo) as committer, pytest.raises(ExistsError, match="already exists"):
        committer.commit(Change(("events",), "add", creates=(("events/0001-user.md", "x\n"),)))
    assert (repo / "events/0001-user.md").read_text() == "by hand\n"
    assert head(repo) == before


def test_a_missing_directory_is_not_made(repo: Path) -> None:
    before = head(repo)
    with Committer(repo) as committer, pytest.raises(NotFoundError, match="directory"):
        committer.commit(Change(("gone",), "add", creates=(("gone/0001-user.md", "x\n"),)))
    assert not (repo / "gone").exists() and head(repo) == before


def test_a_file_the_change_does_not_commit_is_refused_before_anything(repo: Path) -> None:
    with Committer(repo) as committer, pytest.raises(ScopeError, match="does not commit"):
        committer.commit(Change(("README",), "add", creates=(("events/x.md", "x\n"),)))
    assert not (repo / "events/x.md").exists()


def test_nothing_is_made_beyond_a_symbolic_link(repo: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, repo / "linked")
    (outside / "sub").mkdir()
    with Committer(repo) as committer:
        for paths in (("linked",), ("linked/sub",)):  # the link itself, a directory beyond it
            with pytest.raises((ScopeError, FormatError), match="symbolic link"):
                committer.commit(Change(paths, "add", creates=((f"{paths[0]}/x.md", "x\n"),)))
    assert [p.name for p in outside.rglob("*")] == ["sub"]


def test_the_leader_makes_the_files_of_its_whole_batch(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three writers queue while a batch commits; the next leader makes all three files
    in its own thread and commits them as one commit."""
    makers: dict[str, int] = {}
    first = threading.Event()
    release = threading.Event()
    original = committer_core.create_new

    def made(path: Path, text: str, **kwargs: object) -> bool:
        makers[path.name] = threading.get_ident()
        if path.name == "first.md":
            first.set()
            release.wait(10)
        return original(path, text, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(committer_core, "create_new", made)
    with Committer(repo) as committer:

        def commit(name: str) -> None:
            committer.commit(Change(("events",), name, creates=((f"events/{name}.md", name),)))

        threads = [threading.Thread(target=commit, args=("first",))]
        threads[0].start()
        assert first.wait(10)
        writers = {}
        for name in ("a", "b", "c"):
            thread = threading.Thread(target=commit, args=(name,))
            thread.start()
            threads.append(thread)
            writers[name] = thread.ident
        wait_until(lambda: len(committer._group._queue) == 3, message="three queued writers")
        release.set()
        for thread in threads:
            thread.join(10)
    assert {makers[n] for n in ("a.md", "b.md", "c.md")} == {makers["a.md"]}
    assert makers["a.md"] in writers.values()
    log = git(repo, "log", "--format=%s", "-2").splitlines()
    assert len(log) == 2 and log[1] == "first"
    assert changed_paths(repo, head(repo)) == {"events/a.md", "events/b.md", "events/c.md"}
    assert_consistent(repo)


def test_a_retried_batch_makes_its_files_once(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch retried after libgit2 lost a packfile (see GroupCommit._run_safely) does
    not trip over the files it made the first time."""
    failed: list[bool] = []
    original = Committer._commit_batch

    def flaky(self: Committer, *args: object) -> None:
        if not failed:
            failed.append(True)
            raise pygit2.GitError("packfile went away")
        original(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(Committer, "_commit_batch", flaky)
    with Committer(repo) as committer:
        sha = committer.commit(Change(("events",), "add", creates=(("events/x.md", "x\n"),)))
    assert failed and sha == head(repo)
    assert changed_paths(repo, sha) == {"events/x.md"}
    assert_consistent(repo)
