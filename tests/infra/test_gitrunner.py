"""The git runner's one wording of a failed git command, on real git."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from jpfs.errors import GitError
from jpfs.infra import git


def make_repo(path: Path) -> Path:
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    (path / "f").write_text("one\n")
    for args in (["add", "f"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "1"]):
        subprocess.run(["git", *args], cwd=path, check=True)
    return path


def test_a_failure_names_the_command_past_its_settings_and_git_s_complaint(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path / "r")
    with pytest.raises(GitError) as raised:
        git.run(repo, ["-c", "core.quotePath=false", "rev-parse", "--verify", "nope"])
    assert str(raised.value) == "git rev-parse failed: Needed a single revision"


def test_a_process_started_beside_the_caller_fails_in_the_same_words(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r")
    args = ["-c", "core.quotePath=false", "rev-parse", "--verify", "nope"]
    proc = git.start(repo, args)
    _, err = proc.communicate()
    with pytest.raises(GitError) as ran:
        git.run(repo, args)
    assert str(git.failure(args, proc.returncode, err)) == str(ran.value)


def test_the_first_complaint_is_the_reason_and_the_last_the_advice(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r")
    (repo / ".git" / "index.lock").write_text("")
    proc = git.run(repo, ["read-tree", "-m", "-u", "HEAD", "HEAD"], check=False)
    assert proc.returncode != 0
    assert git.complaint(proc.stderr, first=True).startswith("Unable to create")
    assert git.complaint(proc.stderr) != git.complaint(proc.stderr, first=True)
    assert git.complaint("") == "" and "exit status" in str(git.failure(["x"], 3, ""))
