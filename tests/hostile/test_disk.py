"""A full disk: the daemon stays up, says so, leaves nothing half-written, and carries on
once there is room again. The workspace lives on a small tmpfs of its own."""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import (
    assert_fsck_clean,
    daemon_pid,
    git,
    jpfs_subprocess,
    process_alive,
    rgit,
    running_daemon,
    wait_until,
    write_profile,
)
from tests.hostile.conftest import AGENT
from tests.messages_server import MessagesServer, last_user_text, text_reply


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({done.stderr.strip()}): needs root")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path) -> Path:
    """Take every free byte of ``disk``; returns the filler file."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for size in (1 << 20, 65536, 4096, 512, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * size)
    finally:
        os.close(fd)
    return filler


def last_error(ws: Path) -> str:
    status = jpfs_subprocess("daemon", "status", "--format", "json", cwd=ws)
    return str((json.loads(status.stdout).get("last_error") or {}).get("message", ""))


def workspace(ws: Path, cli: Callable[..., Any], *, daemon: bool = True) -> Path:
    """A jpfs workspace in ``ws`` (made here), with an agent and, for ``daemon``, what a
    daemon needs to run a task with it and to look again each second."""
    ws.mkdir(exist_ok=True)
    git(ws, "init", "-q", "-b", "main")
    git(ws, "commit", "-q", "--allow-empty", "-m", "initial")
    assert cli("init", cwd=ws).code == 0
    if not daemon:
        return ws
    write_profile(ws, "careful", AGENT)
    for key, value in (
        ("conversations.default_agent", '"careful"'),
        ("agents.allowed", '["careful"]'),
        ("daemon.scan_interval", "1"),
    ):
        assert cli("config", "set", key, value, cwd=ws).code == 0
    return ws


def write_task(conv: Path, filler: Path) -> None:
    """``task.md`` into ``conv`` on a full disk: room is made for it (8 KiB), then
    taken again."""
    try:
        (conv / "task.md").write_text("Say hello.\n", encoding="utf-8")
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
        os.truncate(filler, max(0, filler.stat().st_size - 8192))
        (conv / "task.md").write_text("Say hello.\n", encoding="utf-8")
        fill(filler.parent)


def test_a_full_disk_is_reported_and_survived(
    small_disk: Path, api_env: MessagesServer, cli: Callable[..., Any]
) -> None:
    ws = small_disk / "repo"
    ws.mkdir()
    # Machine-local state (daemon status and log) on another disk, so the daemon can
    # say what happened while the repository's disk is full.
    local = small_disk.parent / "local"
    local.mkdir()
    (ws / ".jpfs").mkdir()
    (ws / ".jpfs" / "local").symlink_to(local)
    workspace(ws, cli)
    api_env.responder = lambda req: text_reply("echo: " + last_user_text(req)[:40])
    with running_daemon(ws):
        conv = ws / "conversations" / "full"
        conv.mkdir()
        filler = fill(small_disk)
        write_task(conv, filler)
        wait_until(lambda: "space" in last_error(ws).lower(), timeout=20, message="the report")
        # Nothing half-written stays (a write in flight may show its temporary file for
        # a moment while the daemon retries).
        wait_until(
            lambda: not [p for p in ws.rglob("*") if p.name.endswith(".jpfs-tmp")],
            timeout=10,
            message="no temporary file left behind",
        )
        status = jpfs_subprocess("daemon", "status", cwd=ws)
        assert status.returncode == 0 and "running" in status.stdout
        filler.unlink()
        wait_until(lambda: (conv / "result.md").exists(), timeout=30, message="the run, later")
        assert "echo: Say hello." in (conv / "result.md").read_text(encoding="utf-8")
    leftovers = [p for p in ws.rglob("*") if p.name.endswith((".jpfs-tmp", ".lock"))]
    assert leftovers == []
    assert rgit(ws, "status", "--porcelain") == ""
    assert_fsck_clean(ws, "--strict")


def status_age(ws: Path) -> float:
    """Seconds since daemon.json was last written (it is rewritten at least every 2 s
    while the daemon runs; a daemon that stopped removed it: infinity)."""
    try:
        return time.time() - (ws / ".jpfs" / "local" / "daemon.json").stat().st_mtime
    except FileNotFoundError:
        return math.inf


def test_a_full_disk_under_the_daemons_own_files_stops_nothing(
    small_disk: Path, api_env: MessagesServer, cli: Callable[..., Any]
) -> None:
    """All of it on the full disk, ``.jpfs/local`` too, as in a user's clone: the daemon
    cannot write its status, its log, a lock or the conversation, and stays up; once
    there is room again the run is done, not failed, and the status is fresh. (It used
    to die at its first status write, calling the full disk a bug of its own.)"""
    ws = workspace(small_disk / "repo", cli)
    api_env.responder = lambda req: text_reply("echo: " + last_user_text(req)[:40])
    with running_daemon(ws):
        pid = daemon_pid(ws)
        assert pid is not None
        conv = ws / "conversations" / "full"
        conv.mkdir()
        filler = fill(small_disk)
        write_task(conv, filler)
        # Rewritten every 2 s at most while it can be: older than that, a write failed.
        wait_until(lambda: status_age(ws) > 4.5, timeout=30, message="a status write to fail")
        # (A daemon that stops removes daemon.json first.)
        assert process_alive(pid) and status_age(ws) < math.inf, "the daemon stopped"
        freed = time.time()
        filler.unlink()
        wait_until(lambda: (conv / "result.md").exists(), timeout=60, message="the run, later")
        assert "echo: Say hello." in (conv / "result.md").read_text(encoding="utf-8")
        wait_until(lambda: status_age(ws) < time.time() - freed, timeout=10, message="status")
        log = (ws / ".jpfs" / "local" / "daemon.log").read_text(encoding="utf-8")
        assert "daemon.json written again, after" in log
        assert "internal error" not in log and "Traceback" not in log, log[-8000:]
        events = "".join(p.read_text(encoding="utf-8") for p in (conv / "events").iterdir())
        assert "internal error" not in events
    assert not (ws / ".jpfs" / "local" / "jpfs.log").exists()  # no bug was logged
    # The daemon's own lock files stay (flock'd, made once); nothing half-written does,
    # and no git lock.
    local = ws / ".jpfs" / "local"
    leftovers = [
        p
        for p in ws.rglob("*")
        if p.name.endswith(".jpfs-tmp") or (p.name.endswith(".lock") and local not in p.parents)
    ]
    assert leftovers == []
    assert rgit(ws, "status", "--porcelain") == ""
    assert_fsck_clean(ws, "--strict")


def test_a_command_on_a_full_disk_says_what_to_do_in_one_line(
    small_disk: Path, cli: Callable[..., Any]
) -> None:
    """The OS's "no space left" is the machine's, named with what to do (exit 1); never
    "a bug in jpfs" with a traceback log that could not be written anyway."""
    ws = workspace(small_disk / "repo", cli, daemon=False)
    filler = fill(small_disk)
    done = jpfs_subprocess("conversation", "new", "crowded", cwd=ws)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1, done.stderr
    assert lines[0].startswith("jpfs: error: ") and "free some space" in lines[0], lines[0]
    assert not (ws / ".jpfs" / "local" / "jpfs.log").exists()
    filler.unlink()
    assert jpfs_subprocess("conversation", "new", "crowded", cwd=ws).returncode == 0
