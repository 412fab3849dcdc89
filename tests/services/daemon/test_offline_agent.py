"""The README's daemon steps without an API key: the error says how to go offline, a
conversation that has not worked takes another agent, and the stale error clears."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import jpfs_subprocess, wait_until
from tests.hostile.conftest import wait_error, wait_result

NO_KEY = {"ANTHROPIC_API_KEY": "", "ANTHROPIC_BASE_URL": "http://127.0.0.1:9"}


def status(ws: Path) -> dict[str, object]:
    shown = jpfs_subprocess("daemon", "status", "--format", "json", cwd=ws)
    data: dict[str, object] = json.loads(shown.stdout)
    return data


def test_no_api_key_then_the_demo_agent_then_a_clean_status(ws: Path) -> None:
    started = jpfs_subprocess("daemon", "start", cwd=ws, env=NO_KEY)
    assert started.returncode == 0, started.stderr
    try:
        conv = ws / "conversations" / "refactor"
        conv.mkdir()
        (conv / "task.md").write_text("Refactor the billing module.\n", encoding="utf-8")
        error = wait_error(ws, "refactor", "ANTHROPIC_API_KEY is not set")
        assert "jpfs c set-agent ID demo" in error
        wait_until(
            lambda: (status(ws)["last_error"] or {}).get("conversation") == "refactor",  # type: ignore[attr-defined]
            message="daemon status to name the conversation",
        )

        refused = jpfs_subprocess("c", "set-agent", "refactor", "nobody", cwd=ws)
        assert refused.returncode == 1 and "not in agents.allowed" in refused.stderr
        switched = jpfs_subprocess("c", "set-agent", "refactor", "demo", cwd=ws)
        assert switched.returncode == 0, switched.stderr
        assert "`jpfs retry refactor` runs it" in switched.stderr
        assert 'agent = "demo"' in (conv / "conversation.toml").read_text(encoding="utf-8")
        assert jpfs_subprocess("retry", "refactor", cwd=ws).returncode == 0
        assert wait_result(ws, "refactor")
        wait_until(lambda: status(ws)["last_error"] is None, message="the stale error cleared")

        # Once it has worked, its agent stays.
        again = jpfs_subprocess("c", "set-agent", "refactor", "default", cwd=ws)
        assert again.returncode == 1 and "has begun work" in again.stderr
    finally:
        jpfs_subprocess("daemon", "stop", "--force", "--timeout", "20", cwd=ws)
    assert status(ws)["running"] is False
