"""Misnamed directories and answers without a round heading: visible, never silent."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import jpfs_subprocess, rgit, running_daemon, wait_until
from tests.hostile.conftest import assert_healthy


def last_error(ws: Path) -> str:
    status = jpfs_subprocess("daemon", "status", "--format", "json", cwd=ws)
    error = json.loads(status.stdout).get("last_error") or {}
    return str(error.get("message", ""))


def test_a_directory_that_is_no_conversation_id_is_reported(daemon: Path) -> None:
    bad = daemon / "conversations" / "My Notes"
    bad.mkdir()
    (bad / "task.md").write_text("Not a conversation.\n", encoding="utf-8")
    wait_until(lambda: "My Notes/ is not a conversation" in last_error(daemon), timeout=15)
    assert "Rename the directory" in last_error(daemon)
    # Nothing lost: kept as plain files of the record.
    wait_until(
        lambda: "My Notes/task.md" in rgit(daemon, "ls-tree", "-r", "--name-only", "HEAD"),
        message="the files to be committed",
    )
    assert_healthy(daemon)


def test_a_misnamed_directory_written_while_no_daemon_ran_is_reported_too(
    hostile_ws: Path,
) -> None:
    bad = hostile_ws / "conversations" / "My Notes"
    bad.mkdir()
    (bad / "task.md").write_text("Not a conversation.\n", encoding="utf-8")
    with running_daemon(hostile_ws):
        # Committed by the start-up catch-up, not by a file event: still reported.
        wait_until(lambda: "My Notes/ is not a conversation" in last_error(hostile_ws))
        tree = rgit(hostile_ws, "ls-tree", "-r", "--name-only", "HEAD")
        assert "My Notes/task.md" in tree


ASKER = """
model = "script-asker"
provider = "script"
[onboarding]
enabled = true
max_rounds = 2
[[script.onboarding]]
questions = ["Which file?"]
[[script.turns]]
text = "Done."
"""


def test_answers_without_a_round_heading_are_reported(hostile_ws: Path) -> None:
    from jpfs.core.config import set_in_file
    from tests.conftest import git, write_profile

    write_profile(hostile_ws, "asker", ASKER)
    set_in_file(hostile_ws / ".jpfs" / "config.toml", "agents.allowed", '["careful", "asker"]')
    git(hostile_ws, "add", "-A", ".jpfs")
    git(hostile_ws, "commit", "-q", "-m", "asker")
    with running_daemon(hostile_ws):
        conv = hostile_ws / "conversations" / "ask"
        conv.mkdir()
        (conv / "conversation.toml").write_text('agent = "asker"\n', encoding="utf-8")
        (conv / "task.md").write_text("Fix it.\n", encoding="utf-8")
        wait_until(lambda: (conv / "questions.md").exists(), timeout=15, message="questions")
        (conv / "answers.md").write_text("The parser.\n", encoding="utf-8")
        wait_until(lambda: "no '## Round 1' heading" in last_error(hostile_ws), timeout=15)
        assert not (conv / "result.md").exists()
        (conv / "answers.md").write_text("## Round 1\n\nThe parser.\n", encoding="utf-8")
        wait_until(lambda: (conv / "result.md").exists(), timeout=15, message="the run")
