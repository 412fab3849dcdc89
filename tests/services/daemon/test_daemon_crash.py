"""SIGKILL the daemon at random points of a busy workload; restarted, it must converge exactly."""

from __future__ import annotations

import os
import random
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from jpfs.core.locks import is_locked
from tests.conftest import git, rgit, wait_until
from tests.services.daemon.test_daemon_helpers import (
    DaemonProc,
    daemon_proc_fixture,
    fsck,
    leftovers,
    roles,
    setup_workspace,
    state_of,
    write_renamed,
)

JOBS = 10


@pytest.fixture
def daemon_proc(ws: Path) -> Iterator[DaemonProc]:
    yield from daemon_proc_fixture(ws)


def commit_count(ws: Path) -> int:
    """Commits on the record (the daemon's progress)."""
    out = subprocess.run(
        ["git", "rev-list", "--count", "HEAD"],
        cwd=ws / "conversations", capture_output=True, text=True, check=False,
    )  # fmt: skip
    return int(out.stdout.strip() or 0)


def children(conv: Path) -> list[Path]:
    return sorted(p for p in conv.iterdir() if p.is_dir() and p.name.startswith("c-"))


def test_sigkill_at_random_points_loses_nothing_and_repeats_nothing(
    daemon_proc: DaemonProc,
) -> None:
    seed = int(os.environ.get("JPFS_CRASH_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    ws = daemon_proc.ws
    setup_workspace(ws, default_agent="worker", delay=0.02, cfg={"daemon.max_agents": "3"})
    root = ws / "conversations"
    local = ws / ".jpfs" / "local"
    jobs = [f"job{n}" for n in range(JOBS)]

    def all_idle() -> bool:
        return all(state_of(ws, job) == "idle" for job in jobs if (root / job).is_dir())

    user_head = git(ws, "rev-parse", "HEAD")
    daemon_proc.start()
    for job in jobs:
        write_renamed(root / job / "task.md", f"Task {job}.\n")
    kills = 0
    pause = threading.Event()
    for _ in range(8):
        target = commit_count(ws) + rng.randint(1, 10)
        wait_until(
            lambda t=target: commit_count(ws) >= t or all_idle(), timeout=30, message="progress"
        )
        if all_idle():
            break
        pause.wait(rng.uniform(0, 0.04))  # a random moment, not a synchronisation
        daemon_proc.kill()
        kills += 1
        # The kernel drops every run lock with the process (a child it was forking when
        # killed may hold the descriptors for a moment, until it closes them to exec).
        wait_until(
            lambda: not [j for j in jobs if is_locked(local, j)], timeout=5, message="locks freed"
        )
        daemon_proc.start()
    wait_until(all_idle, timeout=60, message=f"every job to finish (seed {seed})")
    wait_until(lambda: not rgit(ws, "status", "--porcelain"), message="clean")
    assert daemon_proc.terminate() == 0
    assert kills >= 2, f"the workload ended before the kills (seed {seed})"

    for job in jobs:
        conv = root / job
        assert roles(conv) == ["user", "assistant", "tool", "assistant"], (job, seed)
        kids = children(conv)
        assert len(kids) == 1, (job, kids, seed)
        assert roles(kids[0]) == ["user", "assistant"], (job, seed)
        assert state_of(ws, f"{job}/{kids[0].name}") == "idle"
        tool = (conv / "events" / "0003-tool.md").read_text()
        assert "Helper says hello." in tool, (job, seed)
        assert "Worker done." in (conv / "result.md").read_text()
    assert leftovers(ws) == [], seed
    assert not list((ws / ".git").glob("**/*.lock")), seed
    # Every commit went to the record; the user's branch and index were never touched.
    assert git(ws, "rev-parse", "HEAD") == user_head, seed
    assert git(ws, "status", "--porcelain", "--untracked-files=no") == "", seed
    fsck(ws)
