"""Status that tells the truth: what ``daemon status`` says of a file is checked again
when that file changes, not when it is next used. On a busy daemon, a mended profile's
note and a mended config.toml's error are gone within 5 s."""

from __future__ import annotations

import threading
from pathlib import Path

from tests.conftest import running_daemon, wait_until
from tests.hostile.conftest import busy, start_conversation, status, wait_result

PROFILE = ".jpfs/agents/careful.toml"


def test_a_mended_profile_is_no_longer_reported_within_5_s(
    hostile_ws: Path, gate: threading.Event
) -> None:
    ws = hostile_ws
    profile = ws / PROFILE
    good = profile.read_text(encoding="utf-8")
    with running_daemon(ws):
        busy(ws)
        profile.write_text("model = [\n", encoding="utf-8")  # a half-done edit
        # Its next use stands the last good copy in, and says so.
        start_conversation(ws, "meanwhile", "Say hello.\n")
        assert "echo: Say hello." in wait_result(ws, "meanwhile")
        noted = wait_until(lambda: status(ws)["policy"].get(PROFILE), message="the note")
        assert "malformed TOML" in str(noted)
        profile.write_text(good, encoding="utf-8")  # mended; nothing uses it yet
        wait_until(lambda: PROFILE not in status(ws)["policy"], timeout=5, message="no note")
        assert len(status(ws)["agents"]) == 3  # still busy: no run took the note away
        gate.set()


def test_a_mended_config_is_no_longer_reported_within_5_s(
    hostile_ws: Path, gate: threading.Event
) -> None:
    ws = hostile_ws
    config = ws / ".jpfs" / "config.toml"
    good = config.read_text(encoding="utf-8")
    with running_daemon(ws):
        busy(ws)
        config.write_text(good + "\n[daemon\n", encoding="utf-8")

        def error() -> str:
            return str((status(ws).get("last_error") or {}).get("message", ""))

        wait_until(lambda: error().startswith("config: "), timeout=10, message="the error")
        config.write_text(good, encoding="utf-8")
        wait_until(lambda: not error(), timeout=5, message="the error gone")
        gate.set()
