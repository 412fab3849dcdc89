"""Patterns from agents cannot stall anything: RE2 matches in linear time."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from jpfs.errors import ToolError
from jpfs.infra.safescan import grep
from tests.conftest import git, running_daemon, write_profile
from tests.hostile.conftest import start_conversation, wait_result

GREPPER = """
model = "script-grep"
provider = "script"
[tools]
allow = ["fs_grep_files"]
[onboarding]
enabled = false
[[script.turns]]
text = "Searching."
tool_calls = [{ name = "fs_grep_files", input = { pattern = "(a+)+$", regex = true, path = "big.txt" } }]
[[script.turns]]
text = "Searched: {results}"
"""


def test_a_catastrophic_pattern_returns_at_once(tmp_path: Path) -> None:
    (tmp_path / "big.txt").write_text("a" * 200_000 + "b\n", encoding="utf-8")
    started = time.monotonic()
    result = grep(tmp_path, "(a+)+$", "big.txt", regex=True)
    assert result.total == 0
    assert time.monotonic() - started < 2.0


@pytest.mark.parametrize("pattern", [r"(a)\1", r"(?=a)b", "(unclosed"])
def test_patterns_re2_cannot_run_are_refused_with_a_reason(tmp_path: Path, pattern: str) -> None:
    (tmp_path / "f.txt").write_text("aa\n", encoding="utf-8")
    with pytest.raises(ToolError, match="RE2"):
        grep(tmp_path, pattern, "f.txt", regex=True)


def test_an_agents_catastrophic_grep_does_not_stop_the_daemon(hostile_ws: Path) -> None:
    write_profile(hostile_ws, "grepper", GREPPER)
    (hostile_ws / "big.txt").write_text("a" * 200_000 + "b\n", encoding="utf-8")
    git(hostile_ws, "add", "-A")
    git(hostile_ws, "commit", "-q", "-m", "grepper")
    start_conversation(hostile_ws, "grep", "Search it.\n", agent="grepper")
    from jpfs.core.config import set_in_file

    set_in_file(hostile_ws / ".jpfs" / "config.toml", "agents.allowed", '["careful", "grepper"]')
    with running_daemon(hostile_ws):
        start_conversation(hostile_ws, "neighbour")
        assert "echo: Say hello." in wait_result(hostile_ws, "neighbour", timeout=20)
        assert "Searched:" in wait_result(hostile_ws, "grep", timeout=20)
