"""``jpfs tree`` and ``jpfs top``: what each conversation is doing, from files and locks."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from jpfs.core import locks
from jpfs.core.workspace import open_workspace
from jpfs.services.conversations import lifecycle
from tests.conftest import Result
from tests.services.daemon.test_daemon_helpers import setup_workspace


def make_tree(ws: Path, cli: Callable[..., Result]) -> dict[str, str]:
    setup_workspace(ws, default_agent="lead")
    waiting = cli("query", "--new", "--agent", "lead", "--non-interactive", "Review it.")
    assert waiting.code == 4, waiting.stderr
    done = cli("query", "--new", "--agent", "helper", "--no-activate", "Say hello.")
    assert done.code == 0, done.stderr
    space = open_workspace(ws)
    lifecycle.new_conversation(space, "pend", agent="helper", task="Not run yet.")
    lifecycle.new_conversation(space, "secret", agent="helper", hidden=True)
    broken = ws / "conversations" / "broken"
    broken.mkdir()
    (broken / "conversation.toml").write_text('agent = "x\n')
    (broken / "task.md").write_text("x\n")

    def id_of(result: Result) -> str:
        return result.stderr.split("conversation ")[-1].split()[0]

    return {"waiting": waiting.stdout.split('"')[1], "idle": id_of(done)}


def test_tree_shows_state_agent_model_tokens_and_last_line(
    ws: Path, cli: Callable[..., Result]
) -> None:
    ids = make_tree(ws, cli)
    result = cli("tree", "--format", "json")
    assert result.code == 0, result.stderr
    rows = {r["id"]: r for r in json.loads(result.stdout)}
    assert set(rows) == {ids["waiting"], ids["idle"], "pend", "broken"}  # hidden is hidden

    waiting = rows[ids["waiting"]]
    assert (waiting["state"], waiting["agent"], waiting["model"]) == (
        "waiting", "lead", "script-lead",
    )  # fmt: skip
    assert waiting["last"] == "1. Which part of the code matters?"
    idle = rows[ids["idle"]]
    assert idle["state"] == "idle" and idle["tokens"] > 0
    assert idle["last"] == "Helper says hello."
    assert rows["pend"]["state"] == "pending"  # the agent must act, nobody runs it
    assert rows["broken"]["state"] == "broken" and "malformed TOML" in rows["broken"]["last"]

    # A held run lock is a running agent, whoever holds it.
    with locks.conversation_lock(ws / ".jpfs" / "local", "pend"):
        running = {r["id"]: r for r in json.loads(cli("tree", "--format", "json").stdout)}
    assert running["pend"]["state"] == "running" and running["pend"]["elapsed"] < 60

    everything = json.loads(cli("tree", "--all", "--format", "json").stdout)
    assert "secret" in {r["id"] for r in everything}


def test_tree_text_and_top_frames(ws: Path, cli: Callable[..., Result]) -> None:
    ids = make_tree(ws, cli)
    text = cli("tree", "--full-ids")  # short ids: tests/cli/test_cli_ids.py
    assert text.code == 0
    lines = text.stdout.splitlines()
    assert lines[0].split() == [
        "ID", "STATE", "AGENT", "MODEL", "TIME", "TOKENS", "COST", "SUBTREE", "MAIL", "LAST",
    ]  # fmt: skip
    assert lines[-1].startswith("total: ")
    line = next(ln for ln in lines if ln.startswith(ids["idle"]))
    assert "idle" in line and "helper" in line and line.endswith("Helper says hello.")

    top = cli("top", "--count", "2", "--interval", "0.01", "--full-ids")
    assert top.code == 0
    assert top.stdout.count("daemon: not running") == 2  # two frames, each with a header
    assert top.stdout.count(ids["waiting"]) == 2

    below = cli("tree", ids["waiting"])
    assert below.code == 0 and "(no conversations)" in below.stdout


def test_mail_waiting_is_counted_until_it_is_delivered(
    ws: Path, cli: Callable[..., Result]
) -> None:
    """The MAIL column counts the caller's messages not delivered yet; the tree's cache
    sees mail arrive and mail marked read (inbox/ is in its signature), so a warm cache
    never shows a count that moved."""
    from jpfs.core.ids import is_caller
    from jpfs.services.conversations import mail

    idle = make_tree(ws, cli)["idle"]

    def shown() -> tuple[int, str]:
        rows = {r["id"]: r for r in json.loads(cli("tree", "--format", "json").stdout)}
        text = cli("tree", "--full-ids").stdout
        line = next(ln for ln in text.splitlines() if ln.startswith(idle))
        return int(rows[idle]["mail_waiting"]), line

    assert shown()[0] == 0  # the cache is warm from here on
    for body in ("Stop and report.", "Then list the files."):
        sent = cli("mail", "send", idle, body, "--no-start")
        assert sent.code == 0, sent.stderr
    space = open_workspace(ws)
    # A child's message is its parent's to read (mail_check), not input a call delivers.
    lifecycle.new_conversation(space, f"{idle}/kid", agent="helper", task="Look.")
    mail.send(space, idle, "Found it", "In the README.", sender=f"{idle}/kid")
    count, line = shown()
    assert count == 2 and " 2 waiting " in line
    # `c print` names the same two as waiting, and the child's apart, as unread.
    printed = cli("c", "print", idle).stdout
    waiting, _, unread = printed.partition("## Unread mail")
    assert waiting.count(" from @human: ") == 2 and "## Mail waiting" in waiting
    assert f" from {idle}/kid: Found it" in unread and "@human" not in unread
    as_json = json.loads(cli("c", "print", idle, "--format", "json").stdout)
    assert [m["from"] for m in as_json["mail_waiting"]] == ["@human", "@human"]
    assert [m["from"] for m in as_json["mail_unread"]] == [f"{idle}/kid"]
    first = [m for m in mail.check(space, idle) if is_caller(m.sender, idle)][:1]
    mail.mark_read(space, idle, first)  # delivered: only inbox/ changes
    count, line = shown()
    assert count == 1 and " 1 waiting " in line
    mail.mark_read(space, idle, mail.check(space, idle))
    count, line = shown()
    assert count == 0 and "waiting" not in line


def test_a_daemon_run_shows_what_it_is_doing_live(ws: Path) -> None:
    from tests.conftest import jpfs_subprocess, running_daemon, wait_until

    setup_workspace(ws, default_agent="helper", delay=3.0)
    with running_daemon(ws):
        conv = ws / "conversations" / "slow"
        conv.mkdir()
        (conv / "task.md").write_text("Take your time.\n", encoding="utf-8")

        def running_row() -> dict[str, object] | None:
            shown = jpfs_subprocess("tree", "--format", "json", cwd=ws)
            rows = [r for r in json.loads(shown.stdout) if r["id"] == "slow"]
            running = rows and rows[0]["state"] == "running" and rows[0]["last"]
            return rows[0] if running else None

        # The daemon publishes its runs' notes within a quarter second of a change.
        row = wait_until(running_row, timeout=20, message="the run's note in the tree")
        assert isinstance(row, dict) and row["last"] == "model turn (script-helper)"
        assert not (conv / "result.md").exists()  # shown while it ran, not after
        wait_until((conv / "result.md").exists, timeout=30, message="the result")


def test_last_is_the_question_that_waits_or_the_first_line_of_the_answer(
    ws: Path, cli: Callable[..., Result]
) -> None:
    from jpfs.core.conversation import Conversation

    assert cli("c", "new", "asked", "--agent", "researcher", "--no-activate").code == 0
    asked = Conversation(ws / "conversations", "asked")
    (asked.path / "task.md").write_text("Go.\n", encoding="utf-8")
    (asked.path / "questions.md").write_text(
        "## Round 1\n\n1. Which module is in scope?\n2. Tests too?\n\n"
        "Assumption: only src/ matters.\n",
        encoding="utf-8",
    )
    assert cli("c", "new", "done", "--agent", "researcher", "--no-activate").code == 0
    done = Conversation(ws / "conversations", "done")
    done.append_event("user", "Go.\n")
    done.append_event(
        "assistant", "<response>\n# Summary\nThe answer, first.\n\nDetails after.\n</response>\n",
        {"model": "m"},
    )  # fmt: skip
    rows = {r["id"]: r for r in json.loads(cli("tree", "--format", "json").stdout)}
    assert rows["asked"]["state"] == "waiting"
    assert rows["asked"]["last"] == "1. Which module is in scope?"
    assert rows["done"]["last"] == "Summary"


def test_top_piped_prints_one_frame_and_on_a_terminal_quits_on_q(
    ws: Path, cli: Callable[..., Result]
) -> None:
    import fcntl
    import os
    import pty
    import struct
    import subprocess
    import sys
    import termios

    from tests.conftest import jpfs_subprocess

    assert cli("c", "new", "x" * 30, "--title", "a title " * 20, "--no-activate").code == 0
    piped = jpfs_subprocess("top", cwd=ws, timeout=30)
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout.count("ID ") == 1  # one frame, then it exits
    helped = cli("top", "--help").stdout
    assert "``" not in helped and "press q" in helped

    # A terminal 60 columns wide: rows cut to fit, the keys shown, q quits.
    parent, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 60, 0, 0))
    # The terminal's own size: a COLUMNS in the process environment (something in an
    # earlier in-process run puts one there, unseen by os.environ) would win over it.
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "jpfs", "top", "--interval", "0.2"],
        cwd=ws, stdin=child, stdout=child, stderr=subprocess.PIPE, start_new_session=True,
        env=env,
    )  # fmt: skip
    os.close(child)
    seen = b""
    try:
        while b"(q: quit)" not in seen or b"total:" not in seen:
            seen += os.read(parent, 65536)
        os.write(parent, b"q")
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(parent)
    frame = seen.decode("utf-8", "replace").split("\x1b[2J")[-1]
    lines = [ln.rstrip("\r") for ln in frame.split("\n") if ln.strip()]
    assert lines and all(len(ln) <= 60 for ln in lines), lines
    assert any(ln.endswith("…") for ln in lines)  # the long row, cut
