"""Many machines, one git remote: three daemons on three clones share the work.

A bare repository is the remote; three clones each run a real daemon with
``sync.remote = "origin"``; a fourth clone with no daemon creates the conversations
and collects the results through ``jpfs sync``. Every model turn is counted at the
local Messages API server, by the API key each daemon was started with. Midway, one
daemon is SIGKILLed: its leases expire, the others take them over, and everything
finishes with no turn recorded twice.
"""

from __future__ import annotations

import json
import os
import re
import signal
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import assert_fsck_clean, git, jpfs_subprocess, use_only_agent, wait_until
from tests.messages_server import MessagesServer, RecordedRequest, last_user_text, text_reply

AGENT = """
model = "claude-sync"
provider = "anthropic"
[system]
role = "You answer in one line."
[onboarding]
enabled = false
"""
CONVERSATIONS = int(os.environ.get("JPFS_TEST_SYNC_CONVERSATIONS", "300"))
# Long enough that a daemon on a loaded CI machine renews in time (a renewal is due
# every third of it); a lost lease is correct but makes the test's counts uneven.
LEASE = 8.0
TASK_RE = re.compile(r"Task (\d+)\b")


def jpfs(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    proc = jpfs_subprocess(*args, cwd=cwd, env=env, timeout=120)
    assert proc.returncode == 0, f"jpfs {' '.join(args)} in {cwd.name}: {proc.stderr}"
    return proc.stdout


def clone(remote: Path, path: Path) -> Path:
    git(remote.parent, "clone", "-q", str(remote), str(path))
    return path


def seed_remote(tmp_path: Path, *, lease: float, url: str = "") -> Path:
    """The remote, with the project's branch and a record configured for sync: a bare
    repository made here (its path is returned), or the one served at ``url``."""
    remote = tmp_path / "remote.git"
    if not url:
        git(tmp_path, "init", "-q", "--bare", "-b", "main", str(remote))
    seed = tmp_path / "seed"
    git(tmp_path, "clone", "-q", url or str(remote), str(seed))
    (seed / "README.md").write_text("# project\n", encoding="utf-8")
    git(seed, "add", "README.md")
    git(seed, "commit", "-q", "-m", "initial")
    jpfs(seed, "init")
    use_only_agent(seed, "syncer", AGENT)
    jpfs(seed, "config", "set", "sync.remote", "origin")
    jpfs(seed, "config", "set", "sync.interval", "0.3")
    jpfs(seed, "config", "set", "sync.lease", str(lease))
    git(seed, "add", "-A")
    git(seed, "commit", "-q", "-m", "share the record through origin")
    git(seed, "push", "-q", "origin", "main")
    jpfs(seed, "sync")  # the record branch reaches the remote
    return remote


def start_daemon(ws: Path, key: str) -> int:
    jpfs(ws, "daemon", "start", env={"ANTHROPIC_API_KEY": key})
    return int((ws / ".jpfs" / "local" / "daemon.pid").read_text(encoding="utf-8"))


def stop_daemon(ws: Path) -> None:
    jpfs_subprocess("daemon", "stop", "--force", "--timeout", "30", cwd=ws, timeout=60)


def status(ws: Path) -> dict[str, object]:
    proc = jpfs_subprocess("daemon", "status", "--format", "json", cwd=ws)
    return dict(json.loads(proc.stdout)) if proc.stdout.strip() else {}


def results_at(ws: Path) -> set[int]:
    root = ws / "conversations"
    return {
        int(path.parent.name.removeprefix("t-"))
        for path in root.glob("t-*/result.md")
        if path.read_text(encoding="utf-8").strip()
    }


def assistant_turns(ws: Path, number: int) -> int:
    events = ws / "conversations" / f"t-{number:03d}" / "events"
    return sum(1 for p in events.glob("*-assistant.md"))


def key_of(request: RecordedRequest) -> str:
    """Which daemon asked: the API key it was started with."""
    headers = request.headers
    return headers.get("x-api-key") or headers.get("authorization", "").removeprefix("Bearer ")


def fsck(path: Path) -> None:
    assert_fsck_clean(path, "--strict")


@pytest.mark.timeout(900)
def test_three_daemons_share_the_work_and_survive_a_sigkill(
    tmp_path: Path, api_env: MessagesServer
) -> None:
    def respond(request: dict[str, object]) -> object:
        assert TASK_RE.search(last_user_text(request)), request
        # A model that takes a moment: runs overlap, the kill lands mid-run.
        return text_reply("Done.", delay=0.02)

    api_env.responder = respond  # type: ignore[assignment]

    def asked() -> dict[int, list[str]]:
        """Task number -> the API keys (daemons) that asked the model about it."""
        seen: dict[int, list[str]] = {}
        for request in api_env.requests:
            match = TASK_RE.search(last_user_text(request.body))
            assert match is not None
            seen.setdefault(int(match.group(1)), []).append(key_of(request))
        return seen

    remote = seed_remote(tmp_path, lease=LEASE)
    daemons = [clone(remote, tmp_path / f"d{i}") for i in (1, 2, 3)]
    writer = clone(remote, tmp_path / "writer")
    pids: dict[str, int] = {}
    try:
        for ws in daemons:
            pids[ws.name] = start_daemon(ws, f"key-{ws.name}")

        for number in range(CONVERSATIONS):
            conv = writer / "conversations" / f"t-{number:03d}"
            conv.mkdir(parents=True)
            (conv / "task.md").write_text(f"# Task {number}\n\nSay hello.\n", encoding="utf-8")
        jpfs(writer, "sync")

        # Kill one daemon once about a third of the turns have been asked for.
        wait_until(
            lambda: len(api_env.requests) >= CONVERSATIONS // 3,
            timeout=300,
            message="a third of the turns to start",
        )
        os.kill(pids["d1"], signal.SIGKILL)
        # What the dead daemon asked the model about but never pushed: the only turns
        # that may be asked again (by whoever takes its lease over).
        pushed = {
            int(line.split("/")[0].removeprefix("t-"))
            for line in git(remote, "ls-tree", "-r", "--name-only", "jpfs-record").splitlines()
            if line.endswith("/result.md")
        }
        unpushed_by_d1 = {n for n, keys in asked().items() if "key-d1" in keys} - pushed
        keys_at_kill = Counter(key_of(r) for r in api_env.requests)
        assert keys_at_kill["key-d1"] > 0, keys_at_kill  # d1 did take a share of the work

        def all_done() -> bool:
            jpfs(writer, "sync")
            return len(results_at(writer)) == CONVERSATIONS

        wait_until(all_done, timeout=600, interval=0.5, message="every conversation to finish")

        survivors = daemons[1:]
        shown = jpfs_subprocess("daemon", "status", cwd=survivors[0]).stdout
        assert re.search(r"^sync: origin as \S+; \d+ lease\(s\) held", shown, re.M), shown
        for ws in survivors:  # everything pushed and merged: no lag left
            wait_until(lambda ws=ws: status(ws)["sync"]["ahead"] == 0, timeout=30)  # type: ignore[index]
        takeovers = sum(int(status(ws).get("sync", {}).get("takeovers", 0)) for ws in survivors)  # type: ignore[union-attr]
        for ws in survivors:
            stop_daemon(ws)

        # Each turn reached the provider once; a turn the killed daemon had in flight may
        # have been asked again by the daemon that took its lease over, never more.
        by_key = Counter(key_of(r) for r in api_env.requests)
        assert by_key["key-d2"] > 0 and by_key["key-d3"] > 0, by_key
        seen = asked()
        assert set(seen) == set(range(CONVERSATIONS))
        twice = {n: keys for n, keys in seen.items() if len(keys) > 1}
        for number, keys in twice.items():
            assert len(keys) == 2 and keys[0] == "key-d1" and keys[1] != "key-d1", (number, keys)
        assert set(twice) <= unpushed_by_d1, (twice, unpushed_by_d1)
        if twice:
            assert takeovers >= 1
        # The record holds each turn once: one assistant event per conversation, everywhere.
        jpfs(writer, "sync")
        for number in range(CONVERSATIONS):
            assert assistant_turns(writer, number) == 1, number
        for path in [*daemons, writer, remote]:  # the SIGKILLed clone too
            fsck(path)
    finally:
        for ws in daemons:
            stop_daemon(ws)
