"""Objects read and written in process (jpfs.infra.git.objects), against git itself;
pygit2's errors reach the services as GitError, never as pygit2's own."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from jpfs.errors import GitError, RepositoryFault
from jpfs.infra.git import identity, objects
from jpfs.services.sync.leases import LeaseBook


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True)
    return done.stdout


def make_repo(path: Path) -> Path:
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    for key, value in (("user.name", "t"), ("user.email", "t@t")):
        git(path, "config", key, value)
    return path


def commit(repo: Path, files: dict[str, str], message: str) -> str:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD").strip()


def refuse_writes(repo: Path) -> None:
    """Make writing the empty tree fail: its loose object's directory is a file."""
    (repo / ".git" / "objects" / "4b").write_text("")


def test_blob_ids_are_gits(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r")
    data = b"some text\n\x00and bytes"
    (repo / "f").write_bytes(data)
    assert objects.blob_id(data) == git(repo, "hash-object", "f").strip()


def test_the_tip_reads_entries_files_and_ignores(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r")
    tip = objects.Tip(repo)
    assert tip.refresh() is None and tip.entry("a") is None and tip.files_under("d") == []
    head = commit(repo, {"a": "1\n", "d/b": "2\n", "d/e/c": "3\n", ".gitignore": "*.log\n"}, "m")
    assert tip.refresh() == head
    blob = git(repo, "rev-parse", "HEAD:a").strip()
    assert tip.entry("a") == (blob, 0o100644) and tip.entry("d") is None
    assert sorted(tip.files_under("d")) == ["d/b", "d/e/c"] and tip.files_under("a") == []
    assert tip.ignored("x.log") and not tip.ignored("x.txt")


def test_a_tree_the_tip_cannot_read_is_a_repository_fault(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r")
    commit(repo, {"d/e/c": "3\n"}, "m")
    tip = objects.Tip(repo)
    tip.refresh()
    inner = git(repo, "rev-parse", "HEAD:d/e").strip()
    (repo / ".git" / "objects" / inner[:2] / inner[2:]).unlink()
    with pytest.raises(RepositoryFault):
        tip.files_under("d")


def test_copies_keep_author_committer_dates_and_message(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r")
    first = commit(repo, {"c/a": "1\n", "x": "0\n"}, "first\n\nJpfs-Event: task")
    commit(repo, {"x": "1\n"}, "second")
    store = objects.Store(repo)
    chain = store.first_parents()
    assert chain is not None and chain[0] == first and len(chain) == 2
    tree = store.subtree(first, "c")
    assert tree == git(repo, "rev-parse", f"{first}:c").strip()
    assert store.subtree(first, "x") is None and store.subtree(first, "nope") is None
    copy = store.copy_commit(first, tree, None)
    store.create_branch("copied", copy)
    shown = "--format=%an <%ae> %ad|%cn <%ce> %cd|%B"
    assert git(repo, "log", "-1", shown, "copied") == git(repo, "log", "-1", shown, first)
    assert git(repo, "rev-parse", "copied^{tree}").strip() == tree
    with pytest.raises(GitError):
        store.create_branch("copied", copy)


def test_an_unborn_head_has_no_first_parents(tmp_path: Path) -> None:
    assert objects.Store(make_repo(tmp_path / "r")).first_parents() is None
    with pytest.raises(GitError, match="not a git repository"):
        objects.Store(tmp_path / "nothing")


def test_empty_commits_at_the_epoch_are_the_same_on_every_machine(tmp_path: Path) -> None:
    one, two = make_repo(tmp_path / "one"), make_repo(tmp_path / "two")
    root = objects.Store(one).empty_commit("root\n", [], epoch=True)
    assert objects.Store(two).empty_commit("root\n", [], epoch=True) == root
    child = objects.Store(one).empty_commit("child\n", [root])
    assert git(one, "log", "--format=%an <%ae>|%P", "-1", child) == (
        f"{identity.FALLBACK_NAME} <{identity.FALLBACK_EMAIL}>|{root}\n"
    )


def test_a_lease_the_object_store_refuses_is_a_git_error(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r")
    refuse_writes(repo)
    book = LeaseBook(repo, "m1", "i1", 30.0)
    with pytest.raises(GitError, match="cannot write a commit"):
        book.make("a")
