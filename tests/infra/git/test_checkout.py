"""jpfs.infra.git.checkout: a work tree moved between two commits, with real git."""

from __future__ import annotations

import threading
from pathlib import Path

from jpfs.infra.git.checkout import switch
from tests.conftest import git


def two_commits(tmp_path: Path) -> tuple[Path, str, str]:
    repo = tmp_path / "repo"
    git(tmp_path, "init", "-q", str(repo))
    (repo / "a.md").write_text("one\n", encoding="utf-8")
    git(repo, "add", "a.md")
    git(repo, "commit", "-q", "-m", "one")
    old = git(repo, "rev-parse", "HEAD").strip()
    (repo / "a.md").write_text("two\n", encoding="utf-8")
    (repo / "b.md").write_text("new\n", encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "two")
    new = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "reset", "-q", "--hard", old)
    return repo, old, new


def test_the_files_and_the_index_move_to_the_new_commit(tmp_path: Path) -> None:
    repo, old, new = two_commits(tmp_path)
    assert switch(repo, old, new).returncode == 0
    assert (repo / "a.md").read_text(encoding="utf-8") == "two\n"
    assert (repo / "b.md").read_text(encoding="utf-8") == "new\n"
    assert git(repo, "diff", "--cached", "--name-only", new) == ""


def test_a_file_edited_and_not_committed_is_never_overwritten(tmp_path: Path) -> None:
    repo, old, new = two_commits(tmp_path)
    (repo / "a.md").write_text("mine\n", encoding="utf-8")
    refused = switch(repo, old, new, lock_wait=1.0)
    assert refused.returncode != 0 and "a.md" in refused.stderr
    assert (repo / "a.md").read_text(encoding="utf-8") == "mine\n"
    assert not (repo / "b.md").exists()


def test_a_busy_index_lock_is_reported_at_once_or_waited_out(tmp_path: Path) -> None:
    repo, old, new = two_commits(tmp_path)
    lock = repo / ".git" / "index.lock"
    lock.write_text("", encoding="utf-8")
    busy = switch(repo, old, new)
    assert busy.returncode != 0 and "index.lock" in busy.stderr
    assert (repo / "a.md").read_text(encoding="utf-8") == "one\n"
    # Another git command lets the index go 0.2 s later, well within the wait.
    holder = threading.Timer(0.2, lock.unlink)
    holder.start()
    try:
        assert switch(repo, old, new, lock_wait=10.0).returncode == 0
    finally:
        holder.join()
    assert (repo / "b.md").is_file()
