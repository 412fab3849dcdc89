"""Broken configuration and unknown agents: reported where the user looks, never a dead end."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import jpfs_subprocess
from tests.hostile.conftest import assert_healthy, start_conversation, wait_error, wait_result


def test_daemon_control_works_whatever_the_config_says(daemon: Path) -> None:
    config = daemon / ".jpfs" / "config.toml"
    good = config.read_text(encoding="utf-8")
    config.write_text(good + "\nbroken = [\n", encoding="utf-8")
    status = jpfs_subprocess("daemon", "status", "--format", "json", cwd=daemon)
    assert status.returncode == 0, status.stderr
    data = json.loads(status.stdout)
    assert data["running"] is True and "malformed TOML" in data["config_error"]
    text = jpfs_subprocess("daemon", "status", cwd=daemon)
    assert "config error:" in text.stdout
    # The running daemon keeps serving with the configuration it read.
    start_conversation(daemon, "still-served")
    assert "echo: Say hello." in wait_result(daemon, "still-served")
    stopped = jpfs_subprocess("daemon", "stop", "--timeout", "20", cwd=daemon)
    assert stopped.returncode == 0, stopped.stderr
    after = jpfs_subprocess("daemon", "status", cwd=daemon)
    assert after.returncode == 1 and after.stdout.strip() == "not running"
    config.write_text(good, encoding="utf-8")


def test_an_unknown_agent_is_an_error_event_at_once(daemon: Path) -> None:
    conv = daemon / "conversations" / "nobody"
    conv.mkdir()
    (conv / "conversation.toml").write_text('agent = "no-such-agent"\n', encoding="utf-8")
    (conv / "task.md").write_text("Hello?\n", encoding="utf-8")
    # Well before the periodic rescan (30 s): the error is recorded as the task lands.
    error = wait_error(daemon, "nobody", "no-such-agent", timeout=10)
    assert "agents.allowed" in error
    assert_healthy(daemon)


def test_a_broken_record_is_reported_once_however_often_it_is_looked_at(
    hostile_ws: Path,
) -> None:
    from jpfs.core.config import set_in_file
    from tests.conftest import running_daemon, wait_until

    set_in_file(hostile_ws / ".jpfs" / "config.toml", "daemon.scan_interval", "0.2")
    conv = hostile_ws / "conversations" / "broken"
    conv.mkdir()
    (conv / "task.md").write_text("Hello.\n", encoding="utf-8")
    (conv / "conversation.toml").write_text('agent = "careful"\nbroken = [\n', encoding="utf-8")
    with running_daemon(hostile_ws):
        wait_error(hostile_ws, "broken", "malformed TOML")
        status = hostile_ws / ".jpfs" / "local" / "daemon.json"
        first = json.loads(status.read_text(encoding="utf-8")).get("scans", 0)
        # Several periodic scans later (the daemon counts them), still one error event.
        wait_until(
            lambda: json.loads(status.read_text(encoding="utf-8")).get("scans", 0) >= first + 5,
            timeout=20,
            message="five more scans",
        )
    errors = sorted((conv / "events").glob("*-error.md"))
    assert len(errors) == 1, errors


def test_a_broken_profile_is_an_error_event_naming_it_and_others_go_on(
    hostile_ws: Path,
) -> None:
    """A profile that never loaded good here: its conversations get an error naming it."""
    from jpfs.core.config import set_in_file
    from tests.conftest import running_daemon, wait_until

    set_in_file(hostile_ws / ".jpfs" / "config.toml", "agents.allowed", '["careful", "fresh"]')
    profile = hostile_ws / ".jpfs" / "agents" / "fresh.toml"
    good = (hostile_ws / ".jpfs" / "agents" / "careful.toml").read_text(encoding="utf-8")
    profile.write_text(good + "\n[tools\n", encoding="utf-8")
    with running_daemon(hostile_ws):
        start_conversation(hostile_ws, "victim", agent="fresh")
        error = wait_error(hostile_ws, "victim", "fresh.toml", timeout=10)
        assert "Traceback" not in error

        def row() -> dict[str, str]:
            shown = jpfs_subprocess("tree", "--format", "json", cwd=hostile_ws)
            assert shown.returncode == 0, shown.stderr
            found: dict[str, str] = next(r for r in json.loads(shown.stdout) if r["id"] == "victim")
            return found

        # Failed once the daemon let go of it (its lock reads as running until then).
        wait_until(lambda: row()["state"] == "failed", message="victim failed")
        assert "fresh.toml" in row()["last"]
        start_conversation(hostile_ws, "other")  # others go on
        assert "echo:" in wait_result(hostile_ws, "other")
        # The profile mended, the same conversation goes on with new input.
        profile.write_text(good, encoding="utf-8")
        assert jpfs_subprocess("retry", "victim", cwd=hostile_ws).returncode == 0
        assert "echo:" in wait_result(hostile_ws, "victim")
        assert_healthy(hostile_ws)


def test_a_good_profile_broken_later_is_stood_in_for_and_said(daemon: Path) -> None:
    """Once good here, a broken copy (a half-done edit, a conflict) fails nothing: the
    last good copy runs, and `daemon status` and the CLI say what is wrong."""
    profile = daemon / ".jpfs" / "agents" / "careful.toml"
    good = profile.read_text(encoding="utf-8")
    profile.write_text(good + "\n[tools\n", encoding="utf-8")
    try:
        start_conversation(daemon, "served")
        assert "echo: Say hello." in wait_result(daemon, "served")
        shown = jpfs_subprocess("daemon", "status", cwd=daemon)
        assert "policy: .jpfs/agents/careful.toml:" in shown.stdout
        assert "malformed TOML" in shown.stdout and "last good copy stands in" in shown.stdout
        made = jpfs_subprocess("c", "new", "by-hand", "--agent", "careful", cwd=daemon)
        assert made.returncode == 0, made.stderr
        assert "note: .jpfs/agents/careful.toml: " in made.stderr
    finally:
        profile.write_text(good, encoding="utf-8")
    assert_healthy(daemon)
