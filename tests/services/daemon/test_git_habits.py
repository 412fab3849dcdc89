"""The user's git habits while the daemon is busy: nothing fails, is lost or runs twice.

Each case starts conversations, does what a user does to their branch (a checkout of a
branch from before ``jpfs init``, a pull, ``rebase -i``, ``stash``, ``reset --hard``,
``bisect``, a second worktree, ``gc``, their own hooks) while those run, starts more in the middle of it,
and comes back. Every conversation then has exactly one answer, no error event, and
``git fsck --strict`` is clean.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import (
    Result,
    assert_fsck_clean,
    git,
    jpfs_subprocess,
    running_daemon,
    wait_until,
)
from tests.services.daemon.test_daemon_helpers import setup_workspace, state_of, status

Action = Callable[[Path, Callable[[str], None], Path], None]


@pytest.fixture
def busy(ws: Path) -> Iterator[Path]:
    """A workspace whose helper takes a moment per answer, with the daemon running."""
    setup_workspace(ws, default_agent="helper", delay=0.15)
    git(ws, "tag", "before-jpfs", "HEAD~1")  # the repository's first commit: no .jpfs/
    git(ws, "add", ".gitignore")
    git(ws, "commit", "-q", "-m", "ignore jpfs's directories")
    with running_daemon(ws):
        yield ws


class Work:
    """Conversations started around the user's git commands, checked at the end."""

    def __init__(self, ws: Path) -> None:
        self.ws, self.ids = ws, list[str]()

    def start(self, tag: str, n: int = 3) -> None:
        for k in range(n):
            conv_id = f"{tag}{k}"
            conv = self.ws / "conversations" / conv_id
            conv.mkdir()
            (conv / "task.md").write_text(f"Task {conv_id}.\n", encoding="utf-8")
            self.ids.append(conv_id)

    def wait(self) -> None:
        wait_until(
            lambda: all(state_of(self.ws, c) == "idle" for c in self.ids),
            timeout=90,
            message=f"{len(self.ids)} conversations to finish",
        )

    def check(self, answer: str = "Helper says hello.") -> None:
        self.wait()
        for conv_id in self.ids:
            events = self.ws / "conversations" / conv_id / "events"
            names = sorted(p.name for p in events.iterdir())
            assert not [n for n in names if n.endswith("-error.md")], (conv_id, names)
            assert len([n for n in names if n.endswith("-assistant.md")]) == 1, (conv_id, names)
            result = (self.ws / "conversations" / conv_id / "result.md").read_text("utf-8")
            assert answer in result or "Helper" in result, (conv_id, result)
        assert_fsck_clean(self.ws, "--strict")
        daemon = jpfs_subprocess("daemon", "status", "--format", "json", cwd=self.ws)
        assert daemon.returncode == 0 and json.loads(daemon.stdout)["failures"] == 0


def test_checkout_of_a_branch_from_before_jpfs_init(busy: Path) -> None:
    ws, work = busy, Work(busy)
    work.start("before")
    git(ws, "checkout", "-q", "before-jpfs")
    assert not (ws / ".jpfs" / "config.toml").exists()
    work.start("during")
    # Daemon control works from any branch, and status says what stands in.
    shown = jpfs_subprocess("daemon", "status", cwd=ws)
    assert shown.returncode == 0, shown.stderr
    assert "policy: .jpfs/config.toml: missing on this branch" in shown.stdout
    wait_until(
        lambda: ".jpfs/agents/helper.toml" in (status(ws).get("policy") or {}),
        message="the daemon to say the kept helper profile stands in",
    )
    git(ws, "checkout", "-q", "main")
    work.start("after")
    work.check()
    assert git(ws, "status", "--porcelain") == ""
    wait_until(lambda: not status(ws).get("policy"), message="the branch's policy back in force")
    # And stopped from the old branch, where .jpfs/ is not.
    git(ws, "checkout", "-q", "before-jpfs")
    stopped = jpfs_subprocess("daemon", "stop", cwd=ws)
    assert stopped.returncode == 0, stopped.stderr
    assert jpfs_subprocess("daemon", "status", cwd=ws).stdout.strip() == "not running"
    git(ws, "checkout", "-q", "main")


def test_checkout_of_a_branch_with_other_profiles(busy: Path) -> None:
    ws, work = busy, Work(busy)
    git(ws, "checkout", "-q", "-b", "narrow")
    helper = ws / ".jpfs" / "agents" / "helper.toml"
    text = helper.read_text(encoding="utf-8")
    helper.write_text(
        "overridable = []\n"
        + text.replace("script-helper", "script-narrow").replace("says hello", "is narrow"),
        encoding="utf-8",
    )
    git(ws, "commit", "-q", "-am", "a narrower helper")
    git(ws, "checkout", "-q", "main")
    work.start("wide")
    git(ws, "checkout", "-q", "narrow")  # conversations created under main's helper go on
    work.start("narrow")
    work.check()
    narrow = (ws / "conversations" / "narrow0" / "result.md").read_text(encoding="utf-8")
    assert "Helper is narrow." in narrow
    git(ws, "checkout", "-q", "main")


def test_a_pull_that_changes_a_profile_waits_for_trust(
    busy: Path, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    ws, work = busy, Work(busy)
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(ws, "remote", "add", "origin", str(remote))
    git(ws, "push", "-q", "-u", "origin", "main")
    upstream = tmp_path / "upstream"
    git(tmp_path, "clone", "-q", str(remote), str(upstream))
    marker = tmp_path / "RAN"
    helper = upstream / ".jpfs" / "agents" / "helper.toml"
    helper.write_text(
        helper.read_text(encoding="utf-8").replace(
            "[onboarding]",
            f'[[tools.command]]\nname = "mark"\ndescription = "m"\nprogram = "touch"\n'
            f'args = ["{marker}"]\n\n[onboarding]',
        ),
        encoding="utf-8",
    )
    git(upstream, "commit", "-q", "-am", "the helper runs a program now")
    git(upstream, "push", "-q")
    work.start("before")
    git(ws, "pull", "-q", "--ff-only")
    work.start("pulled")  # the changed helper is not trusted: the kept one stands in
    work.check()
    wait_until(
        lambda: (
            "not trusted" in (status(ws).get("policy") or {}).get(".jpfs/agents/helper.toml", "")
        ),
        message="status to say the pulled helper waits for trust",
    )
    assert cli("trust", "helper").code == 0
    work.start("trusted", 1)
    work.check()
    wait_until(lambda: not status(ws).get("policy"), message="the trusted helper taken up")


def test_rebase_interactive_stopped_before_jpfs_init(busy: Path) -> None:
    ws, work = busy, Work(busy)
    (ws / "notes.txt").write_text("mine\n", encoding="utf-8")
    git(ws, "add", "notes.txt")
    git(ws, "commit", "-q", "-m", "my notes")
    work.start("before")
    # `break` first: the rebase stops on the commit before `jpfs init`, nothing picked.
    # (Not --root: git's own fsck then finds the empty tree its rebase never wrote.)
    editor = {"GIT_SEQUENCE_EDITOR": "sed -i 1ibreak", "GIT_EDITOR": "true"}
    rebase = subprocess.run(
        ["git", "rebase", "-i", "before-jpfs"],
        cwd=ws, env={**os.environ, **editor}, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert rebase.returncode == 0, rebase.stderr
    assert not (ws / ".jpfs" / "config.toml").exists()  # stopped before jpfs init
    work.start("during")
    git(ws, "rebase", "--continue")
    work.start("after")
    work.check()
    assert git(ws, "log", "-1", "--format=%s") == "my notes\n"


def test_stash_of_a_half_edited_profile(busy: Path) -> None:
    ws, work = busy, Work(busy)
    helper = ws / ".jpfs" / "agents" / "helper.toml"
    good = helper.read_text(encoding="utf-8")
    work.start("before")
    helper.write_text(good + "\n[script\n", encoding="utf-8")  # mid-edit: invalid TOML
    work.start("broken")
    wait_until(
        lambda: "malformed" in (status(ws).get("policy") or {}).get(".jpfs/agents/helper.toml", ""),
        message="status to say the broken profile is stood in for",
    )
    git(ws, "stash")
    work.start("stashed")
    git(ws, "stash", "pop")
    work.start("popped")
    helper.write_text(good, encoding="utf-8")
    work.check()
    assert git(ws, "stash", "list") == ""


def test_reset_hard_to_before_jpfs_init_and_back(busy: Path) -> None:
    ws, work = busy, Work(busy)
    tip = git(ws, "rev-parse", "HEAD").strip()
    work.start("before")
    git(ws, "reset", "-q", "--hard", "before-jpfs")
    work.start("during")
    git(ws, "reset", "-q", "--hard", tip)
    work.start("after")
    work.check()
    assert git(ws, "status", "--porcelain") == ""


def test_bisect_through_commits_before_jpfs_init(busy: Path) -> None:
    ws, work = busy, Work(busy)
    for k in range(4):
        (ws / f"step{k}.txt").write_text(f"{k}\n", encoding="utf-8")
        git(ws, "add", f"step{k}.txt")
        git(ws, "commit", "-q", "-m", f"step {k}")
    work.start("before")
    git(ws, "bisect", "start", "HEAD", "before-jpfs")
    for step, verdict in enumerate(("bad", "good", "bad", "good", "bad", "good")):
        work.start(f"bisect{step}", 1)
        if "is the first bad commit" in git(ws, "bisect", verdict, check=False):
            break
    git(ws, "bisect", "reset")
    work.check()


def test_a_second_worktree_of_the_project(busy: Path, tmp_path: Path) -> None:
    ws, work = busy, Work(busy)
    second = tmp_path / "second"
    git(ws, "worktree", "add", "-q", "-b", "old-work", str(second), "before-jpfs")
    work.start("before")
    (second / "old.txt").write_text("old\n", encoding="utf-8")
    git(second, "add", "old.txt")
    git(second, "commit", "-q", "-m", "work on an old branch")
    work.start("during")
    git(ws, "worktree", "remove", str(second))
    work.check()
    assert git(ws, "show", "old-work:old.txt") == "old\n"


def test_gc_prune_now_and_maintenance(busy: Path) -> None:
    # --prune=now drops every object no ref reaches at once, however young: the
    # objects of a commit the daemon is landing must survive it (objects.write_pack).
    ws, work = busy, Work(busy)
    done = threading.Event()

    def collect() -> None:  # as fast as git goes, all the while the daemon commits
        while not done.is_set():
            git(ws, "prune", "--expire=now", check=False)
            git(ws, "repack", "-a", "-d", "-q", check=False)

    collector = threading.Thread(target=collect)
    collector.start()
    try:
        work.start("pruned", 12)
        work.wait()
    finally:
        done.set()
        collector.join()
    # fsck once the user's repack loop has stopped: an fsck races any repack, git's own.
    work.check()
    work.start("gc", 3)
    git(ws, "gc", "-q", "--prune=now")
    git(ws, "maintenance", "run", "--task=gc", "--task=loose-objects", "--task=commit-graph")
    work.start("maintained", 3)
    git(ws, "gc", "-q", "--prune=now", "--aggressive")
    work.check()
    # Nothing stays kept once committed (a last commit may still be landing).
    pack_dir = ws / ".git" / "objects" / "pack"
    wait_until(lambda: not list(pack_dir.glob("*.keep")), message="no .keep left")
    # Not even a retry: git's prune never pulled a file from under a commit.
    assert "repository fault" not in (ws / ".jpfs" / "local" / "daemon.log").read_text("utf-8")


def test_the_users_own_hooks(busy: Path, tmp_path: Path) -> None:
    ws, work = busy, Work(busy)
    ran = tmp_path / "hooks.log"
    hooks = Path(git(ws, "rev-parse", "--git-path", "hooks").strip())
    hooks = hooks if hooks.is_absolute() else ws / hooks
    for name, code in (("pre-commit", 1), ("commit-msg", 1), ("post-commit", 0)):
        hook = hooks / name
        hook.write_text(f'#!/bin/sh\necho "{name} $PWD" >> "{ran}"\nexit {code}\n')
        hook.chmod(0o755)
    work.start("hooked", 4)
    blocked = subprocess.run(
        ["git", "commit", "-q", "--allow-empty", "-m", "mine"],
        cwd=ws, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert blocked.returncode != 0  # the user's hook refuses the user's commit
    work.check()
    # The record is jpfs's, not the project's: the project's hooks never ran on it.
    record = str(ws / "conversations")
    assert record not in (ran.read_text() if ran.exists() else "")
