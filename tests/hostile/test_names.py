"""Misnamed directories and answers without a round heading: visible, never silent."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import jpfs_subprocess, rgit, running_daemon, wait_until
from tests.hostile.conftest import assert_healthy, start_conversation


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
        conv = start_conversation(hostile_ws, "ask", "Fix it.\n", agent="asker")
        wait_until(lambda: (conv / "questions.md").exists(), timeout=15, message="questions")
        (conv / "answers.md").write_text("The parser.\n", encoding="utf-8")
        wait_until(lambda: "no '## Round 1' heading" in last_error(hostile_ws), timeout=15)
        assert not (conv / "result.md").exists()
        (conv / "answers.md").write_text("## Round 1\n\nThe parser.\n", encoding="utf-8")
        wait_until(lambda: (conv / "result.md").exists(), timeout=15, message="the run")


def test_a_name_that_is_not_utf8_does_not_stop_anyone_elses_commits(daemon: Path) -> None:
    """Left out of the record (git paths are text here) and reported; a user's notes in
    another conversation are committed as ever, and the daemon stays up."""
    import os

    root = os.fsencode(daemon / "conversations")
    bad = os.path.join(root, b"bad-\xff\xfe")
    os.mkdir(bad)
    with open(os.path.join(bad, b"notes.md"), "wb") as fh:
        fh.write(b"not utf-8 named\n")
    (daemon / "conversations" / "mine").mkdir()
    (daemon / "conversations" / "mine" / "notes.md").write_text("mine\n", encoding="utf-8")
    wait_until(
        lambda: "mine/notes.md" in rgit(daemon, "ls-tree", "-r", "--name-only", "HEAD"),
        timeout=20,
        message="the user's notes committed",
    )
    wait_until(lambda: "not valid UTF-8" in last_error(daemon), timeout=20)
    # Inside a conversation too: its run's commits go on.
    with open(os.path.join(root, b"mine", b"odd-\xff.md"), "wb") as fh:
        fh.write(b"x\n")
    (daemon / "conversations" / "mine" / "more.md").write_text("more\n", encoding="utf-8")
    wait_until(
        lambda: "mine/more.md" in rgit(daemon, "ls-tree", "-r", "--name-only", "HEAD"),
        timeout=20,
        message="the next edit committed",
    )
    listed = jpfs_subprocess("conversation", "ls", cwd=daemon)
    tree = jpfs_subprocess("tree", cwd=daemon)
    assert listed.returncode == 0 and tree.returncode == 0, listed.stderr + tree.stderr
    assert_healthy(daemon)


def test_deeply_nested_toml_breaks_only_its_own_conversation(
    hostile_ws: Path,
) -> None:
    from tests.conftest import git

    for name in ("fine", "deep"):
        (hostile_ws / "conversations" / name).mkdir()
    (hostile_ws / "conversations" / "fine" / "conversation.toml").write_text(
        'agent = "careful"\ntitle = "fine"\n', encoding="utf-8"
    )
    deep = "a = " + "[" * 5000 + "]" * 5000 + "\n"
    (hostile_ws / "conversations" / "deep" / "conversation.toml").write_text(deep, "utf-8")
    (hostile_ws / "conversations" / "deep" / "task.md").write_text("x\n", encoding="utf-8")
    events = hostile_ws / "conversations" / "fine" / "events"
    events.mkdir()
    (events / "0001-user.md").write_text("+++\nx = " + "{a=" * 3000 + "1" + "}" * 3000
                                         + "\n+++\nhi\n", encoding="utf-8")  # fmt: skip
    del git
    for argv in (("tree",), ("conversation", "ls"), ("conversation", "ls", "--tree")):
        done = jpfs_subprocess(*argv, cwd=hostile_ws)
        assert done.returncode == 0, (argv, done.stderr)
        assert "broken" in done.stdout and "fine" in done.stdout, done.stdout
    shown = jpfs_subprocess("conversation", "print", "fine", cwd=hostile_ws)
    assert shown.returncode == 1 and "nested too deeply" in shown.stderr


def test_a_name_that_is_not_utf8_found_at_start_does_not_stop_the_catch_up(
    hostile_ws: Path,
) -> None:
    import os

    root = os.fsencode(hostile_ws / "conversations")
    os.mkdir(os.path.join(root, b"bad-\xff"))
    with open(os.path.join(root, b"bad-\xff", b"notes.md"), "wb") as fh:
        fh.write(b"x\n")
    (hostile_ws / "conversations" / "mine").mkdir()
    (hostile_ws / "conversations" / "mine" / "notes.md").write_text("mine\n", encoding="utf-8")
    with running_daemon(hostile_ws):
        wait_until(
            lambda: "mine/notes.md" in rgit(hostile_ws, "ls-tree", "-r", "--name-only", "HEAD"),
            timeout=20,
            message="the user's notes committed by the catch-up",
        )
        assert_healthy(hostile_ws)
