"""Faults under a running daemon: a provider that rate-limits, fails or talks garbage, a
repository whose objects turn read-only, a corrupt object. Each time the daemon stays
up, says what happened, writes nothing half, and the conversation can go on."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.chat_server import ChatServer, chat_malformed, chat_server, chat_text, chat_text_of
from tests.conftest import (
    Result,
    git,
    jpfs_subprocess,
    rgit,
    running_daemon,
    wait_until,
    write_profile,
)
from tests.hostile.conftest import (
    assert_healthy,
    start_conversation,
    wait_error,
    wait_result,
)
from tests.messages_server import (
    JsonDict,
    MessagesServer,
    Response,
    error_reply,
    last_user_text,
    malformed_reply,
    text_reply,
)

__all__ = ["chat_server"]  # the fixture


def daemon_status(ws: Path) -> JsonDict:
    done = jpfs_subprocess("daemon", "status", "--format", "json", cwd=ws)
    assert done.returncode == 0, done.stderr
    data: JsonDict = json.loads(done.stdout)
    return data


def last_error(ws: Path) -> str:
    return str((daemon_status(ws).get("last_error") or {}).get("message", ""))


def daemon_log(ws: Path) -> str:
    return (ws / ".jpfs" / "local" / "daemon.log").read_text(encoding="utf-8", errors="replace")


def by_task(replies: dict[str, Callable[[], Response]]) -> Callable[[JsonDict], Response]:
    """A responder choosing by the conversation's task; others get an echo."""

    def respond(request: JsonDict) -> Response:
        text = last_user_text(request)
        for needle, reply in replies.items():
            if needle in text:
                return reply()
        return text_reply("echo: " + text[:80])

    return respond


def test_a_rate_limit_is_waited_out_and_said(daemon: Path, api_env: MessagesServer) -> None:
    api_env.enqueue(
        error_reply(429, "slow down", headers={"retry-after": "0"}),
        error_reply(529, "overloaded", headers={"retry-after": "0"}),
        text_reply("done after waiting"),
    )
    start_conversation(daemon, "limited", "Be patient.\n")
    assert "done after waiting" in wait_result(daemon, "limited")
    log = daemon_log(daemon)
    assert "[limited] anthropic:" in log and "attempt 2/5" in log and "attempt 3/5" in log
    assert len(api_env.requests) == 3
    assert_healthy(daemon)


def test_a_provider_that_keeps_failing_fails_one_conversation_not_the_daemon(
    daemon: Path, api_env: MessagesServer, cli: Callable[..., Result]
) -> None:
    healed = False

    def broken() -> Response:
        if healed:
            return text_reply("back in service")
        return error_reply(500, "internal trouble", headers={"retry-after": "0"})

    api_env.responder = by_task({"Break me": broken})
    conv = start_conversation(daemon, "broken", "Break me.\n")
    error = wait_error(daemon, "broken", "500")
    assert "gave up after 5 attempts" in error
    wait_until(lambda: "broken" in last_error(daemon), timeout=10, message="status says so")
    # The rest of the workspace is served meanwhile.
    start_conversation(daemon, "other", "Say hello.\n")
    assert "echo: Say hello." in wait_result(daemon, "other")
    assert not (conv / "result.md").exists()
    # `jpfs retry` is refused where there is nothing to retry.
    refused = cli("retry", "other", cwd=daemon)
    assert refused.code == 1 and "not failed" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    # Once the provider is back, `jpfs retry` resumes it, and nothing was lost.
    healed = True
    sent = cli("retry", "broken", cwd=daemon)
    assert sent.code == 0, sent.stderr
    assert "back in service" in wait_result(daemon, "broken")
    retried = api_env.bodies[-1]["messages"][-1]
    assert "The last attempt failed" in json.dumps(retried) and "500" in json.dumps(retried)
    assert (conv / "task.md").read_text(encoding="utf-8") == "Break me.\n"
    wait_until(lambda: rgit(daemon, "status", "--porcelain") == "", message="all committed")
    assert_healthy(daemon)


@pytest.mark.parametrize("kind", ["json", "shape", "html"])
def test_garbage_from_the_provider_is_an_error_event(
    daemon: Path, api_env: MessagesServer, kind: str
) -> None:
    api_env.responder = by_task({"Garbage": lambda: malformed_reply(kind)})
    start_conversation(daemon, "garbage", "Garbage, please.\n")
    error = wait_error(daemon, "garbage", "anthropic")
    assert "Traceback" not in error
    start_conversation(daemon, "fine", "Say hello.\n")
    assert "echo: Say hello." in wait_result(daemon, "fine")
    assert_healthy(daemon)


LOCAL = """
model = "local-hostile"
provider = "openai"
base_url = "{url}"
[onboarding]
enabled = false
"""


@pytest.mark.parametrize("kind", ["json", "shape", "html"])
def test_garbage_from_an_openai_server_is_an_error_event(
    hostile_ws: Path, chat_server: ChatServer, kind: str
) -> None:
    """The same through an OpenAI-compatible server, for a task.md the daemon adopts and
    for a `jpfs query` handed to it: an error event, one line, no traceback."""
    write_profile(hostile_ws, "local", LOCAL.format(url=chat_server.url), allowed=True)
    git(hostile_ws, "add", "-A")
    git(hostile_ws, "commit", "-q", "-m", "a local agent")

    def respond(request: JsonDict) -> Response:
        text = chat_text_of(request, "user")
        return chat_malformed(kind) if "Garbage" in text else chat_text("echo: " + text[:80])

    chat_server.responder = respond
    with running_daemon(hostile_ws):
        start_conversation(hostile_ws, "garbage", "Garbage, please.\n", agent="local")
        error = wait_error(hostile_ws, "garbage", "openai: malformed response")
        assert "Traceback" not in error

        asked = jpfs_subprocess(
            "query", "--new", "--agent", "local", "Garbage again.", cwd=hostile_ws
        )
        assert asked.returncode == 1 and asked.stdout == "", asked.stderr
        assert "Traceback" not in asked.stderr, asked.stderr
        assert "openai: malformed response" in asked.stderr.splitlines()[-1]
        (failed,) = (hostile_ws / "conversations").glob("c-*/events/*-error.md")
        assert "openai: malformed response" in failed.read_text(encoding="utf-8")

        fine = jpfs_subprocess("query", "--new", "--agent", "local", "Say hello.", cwd=hostile_ws)
        assert fine.returncode == 0 and "echo: Say hello." in fine.stdout, fine.stderr
        assert "query handed over by the CLI" in daemon_log(hostile_ws)
        assert_healthy(hostile_ws)


# -- the repository itself ---------------------------------------------------------------------


@pytest.fixture
def mounts() -> Iterator[list[Path]]:
    """Bind mounts made by the test, undone whatever happens."""
    made: list[Path] = []
    yield made
    for path in reversed(made):
        subprocess.run(["umount", "-l", str(path)], check=False)


def bind_read_only(path: Path, mounts: list[Path]) -> None:
    done = subprocess.run(
        ["mount", "--bind", str(path), str(path)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        pytest.skip(f"cannot bind-mount here ({done.stderr.strip()}): needs root")
    mounts.append(path)
    subprocess.run(
        ["mount", "-o", "remount,bind,ro", str(path)], capture_output=True, text=True, check=True
    )


def test_read_only_objects_are_reported_and_the_run_goes_on_once_writable(
    hostile_ws: Path, mounts: list[Path]
) -> None:
    objects = hostile_ws / ".git" / "objects"
    with running_daemon(hostile_ws):
        bind_read_only(objects, mounts)
        try:
            conv = start_conversation(hostile_ws, "frozen", "Say hello.\n")
            wait_until(
                lambda: "read-only" in last_error(hostile_ws).lower(),
                timeout=20,
                message="daemon status to name the read-only file system",
            )
            assert daemon_status(hostile_ws)["running"] is True
            assert not (conv / "result.md").exists()
        finally:
            subprocess.run(["umount", str(objects)], check=True)
            mounts.remove(objects)
        assert "echo: Say hello." in wait_result(hostile_ws, "frozen")
        wait_until(lambda: rgit(hostile_ws, "status", "--porcelain") == "", message="all committed")
        assert_healthy(hostile_ws)
    for where in (hostile_ws / ".git", hostile_ws / "conversations"):
        assert not [p for p in where.rglob("*") if p.name.endswith((".jpfs-tmp", ".lock"))]


def packed_object(ws: Path, oid: str) -> tuple[Path, int, int]:
    """The packfile holding ``oid`` (jpfs packs every commit's objects), and the byte
    range of its entry, read from the pack index by git itself."""
    for idx in sorted((ws / ".git" / "objects" / "pack").glob("*.idx")):
        with idx.open("rb") as fh:
            listed = subprocess.run(
                ["git", "show-index"], stdin=fh, capture_output=True, text=True, check=True
            ).stdout.split("\n")
        entries = sorted((int(line.split()[0]), line.split()[1]) for line in listed if line)
        pack = idx.with_suffix(".pack")
        ends = [offset for offset, _ in entries[1:]] + [pack.stat().st_size - 20]
        for (offset, found), end in zip(entries, ends, strict=True):
            if found == oid:
                return pack, offset, end
    raise AssertionError(f"{oid} is in no packfile")


def test_a_corrupt_object_is_reported_and_the_run_goes_on_once_repaired(hostile_ws: Path) -> None:
    with running_daemon(hostile_ws):
        start_conversation(hostile_ws, "first", "Say hello.\n")
        wait_result(hostile_ws, "first")
        wait_until(
            lambda: rgit(hostile_ws, "status", "--porcelain") == "", timeout=10, message="commit"
        )
    tree = rgit(hostile_ws, "rev-parse", "HEAD^{tree}").strip()
    path, start, end = packed_object(hostile_ws, tree)
    good = path.read_bytes()
    os.chmod(path, 0o644)
    # The object every new commit must read: its compressed bytes (after the 2-byte
    # type-and-size header) become garbage.
    path.write_bytes(good[: start + 2] + b"x" * (end - start - 2) + good[end:])
    with running_daemon(hostile_ws):
        try:
            conv = start_conversation(hostile_ws, "second", "Say hello again.\n")
            wait_until(
                lambda: tree in last_error(hostile_ws) and "git fsck" in last_error(hostile_ws),
                timeout=20,
                message="daemon status to name the corrupt object",
            )
            assert daemon_status(hostile_ws)["running"] is True
            assert not (conv / "result.md").exists()
        finally:
            path.write_bytes(good)
        assert "echo: Say hello again." in wait_result(hostile_ws, "second")
        assert_healthy(hostile_ws)


def test_a_split_record_index_with_a_broken_base_is_said_and_commits_go_on(
    hostile_ws: Path,
) -> None:
    subprocess.run(["git", "config", "core.splitIndex", "true"], cwd=hostile_ws, check=True)
    record_gitdir = hostile_ws / ".git" / "worktrees" / "conversations"
    with running_daemon(hostile_ws):
        start_conversation(hostile_ws, "first", "Say hello.\n")
        wait_result(hostile_ws, "first")
        wait_until(
            lambda: rgit(hostile_ws, "status", "--porcelain") == "", timeout=30, message="commit"
        )
    bases = list(record_gitdir.glob("sharedindex.*"))
    assert bases, "the record's index is split"
    for base in bases:
        base.write_bytes(b"x" * base.stat().st_size)
    with running_daemon(hostile_ws):
        start_conversation(hostile_ws, "second", "Say hello again.\n")
        assert "echo: Say hello again." in wait_result(hostile_ws, "second")
        wait_until(
            lambda: "is left as it is" in daemon_log(hostile_ws),
            timeout=30,
            message="the daemon log to name the broken index and its fix",
        )
        wait_until(
            lambda: rgit(hostile_ws, "ls-tree", "HEAD", "second/result.md") != "",
            timeout=30,
            message="the second conversation's result committed",
        )
        # The fix the log gives, verbatim in spirit: the index is rebuilt from HEAD.
        (record_gitdir / "index").unlink()
        subprocess.run(["git", "reset", "-q"], cwd=hostile_ws / "conversations", check=True)
        assert rgit(hostile_ws, "status", "--porcelain") == ""
        assert_healthy(hostile_ws)
