"""A running daemon takes up edits of the configuration and of profiles, no restart."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import Result, jpfs_subprocess, wait_until
from tests.services.daemon.test_daemon_helpers import setup_workspace, started_fixture, status


@pytest.fixture
def started(ws: Path) -> Iterator[Path]:
    setup_workspace(ws, default_agent="helper", cfg={"daemon.max_agents": "1"})
    yield from started_fixture(ws)
    assert (ws / ".jpfs" / "local" / "daemon.log").exists()


def run_task(ws: Path, conv_id: str, agent: str | None = None) -> str:
    conv = ws / "conversations" / conv_id
    conv.mkdir()
    if agent is not None:
        (conv / "conversation.toml").write_text(f'agent = "{agent}"\n', encoding="utf-8")
    (conv / "task.md").write_text("Go.\n", encoding="utf-8")
    result = conv / "result.md"
    wait_until(result.exists, timeout=30, message=f"{conv_id} to finish")
    return result.read_text(encoding="utf-8")


def last_error(ws: Path) -> str:
    return str((status(ws).get("last_error") or {}).get("message", ""))


def test_config_and_profile_edits_apply_to_a_running_daemon(
    started: Path, cli: Callable[..., Result]
) -> None:
    ws = started
    assert jpfs_subprocess("daemon", "start", cwd=ws).returncode == 0
    wait_until(lambda: status(ws).get("ready"), message="the daemon ready")
    assert status(ws)["max_agents"] == 1

    # A setting: the pool grows without a restart.
    assert cli("config", "set", "daemon.max_agents", "3").code == 0
    wait_until(lambda: status(ws).get("max_agents") == 3, message="max_agents 3 taken up")
    pid = status(ws)["pid"]

    # A setting the runs read: the default agent of new conversations.
    assert cli("config", "set", "conversations.default_agent", '"worker"').code == 0
    wait_until(lambda: "default_agent" in _log(ws), message="the reload logged")
    assert "Worker done." in run_task(ws, "second")

    # A profile edited in place: the next conversation of that agent uses the new text.
    profile = ws / ".jpfs" / "agents" / "helper.toml"
    profile.write_text(
        profile.read_text(encoding="utf-8").replace("Helper says hello.", "Helper, edited."),
        encoding="utf-8",
    )
    assert "Helper, edited." in run_task(ws, "third", agent="helper")

    # A broken file is reported; the previous configuration stays and the daemon serves.
    config = ws / ".jpfs" / "config.toml"
    good = config.read_text(encoding="utf-8")
    config.write_text(good + "\n[daemon\n", encoding="utf-8")
    wait_until(lambda: "previous configuration" in last_error(ws), message="the broken config")
    assert status(ws)["max_agents"] == 3
    assert "Worker done." in run_task(ws, "fourth")
    shown = jpfs_subprocess("daemon", "status", cwd=ws)
    assert shown.returncode == 0 and "running" in shown.stdout

    # A key the daemon cannot change under itself waits for a restart, and says so.
    config.write_text(good, encoding="utf-8")
    assert cli("config", "set", "record.branch", '"another-record"').code == 0
    wait_until(lambda: "next daemon start" in last_error(ws), message="the restart note")
    assert "record.branch" in last_error(ws)
    assert status(ws)["pid"] == pid


def _log(ws: Path) -> str:
    return (ws / ".jpfs" / "local" / "daemon.log").read_text(encoding="utf-8")
