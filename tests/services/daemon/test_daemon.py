"""The daemon as users run it: a separate process on a real repo, driven only by files
(and, in process, with a bug put in its housekeeping)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from jpfs.core.locks import is_locked
from tests.conftest import (
    git,
    jpfs_subprocess,
    no_thread_leak,
    process_alive,
    rgit,
    wait_until,
)
from tests.services.daemon.test_daemon_helpers import (
    DaemonProc,
    daemon_proc_fixture,
    fsck,
    leftovers,
    log_lines,
    roles,
    serving,
    setup_workspace,
    started_fixture,
    state_of,
    status,
    write_in_place,
    write_renamed,
    write_vim,
)


@pytest.fixture
def started(ws: Path) -> Iterator[Path]:
    yield from started_fixture(ws)


@pytest.fixture
def daemon_proc(ws: Path) -> Iterator[DaemonProc]:
    yield from daemon_proc_fixture(ws)


def start(ws: Path) -> int:
    proc = jpfs_subprocess("daemon", "start", cwd=ws)
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout.strip())


def test_one_daemon_per_workspace_and_a_stale_pid_file_never_blocks(started: Path) -> None:
    ws = started
    pid = start(ws)
    shown = jpfs_subprocess("daemon", "status", "--format", "json", cwd=ws)
    info = json.loads(shown.stdout)
    assert info["running"] is True and info["pid"] == pid and info["ready"] is True
    # Ready as soon as it watches; the look at what changed while stopped follows.
    wait_until(
        lambda: (
            json.loads(jpfs_subprocess("daemon", "status", "--format", "json", cwd=ws).stdout)[
                "catching_up"
            ]
            is False
        ),
        message="the daemon caught up",
    )
    info = json.loads(jpfs_subprocess("daemon", "status", "--format", "json", cwd=ws).stdout)
    assert info["agents_running"] == 0 and info["queue"] == 0 and info["last_error"] is None
    assert info["uptime"] >= 0

    again = jpfs_subprocess("daemon", "start", cwd=ws)
    assert again.returncode == 1
    assert "already running" in again.stderr and str(pid) in again.stderr

    text = jpfs_subprocess("daemon", "status", cwd=ws)
    assert text.returncode == 0 and f"pid {pid}" in text.stdout

    stop = jpfs_subprocess("daemon", "stop", cwd=ws)
    assert stop.returncode == 0, stop.stderr
    assert not process_alive(pid)  # gone when stop returns, not only its lock
    gone = jpfs_subprocess("daemon", "status", cwd=ws)
    assert gone.returncode == 1 and gone.stdout.strip() == "not running"

    # A daemon killed with SIGKILL leaves its pid file behind; it must not matter.
    pid2 = start(ws)
    os.kill(pid2, signal.SIGKILL)
    wait_until(lambda: not status(ws)["running"], message="the killed daemon to be gone")
    assert (ws / ".jpfs/local/daemon.pid").read_text().strip() == str(pid2)
    pid3 = start(ws)
    assert pid3 != pid2 and status(ws)["pid"] == pid3


def test_onboarding_round_trip_driven_by_editor_saves(started: Path) -> None:
    ws = started
    setup_workspace(ws, default_agent="lead")
    user_head = git(ws, "rev-parse", "HEAD")
    start(ws)
    conv = ws / "conversations" / "r1"
    # A new directory and a save-by-rename: the watch on the directory comes after the write.
    write_renamed(conv / "task.md", "# Review the code\n\nFind what matters.\n")
    wait_until(lambda: state_of(ws, "r1") == "waiting", message="onboarding questions")
    # A human answers after the run that asked has ended, not within its last millisecond
    # (an answer written then is taken by that run and committed with its next step).
    wait_until(lambda: not is_locked(ws / ".jpfs/local", "r1"), message="the run to end")
    assert "Which part of the code matters?" in (conv / "questions.md").read_text()
    meta = (conv / "conversation.toml").read_text()
    assert 'agent = "lead"' in meta and 'title = "Review the code"' in meta

    write_vim(conv / "answers.md", "# Answers\n\n## Round 1\n\nThe parser.\n")
    wait_until(lambda: state_of(ws, "r1") == "idle", timeout=20, message="the run to finish")
    wait_until(lambda: not rgit(ws, "status", "--porcelain"), message="clean")

    children = [p for p in conv.iterdir() if p.is_dir() and p.name.startswith("c-")]
    assert len(children) == 1, children
    child = children[0]
    assert roles(conv) == ["user", "assistant", "tool", "assistant"]
    assert roles(child) == ["user", "assistant"]
    assert state_of(ws, f"r1/{child.name}") == "idle"
    result = (conv / "result.md").read_text()
    assert "Final answer." in result and "Helper says hello." in result

    history = log_lines(ws, "r1")
    subjects = [line.split("|", 1)[1] for line in history]
    # The human's input is committed (as the user) before the agent reacts to it.
    assert subjects.index("jpfs(r1): task") < subjects.index("jpfs(r1): questions")
    assert subjects.index("jpfs(r1): questions") < subjects.index("jpfs(r1): answers")
    assert subjects.index("jpfs(r1): answers") < subjects.index("jpfs(r1): ready")
    assert subjects[-1] == "jpfs(r1): result"
    first = rgit(ws, "log", "--reverse", "--format=%H", "--", "r1").split()[0]
    files = rgit(ws, "show", "--name-only", "--format=", first).split()
    assert files == ["r1/conversation.toml", "r1/task.md"]
    authors = dict(reversed([line.split("|", 1)[::-1] for line in history]))
    assert authors["jpfs(r1): task"] == "Test User"
    assert authors["jpfs(r1): answers"] == "Test User"
    # Editors' files never reach a commit; nothing is left uncommitted or half-written.
    tracked = rgit(ws, "ls-files").splitlines()
    assert not [p for p in tracked if p.endswith((".swp", "~", "4913", ".tmp"))], tracked
    assert leftovers(ws) == []
    # All of it is on the record: the user's branch and index got nothing.
    assert git(ws, "rev-parse", "HEAD") == user_head
    assert git(ws, "status", "--porcelain", "--untracked-files=no") == ""
    assert git(ws, "ls-files", "conversations") == ""
    fsck(ws)


def test_errors_stay_in_their_conversation(started: Path) -> None:
    ws = started
    setup_workspace(ws, default_agent="lead", cfg={"daemon.log_max_bytes": "600"})
    root = ws / "conversations"
    for name in ("bad", "boom", "good"):
        (root / name).mkdir(parents=True)
    start(ws)
    write_in_place(root / "bad" / "conversation.toml", 'agent = "lead\n')
    write_in_place(root / "bad" / "task.md", "Never runs.\n")
    write_in_place(root / "boom" / "conversation.toml", 'agent = "failing"\n')
    write_in_place(root / "boom" / "task.md", "Fails at the provider.\n")
    write_in_place(root / "good" / "task.md", "Works.\n")

    wait_until(lambda: roles(root / "bad") == ["error"], message="bad's error event")
    text = next((root / "bad" / "events").iterdir()).read_text()
    assert "malformed TOML" in text
    boom_toml = root / "boom" / "conversation.toml"
    wait_until(lambda: 'status = "failed"' in boom_toml.read_text(), message="boom to fail")
    assert state_of(ws, "boom") == "failed" and roles(root / "boom") == ["user", "error"]
    assert "model is unavailable" in (root / "boom" / "events" / "0002-error.md").read_text()
    wait_until(lambda: state_of(ws, "good") == "waiting", message="good to be served")
    info = wait_until(lambda: (d := status(ws))["last_error"] and d, message="last_error")
    assert isinstance(info, dict) and info["running"] is True
    logs = sorted((ws / ".jpfs/local").glob("daemon.log*"))
    assert [p.name for p in logs][:2] == ["daemon.log", "daemon.log.1"]  # rotated at 600 bytes
    log = "".join(p.read_text() for p in logs)
    assert "bad: " in log and "malformed TOML" in log
    # A rescan (SIGHUP) finds the same broken file and does not record it twice.
    os.kill(int(info["pid"]), signal.SIGHUP)
    wait_until(lambda: status(ws)["scans"] >= 2, message="the rescan")
    assert roles(root / "bad") == ["error"]


def test_stop_lets_the_step_finish_and_force_interrupts_it(daemon_proc: DaemonProc) -> None:
    ws = daemon_proc.ws
    # Each model turn takes 2.5 s: the window in which the stops below must land, wide
    # enough for a loaded machine (the status file that says a call started lags it).
    setup_workspace(ws, default_agent="worker", delay=2.5)
    conv = ws / "conversations" / "w"
    conv.mkdir(parents=True)
    daemon_proc.start()
    write_in_place(conv / "task.md", "Work slowly.\n")
    # Stop while the first model turn is in flight.
    wait_until(lambda: provider_calls(ws) == 1, message="the first model call")
    assert daemon_proc.terminate() == 0
    assert roles(conv) == ["user", "assistant"]  # the step in flight was finished...
    assert not rgit(ws, "status", "--porcelain")  # ...and committed
    assert leftovers(ws) == []

    # Restarted, it carries on from the files; then a forced stop interrupts the call.
    daemon_proc.start()
    child = wait_until(
        lambda: [p for p in conv.iterdir() if p.is_dir() and p.name.startswith("c-")],
        message="the helper child",
    )
    assert isinstance(child, list)
    wait_until(lambda: provider_calls(ws) == 1, message="the helper's model call")
    assert daemon_proc.proc is not None
    daemon_proc.proc.send_signal(signal.SIGTERM)
    daemon_proc.proc.send_signal(signal.SIGINT)
    assert daemon_proc.proc.wait(10) == 0
    assert roles(child[0]) == ["user"]  # the interrupted reply was never written
    assert roles(conv) == ["user", "assistant"]
    assert not rgit(ws, "status", "--porcelain")

    daemon_proc.start()
    wait_until(lambda: state_of(ws, "w") == "idle", timeout=20, message="the run to finish")
    assert roles(conv) == ["user", "assistant", "tool", "assistant"]
    assert roles(child[0]) == ["user", "assistant"]
    assert len([p for p in conv.iterdir() if p.is_dir() and p.name.startswith("c-")]) == 1


def test_user_work_in_the_same_repo_is_never_lost_or_swept_in(daemon_proc: DaemonProc) -> None:
    ws = daemon_proc.ws
    setup_workspace(ws, default_agent="worker", delay=0.05)
    before = git(ws, "rev-parse", "HEAD").strip()
    daemon_proc.start()
    root = ws / "conversations"
    for n in range(6):
        write_renamed(root / f"job{n}" / "task.md", f"Job {n}.\n")

    src = ws / "src"
    src.mkdir()
    mine: list[str] = []
    for n in range(6):
        (src / f"mod{n}.py").write_text(f"VALUE = {n}\n")
        (ws / "README.md").write_text(f"# project, revision {n}\n")
        # jpfs never takes the user's index.lock: no retry is ever needed.
        commit_as_user(ws, n)
        mine.append(git(ws, "rev-parse", "HEAD").strip())
    (ws / "staged.txt").write_text("staged, not committed\n")
    git(ws, "add", "staged.txt")
    assert "staged.txt" in git(ws, "diff", "--cached", "--name-only")
    (ws / "README.md").write_text("# unstaged edit\n")

    wait_until(
        lambda: all(state_of(ws, f"job{n}") == "idle" for n in range(6)),
        timeout=30,
        message="all jobs to finish",
    )
    assert daemon_proc.terminate() == 0
    for sha in mine:
        assert (
            subprocess.run(
                ["git", "merge-base", "--is-ancestor", sha, "HEAD"], cwd=ws, check=False
            ).returncode
            == 0
        ), f"user commit {sha} was lost"
    assert git(ws, "show", "HEAD:README.md") == "# project, revision 5\n"
    assert git(ws, "show", "HEAD:src/mod5.py") == "VALUE = 5\n"
    assert (ws / "README.md").read_text() == "# unstaged edit\n"
    assert git(ws, "diff", "--cached", "--name-only").split() == ["staged.txt"]
    assert git(ws, "diff", "--name-only").split() == ["README.md"]
    # The daemon committed nothing on the user's branch: its commits are on the record.
    subjects = git(ws, "log", "--format=%s", f"{before}..HEAD").splitlines()
    assert subjects == [f"user {n}" for n in reversed(range(6))]
    assert all(state_of(ws, f"job{n}") == "idle" for n in range(6))
    assert "jpfs(job5): result" in rgit(ws, "log", "--format=%B", "--", "job5")
    fsck(ws)


def provider_calls(ws: Path) -> int:
    try:
        data = json.loads((ws / ".jpfs/local/daemon.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return 0
    return sum(int(a["provider_calls"]) for a in data.get("agents", []))


def commit_as_user(ws: Path, n: int) -> None:
    for argv in (["add", "README.md", f"src/mod{n}.py"], ["commit", "-q", "-m", f"user {n}"]):
        proc = subprocess.run(["git", *argv], cwd=ws, capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stderr


def test_mail_from_the_caller_continues_an_idle_conversation(daemon_proc: DaemonProc) -> None:
    ws = daemon_proc.ws
    setup_workspace(ws, default_agent="helper")
    conv = ws / "conversations" / "h"
    conv.mkdir(parents=True)
    daemon_proc.start()
    write_in_place(conv / "task.md", "Say hello.\n")
    wait_until(lambda: state_of(ws, "h") == "idle", message="the first run")
    sent = jpfs_subprocess("mail", "send", "h", "Once more, please.", "--no-start", cwd=ws)
    assert sent.returncode == 0, sent.stderr
    wait_until(lambda: roles(conv) == ["user", "assistant"] * 2, message="the mail's run")
    wait_until(lambda: state_of(ws, "h") == "idle", message="idle again")
    assert "Once more, please." in (conv / "events" / "0003-user.md").read_text()


def test_a_conversation_removed_while_it_runs_stays_removed(daemon_proc: DaemonProc) -> None:
    ws = daemon_proc.ws
    setup_workspace(ws, default_agent="helper", delay=1.5)
    root = ws / "conversations"
    daemon_proc.start()
    (root / "gone").mkdir(parents=True)
    write_in_place(root / "gone" / "task.md", "Take your time.\n")
    log = ws / ".jpfs/local/daemon.log"
    wait_until(lambda: "[gone] model turn" in log.read_text(), message="the model turn")
    shutil.rmtree(root / "gone")  # a person deletes it while the model is answering
    wait_until(
        lambda: "gone: removed while it ran" in log.read_text(), timeout=30, message="the log"
    )
    # Nothing brought it back (a result.md alone, an error event), and its removal is
    # committed like any other edit; the daemon goes on with other work.
    (root / "kept").mkdir()
    write_in_place(root / "kept" / "task.md", "Say hello.\n")
    wait_until(lambda: state_of(ws, "kept") == "idle", timeout=30, message="kept's run")
    assert not (root / "gone").exists()
    wait_until(
        lambda: rgit(ws, "ls-tree", "--name-only", "HEAD", "gone") == "",
        timeout=30,
        message="the removal committed",
    )
    assert "run crashed" not in log.read_text()


def test_housekeeping_that_raises_never_stops_the_daemon(
    ws: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """In process, with a bug put in its housekeeping (the notes' check raises, then
    works, then raises again): the daemon goes on serving conversations, and logs each
    streak of failures once, with its traceback (Daemon.tick)."""
    from jpfs.core.workspace import open_workspace
    from jpfs.services.daemon.service import Daemon

    setup_workspace(ws, default_agent="lead")
    failing = threading.Event()
    failing.set()
    calls = {"failed": 0, "worked": 0}
    with no_thread_leak():
        daemon = Daemon(open_workspace(ws))
        poll = daemon.notes_watch.poll

        def buggy() -> None:
            if failing.is_set():
                calls["failed"] += 1
                raise RuntimeError("a bug in housekeeping")
            poll()
            calls["worked"] += 1

        daemon.notes_watch.poll = buggy  # type: ignore[method-assign]
        with serving(daemon):
            assert daemon.ready.wait(20)
            wait_until(lambda: calls["failed"] >= 3, message="three ticks failing")
            (ws / "conversations" / "x").mkdir()
            write_in_place(ws / "conversations" / "x" / "task.md", "Hello.\n")
            wait_until(lambda: state_of(ws, "x") == "waiting", message="x's questions")
            failing.clear()
            done = calls["failed"]
            # The tick that worked ends before the next one begins (one thread).
            wait_until(lambda: calls["worked"] >= 1, message="a tick that works")
            failing.set()
            wait_until(lambda: calls["failed"] > done, message="failing again")
    said = [r for r in caplog.records if "housekeeping failed" in r.getMessage()]
    assert len(said) == 2  # one per streak, not one per tick
    assert all(r.exc_info is not None for r in said)
