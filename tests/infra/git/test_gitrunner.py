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


def test_the_complaint_is_git_s_reason_not_its_advice(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r")
    (repo / ".git" / "index.lock").write_text("")
    proc = git.run(repo, ["read-tree", "-m", "-u", "HEAD", "HEAD"], check=False)
    assert proc.returncode != 0
    assert git.complaint(proc.stderr, first=True).startswith("Unable to create")
    # The advice git prints after its fatal: line ("remove the file manually") is left out.
    assert git.complaint(proc.stderr) == git.complaint(proc.stderr, first=True)
    # A connection's end echoed after the reason is not the reason (issue #49).
    said = (
        "fatal: couldn't find remote ref refs/heads/x\nfatal: the remote end hung up unexpectedly\n"
    )
    assert git.complaint(said) == "couldn't find remote ref refs/heads/x"
    said = (
        "me@host: Permission denied (publickey).\nfatal: Could not read from remote repository.\n"
    )
    assert git.complaint(said) == "me@host: Permission denied (publickey)."
    assert git.complaint("") == "" and "exit status" in str(git.failure(["x"], 3, ""))
