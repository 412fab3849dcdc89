"""Hostile files in conversations: links, FIFOs, bad encodings, huge files.

Each case asserts the outcome a user needs: the error is visible in that conversation,
nothing leaks (the secret is in no request to the provider and in no commit), the
daemon keeps serving the other conversations, and the repository stays consistent.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

from tests.conftest import Result, grep_brief, rgit, wait_until
from tests.hostile.conftest import (
    SECRET,
    assert_healthy,
    assert_no_leak,
    secret_file,
    start_conversation,
    wait_error,
    wait_result,
)
from tests.messages_server import MessagesServer


def test_task_md_as_a_symlink_to_a_secret_is_refused_and_never_sent(
    daemon: Path, api_env: MessagesServer, tmp_path: Path
) -> None:
    conv = daemon / "conversations" / "linked"
    conv.mkdir()
    os.symlink(secret_file(tmp_path), conv / "task.md")
    start_conversation(daemon, "neighbour")
    error = wait_error(daemon, "linked", "symbolic link")
    assert "task.md" in error and SECRET not in error
    assert "echo: Say hello." in wait_result(daemon, "neighbour")
    assert_no_leak(daemon, api_env)
    assert_healthy(daemon)


def test_a_symlinked_events_directory_is_never_read(
    hostile_ws: Path, api_env: MessagesServer, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    outside = tmp_path / "outside-events"
    outside.mkdir()
    (outside / "0001-user.md").write_text(
        f'+++\nrole = "user"\ncreated = 2026-01-01T00:00:00Z\n+++\n{SECRET}\n', encoding="utf-8"
    )
    conv = hostile_ws / "conversations" / "evlink"
    conv.mkdir()
    (conv / "task.md").write_text("Hello.\n", encoding="utf-8")
    os.symlink(outside, conv / "events")
    printed = cli("conversation", "print", "evlink")
    assert SECRET not in printed.stdout + printed.stderr
    assert printed.code == 1 and "symbolic link" in printed.stderr
    listed = cli("conversation", "ls")
    assert listed.code == 0 and "evlink" in listed.stdout
    assert_no_leak(hostile_ws, api_env)


def test_input_to_a_conversation_whose_events_directory_links_outside_is_refused(
    hostile_ws: Path, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    outside = tmp_path / "outside-events"
    outside.mkdir()
    for seq, role in ((1, "user"), (2, "assistant")):  # an idle transcript, elsewhere
        (outside / f"{seq:04d}-{role}.md").write_text(
            f'+++\nrole = "{role}"\ncreated = 2026-01-01T00:00:00Z\n+++\nhi\n', encoding="utf-8"
        )
    conv = start_conversation(hostile_ws, "evlink", "Hello.\n")
    os.symlink(outside, conv / "events")
    sent = cli("query", "--id", "evlink", "Go on.")
    assert sent.code == 1
    assert "symbolic link" in sent.stderr and "make it a real file or directory" in sent.stderr
    assert sorted(os.listdir(outside)) == ["0001-user.md", "0002-assistant.md"]


def test_nothing_is_written_through_a_symlinked_conversation_or_events_directory(
    daemon: Path, api_env: MessagesServer, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    (outside / "events").mkdir(parents=True)
    (outside / "task.md").write_text("Hello from outside.\n", encoding="utf-8")
    evlink = start_conversation(daemon, "evlink", "Hello.\n")
    os.symlink(outside / "events", evlink / "events")
    os.symlink(outside, daemon / "conversations" / "convlink")
    log = daemon / ".jpfs" / "local" / "daemon.log"

    def failed() -> bool:
        return log.exists() and "evlink: failed" in log.read_text(encoding="utf-8")

    wait_until(failed, timeout=30, message="evlink's run to fail")
    # A conversation started after it is served, and meanwhile the refused one is not
    # run again and again: its failure is kept where jpfs can write (.jpfs/local).
    start_conversation(daemon, "after-links")
    assert "echo: Say hello." in wait_result(daemon, "after-links")
    assert log.read_text(encoding="utf-8").count("evlink: run starts") <= 3
    # The task's text and the error went nowhere outside the workspace.
    assert sorted(p.relative_to(outside).as_posix() for p in outside.rglob("*")) == [
        "events",
        "task.md",
    ]
    assert_healthy(daemon)
    assert_no_leak(daemon, api_env)


def test_a_fifo_where_task_md_belongs_cannot_hang_anything(
    daemon: Path, api_env: MessagesServer
) -> None:
    conv = daemon / "conversations" / "fifo"
    conv.mkdir()
    os.mkfifo(conv / "task.md")
    start_conversation(daemon, "after-fifo")
    assert "echo: Say hello." in wait_result(daemon, "after-fifo")
    error = wait_error(daemon, "fifo", "regular file")
    assert "task.md" in error
    assert_healthy(daemon)


def test_invalid_utf8_gives_that_conversation_an_error_with_the_byte_offset(
    daemon: Path, api_env: MessagesServer, cli: Callable[..., Result]
) -> None:
    conv = daemon / "conversations" / "latin1"
    conv.mkdir()
    (conv / "task.md").write_bytes(b"R\xe9sum\xe9 this.\n")
    start_conversation(daemon, "fine")
    error = wait_error(daemon, "latin1", "UTF-8")
    assert "task.md" in error and "byte 1" in error
    assert "echo: Say hello." in wait_result(daemon, "fine")
    # Nothing lost: the file is committed as it is.
    wait_until(
        lambda: "latin1/task.md" in rgit(daemon, "ls-tree", "-r", "--name-only", "HEAD"),
        message="the bad file to be committed as it is",
    )
    committed = subprocess.run(
        ["git", "cat-file", "blob", "HEAD:latin1/task.md"],
        cwd=daemon / "conversations", capture_output=True, check=True,
    ).stdout  # fmt: skip
    assert committed == b"R\xe9sum\xe9 this.\n"
    for argv in (("conversation", "ls"), ("tree",), ("conversation", "ls", "--tree")):
        shown = cli(*argv)
        assert shown.code == 0, (argv, shown.stderr)
        assert "fine" in shown.stdout and "latin1" in shown.stdout
    assert_healthy(daemon)


def test_invalid_utf8_in_answers_md_does_not_break_listings(
    hostile_ws: Path, cli: Callable[..., Result]
) -> None:
    assert cli("conversation", "new", "good", "--no-activate").code == 0
    assert cli("conversation", "new", "bad", "--no-activate").code == 0
    bad = hostile_ws / "conversations" / "bad"
    (bad / "task.md").write_text("Task.\n", encoding="utf-8")
    (bad / "answers.md").write_bytes(b"# Answers\n\n## Round 1\n\n\xff\xfe broken\n")
    for argv in (("conversation", "ls"), ("tree",), ("conversation", "ls", "--format", "json")):
        shown = cli(*argv)
        assert shown.code == 0, (argv, shown.stderr)
        assert "good" in shown.stdout and "bad" in shown.stdout
    printed = cli("conversation", "print", "bad")
    assert printed.code == 1 and "answers.md" in printed.stderr and "UTF-8" in printed.stderr


def test_a_huge_task_is_refused_with_its_size_not_silently_cut(
    daemon: Path, api_env: MessagesServer
) -> None:
    from jpfs.infra.textfile import MAX_BYTES

    conv = daemon / "conversations" / "huge"
    conv.mkdir()
    (conv / "task.md").write_bytes(b"x" * (MAX_BYTES + 1))
    error = wait_error(daemon, "huge", "bytes")
    assert str(MAX_BYTES + 1) in error
    assert all(len(r.raw) < MAX_BYTES for r in api_env.requests)
    assert_healthy(daemon)


def test_bom_and_crlf_are_read_as_plain_text(daemon: Path, api_env: MessagesServer) -> None:
    conv = daemon / "conversations" / "crlf"
    conv.mkdir()
    (conv / "task.md").write_bytes(b"\xef\xbb\xbfLine one.\r\nLine two.\r\n")
    wait_result(daemon, "crlf")
    sent = [r.raw.decode() for r in api_env.requests]
    assert any("Line one.\\nLine two." in body for body in sent)
    assert not any("\\r\\n" in body or "\\ufeff" in body for body in sent)


def test_grep_through_hostile_files_not_committed_finds_the_rest_and_leaks_nothing(
    ws: Path, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    """Files nobody committed yet are searched too (``jpfs.infra.git.untracked``): links,
    FIFOs and a damaged cache among them must neither hang, leak nor hide the rest."""
    root = ws / "conversations"
    secret = secret_file(tmp_path)
    secret.write_text(f"needle {SECRET}\n", encoding="utf-8")
    for conv in ("plain", "fifo", "links"):
        (root / conv).mkdir()
    (root / "plain" / "task.md").write_text("a plain needle\n", encoding="utf-8")
    os.mkfifo(root / "fifo" / "conversation.toml")  # read for the hidden check
    (root / "fifo" / "task.md").write_text("needle beside a FIFO\n", encoding="utf-8")
    os.mkfifo(root / "fifo" / "notes.md")
    os.symlink(secret, root / "links" / "task.md")
    os.symlink(secret.parent, root / "links" / "files")
    expected = ["fifo: needle beside a FIFO", "plain: a plain needle"]
    for _ in range(2):  # the first search builds the cache, the second trusts it
        found = cli("conversation", "grep", "needle")
        assert found.code == 0, found.stderr
        assert sorted(grep_brief(found.stdout)) == expected
        assert SECRET not in found.stdout + found.stderr
    (ws / ".jpfs" / "local" / "untracked.bin").write_bytes(b"\xfb\x02 not a cache")
    (root / "plain" / "later.md").write_text("a later needle\n", encoding="utf-8")
    found = cli("conversation", "grep", "needle")
    assert sorted(grep_brief(found.stdout)) == sorted([*expected, "plain: a later needle"])
