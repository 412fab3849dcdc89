"""A conversation whose own files refuse its error (a committed link where ``events/``
should be, ``events`` a plain file) is not stuck in silence: on a busy daemon, within
5 s, ``jpfs tree`` and ``jpfs c show`` read it failed with the reason, ``daemon status``
names it and ``jpfs doctor`` fails it; it is not run again; once mended it runs to its
result. Writing the error into it is tried again a few times, then no more."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

from jpfs.core import failures
from jpfs.core.conversation import Conversation
from jpfs.core.workspace import open_workspace
from jpfs.errors import FormatError
from jpfs.services.daemon.unrecorded import Unrecorded
from tests.conftest import Result, daemon_pid, rgit, running_daemon, wait_until
from tests.hostile.conftest import (
    BUSY,
    assert_healthy,
    busy,
    start_conversation,
    status,
    wait_result,
)
from tests.messages_server import MessagesServer


def shown_failed(ws: Path, cli: Callable[..., Result], conv_id: str, reason: str) -> bool:
    """``tree``, ``c show`` and ``daemon status`` all say ``conv_id`` failed, and why."""
    rows = {r["id"]: r for r in json.loads(cli("tree", "--format", "json").stdout)}
    row = rows.get(conv_id) or {}
    if row.get("state") != "failed" or reason not in str(row.get("last")):
        return False
    shown = cli("c", "show", conv_id, "--format", "json")
    details = json.loads(shown.stdout) if shown.code == 0 else {}
    if details.get("status") != "failed" or reason not in str(details.get("error")):
        return False
    kept = status(ws).get("unrecorded") or []
    return any(k["conversation"] == conv_id and reason in k["message"] for k in kept)


def runs_of(ws: Path, conv_id: str) -> int:
    log = (ws / ".jpfs" / "local" / "daemon.log").read_text(encoding="utf-8", errors="replace")
    return log.count(f"{conv_id}: run starts")


def rescan(ws: Path) -> None:
    """A full scan by the daemon (SIGHUP), waited for."""
    before = status(ws)["scans"]
    pid = daemon_pid(ws)
    assert pid is not None
    os.kill(pid, signal.SIGHUP)
    wait_until(lambda: status(ws)["scans"] > before, timeout=20, message="a rescan")


def test_a_committed_link_for_events_is_said_everywhere_and_mending_it_runs(
    hostile_ws: Path, gate: threading.Event, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    ws = hostile_ws
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    conv = start_conversation(ws, "stuck", "Say hello.\n")
    (conv / "events").symlink_to(outside)
    rgit(ws, "add", "-A")
    rgit(ws, "commit", "-q", "-m", "a clone brings a link")  # as a clone would have it
    with running_daemon(ws):
        started = time.monotonic()
        busy(ws)
        wait_until(
            lambda: shown_failed(ws, cli, "stuck", "beyond a symbolic link"),
            timeout=max(0.5, 5 - (time.monotonic() - started)),
            message="the failure in tree, c show and daemon status",
        )
        doctor = cli("doctor", "--format", "json")
        checks = {c["name"]: c for c in json.loads(doctor.stdout)}
        assert checks["conversation stuck"]["status"] == "fail"
        assert "jpfs retry stuck" in checks["conversation stuck"]["fix"]
        rescan(ws)
        assert runs_of(ws, "stuck") == 1  # failed, so not run again
        assert list(outside.iterdir()) == []  # nothing written through the link
        gate.set()
        (conv / "events").unlink()
        (conv / "events").mkdir()
        assert "echo: Say hello." in wait_result(ws, "stuck")
        wait_until(lambda: not status(ws)["unrecorded"], timeout=5, message="status clear")
        assert not any((ws / ".jpfs" / "local" / failures.DIR).iterdir())
        assert_healthy(ws)


def test_events_as_a_plain_file_on_a_busy_daemon_is_failed_within_5_s(
    hostile_ws: Path, gate: threading.Event, api_env: MessagesServer, cli: Callable[..., Result]
) -> None:
    ws = hostile_ws
    with running_daemon(ws):
        busy(ws)
        conv = ws / "conversations" / "broken"
        conv.mkdir()
        (conv / "events").write_text("not a directory\n", encoding="utf-8")
        (conv / "task.md").write_text("Write the report.\n", encoding="utf-8")
        written = time.monotonic()
        wait_until(
            lambda: shown_failed(ws, cli, "broken", "is not a directory"),
            timeout=5,
            message="the failure in tree, c show and daemon status",
        )
        took = time.monotonic() - written
        assert took < 5, took
        rescan(ws)
        assert runs_of(ws, "broken") == 1
        assert not [r for r in api_env.requests if "Write the report" in r.raw.decode()]
        assert "broken" in cli("daemon", "status").stdout
        gate.set()
        for n in range(BUSY):
            wait_result(ws, f"busy{n}")  # the others were served meanwhile
        # Mended: its files changed, so the kept failure is over and the run goes on.
        (conv / "events").unlink()
        (conv / "events").mkdir()
        wait_until(lambda: not failures.every(ws / ".jpfs" / "local", ws / "conversations"))
        assert "echo: Write the report." in wait_result(ws, "broken")
        assert_healthy(ws)


def test_writing_the_error_is_tried_again_a_few_times_then_no_more(
    ws: Path, cli: Callable[..., Result], tmp_path: Path
) -> None:
    assert cli("c", "new", "stuck", "--no-activate").code == 0
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (ws / "conversations" / "stuck" / "events").symlink_to(outside)
    w = open_workspace(ws)
    conv = Conversation(w.conv_root, "stuck")
    unrecorded = Unrecorded(w, retries=(0.0, 0.0, 0.0))
    unrecorded.keep(conv, "boom: the run failed", FormatError("events/ leads outside"))
    kept = failures.of(w.local_dir, conv)
    assert kept is not None and "boom" in kept.shown and "leads outside" in kept.shown
    for _ in range(3):
        assert unrecorded.pending() == ["stuck"]
        unrecorded.tick()
    assert unrecorded.pending() == []  # stopped: three tries, then no more
    assert failures.of(w.local_dir, conv) is not None  # still shown failed
    assert list(outside.iterdir()) == []
    # `jpfs retry` takes a kept failure: it is forgotten and the conversation mailed.
    done = cli("retry", "stuck", "--no-start")
    assert done.code == 0, done.stderr
    assert failures.of(w.local_dir, conv) is None
