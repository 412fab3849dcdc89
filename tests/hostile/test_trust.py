"""Profiles that run local programs run only once trusted (a clone's profiles are not)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from tests.conftest import Result, git, running_daemon, write_profile
from tests.hostile.conftest import start_conversation, wait_error, wait_result

RUNNER = """
model = "script-runner"
provider = "script"
[tools]
allow = ["touch"]
[[tools.command]]
name = "touch"
description = "Leave a mark."
program = "touch"
args = ["{pwned}"]
[onboarding]
enabled = false
[[script.turns]]
tool_calls = [{{ name = "touch", input = {{}} }}]
[[script.turns]]
text = "ran it"
"""


def test_a_cloned_profile_that_runs_programs_waits_for_trust(
    hostile_ws: Path, cli: Callable[..., Result], tmp_path: Path
) -> None:
    pwned = tmp_path / "PWNED"
    write_profile(hostile_ws, "runner", RUNNER.format(pwned=pwned))
    from jpfs.core.config import set_in_file

    set_in_file(hostile_ws / ".jpfs" / "config.toml", "agents.allowed", '["careful", "runner"]')
    git(hostile_ws, "add", "-A")
    git(hostile_ws, "commit", "-q", "-m", "profiles, as a clone brings them")
    listed = json.loads(cli("trust", "--list", "--format", "json").stdout)
    assert {"name": "runner", "runs_programs": True, "trusted": False, "changed": False} in listed
    assert next(r for r in listed if r["name"] == "careful")["trusted"] is True
    with running_daemon(hostile_ws):
        start_conversation(hostile_ws, "run", "Run it.\n", agent="runner")
        error = wait_error(hostile_ws, "run", "not trusted")
        assert "jpfs trust" in error and not pwned.exists()
        assert cli("trust").code == 0
        sent = cli("mail", "send", "run", "Trusted now: go on.")  # new input, as the error says
        assert sent.code == 0, sent.stderr
        assert "ran it" in wait_result(hostile_ws, "run")
        assert pwned.exists()
        # A change (a pull) needs trusting again.
        profile = hostile_ws / ".jpfs" / "agents" / "runner.toml"
        profile.write_text(profile.read_text() + "\n# changed upstream\n", encoding="utf-8")
        shown = cli("trust", "--list")
        assert "changed: run `jpfs trust`" in shown.stdout
