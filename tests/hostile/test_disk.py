"""A full disk: the daemon stays up, says so, leaves nothing half-written, and carries on
once there is room again. The workspace lives on a small tmpfs of its own."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import (
    assert_fsck_clean,
    git,
    jpfs_subprocess,
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


def test_a_full_disk_is_reported_and_survived(
    small_disk: Path, api_env: MessagesServer, cli
) -> None:  # type: ignore[no-untyped-def]
    ws = small_disk / "repo"
    ws.mkdir()
    # Machine-local state (daemon status and log) on another disk, so the daemon can
    # say what happened while the repository's disk is full.
    local = small_disk.parent / "local"
    local.mkdir()
    (ws / ".jpfs").mkdir()
    (ws / ".jpfs" / "local").symlink_to(local)
    git(ws, "init", "-q", "-b", "main")
    git(ws, "commit", "-q", "--allow-empty", "-m", "initial")
    assert cli("init", cwd=ws).code == 0
    write_profile(ws, "careful", AGENT)
    for key, value in (
        ("conversations.default_agent", '"careful"'),
        ("agents.allowed", '["careful"]'),
        ("daemon.scan_interval", "1"),
    ):
        assert cli("config", "set", key, value, cwd=ws).code == 0
    api_env.responder = lambda req: text_reply("echo: " + last_user_text(req)[:40])
    with running_daemon(ws):
        conv = ws / "conversations" / "full"
        conv.mkdir()
        filler = fill(small_disk)
        try:
            (conv / "task.md").write_text("Say hello.\n", encoding="utf-8")
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
            os.truncate(filler, max(0, filler.stat().st_size - 8192))
            (conv / "task.md").write_text("Say hello.\n", encoding="utf-8")
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
