"""Fixtures of the hostile-input corpus: a workspace whose agents talk to the local
Messages API server through the real SDK, and a daemon process serving it."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import (
    assert_fsck_clean,
    jpfs_subprocess,
    running_daemon,
    use_only_agent,
    wait_until,
)
from tests.messages_server import JsonDict, MessagesServer, Response, last_user_text, text_reply

SECRET = "s3cr3t-do-not-leak-8d1f"

AGENT = """
model = "claude-hostile"
provider = "anthropic"
[system]
role = "You are a careful agent."
[onboarding]
enabled = false
"""


@pytest.fixture
def hostile_ws(ws: Path, api_env: MessagesServer) -> Path:
    """A workspace whose default agent answers through the local Messages API."""
    use_only_agent(ws, "careful", AGENT)
    api_env.responder = lambda req: text_reply("echo: " + last_user_text(req)[:80])
    return ws


@pytest.fixture
def daemon(hostile_ws: Path) -> Iterator[Path]:
    with running_daemon(hostile_ws):
        yield hostile_ws


def secret_file(tmp_path: Path) -> Path:
    path = tmp_path / "outside" / "id_rsa"
    path.parent.mkdir(exist_ok=True)
    path.write_text(f"-----BEGIN KEY-----\n{SECRET}\n", encoding="utf-8")
    return path


def assert_no_leak(ws: Path, server: MessagesServer) -> None:
    """The secret is in no request to the provider and nowhere in any commit."""
    for request in server.requests:
        assert SECRET not in request.raw.decode("utf-8", "replace")
    history = subprocess.run(
        ["git", "log", "--all", "-p", "--format=%B"], cwd=ws, capture_output=True, check=True
    ).stdout
    assert SECRET.encode() not in history


def assert_healthy(ws: Path) -> None:
    """Daemon alive, repository consistent."""
    status = jpfs_subprocess("daemon", "status", "--format", "json", cwd=ws)
    assert status.returncode == 0, status.stderr
    assert '"running": true' in status.stdout, status.stdout
    assert_fsck_clean(ws, "--strict")


def start_conversation(
    ws: Path, conv_id: str, task: str = "Say hello.\n", *, agent: str | None = None
) -> Path:
    """A conversation as a human starts one: ``task.md`` (with ``agent``, a
    conversation.toml naming it, written first: a daemon acts once task.md appears)."""
    conv = ws / "conversations" / conv_id
    conv.mkdir(parents=True)
    if agent is not None:
        (conv / "conversation.toml").write_text(f'agent = "{agent}"\n', encoding="utf-8")
    (conv / "task.md").write_text(task, encoding="utf-8")
    return conv


def wait_result(ws: Path, conv_id: str, timeout: float = 30) -> str:
    path = ws / "conversations" / conv_id / "result.md"
    wait_until(path.exists, timeout=timeout, message=f"{conv_id} to finish")
    return path.read_text(encoding="utf-8")


def wait_error(ws: Path, conv_id: str, needle: str, timeout: float = 30) -> str:
    """The text of ``conv_id``'s error event that mentions ``needle``."""
    events = ws / "conversations" / conv_id / "events"
    found: list[str] = []

    def seen() -> bool:
        for path in sorted(events.glob("*-error.md")) if events.is_dir() else []:
            text = path.read_text(encoding="utf-8", errors="replace")
            if needle in text:
                found.append(text)
                return True
        return False

    wait_until(seen, timeout=timeout, message=f"an error event in {conv_id} about {needle!r}")
    return found[0]


BUSY = 3  # runs held in flight by ``gate`` (of daemon.max_agents = 4): a busy daemon


@pytest.fixture
def gate(api_env: MessagesServer) -> Iterator[threading.Event]:
    """A task saying "Keep busy" waits in its model call until the gate opens (at the
    latest when the test ends); every other task is echoed."""
    opened = threading.Event()

    def respond(request: JsonDict) -> Response:
        text = last_user_text(request)
        if "Keep busy" in text:
            opened.wait(60)
        return text_reply("echo: " + text[:60])

    api_env.responder = respond
    try:
        yield opened
    finally:
        opened.set()


def busy(ws: Path) -> None:
    """:data:`BUSY` runs in flight on the running daemon, held by ``gate``."""
    for n in range(BUSY):
        start_conversation(ws, f"busy{n}", "Keep busy.\n")
    wait_until(lambda: len(status(ws)["agents"]) == BUSY, timeout=20, message="the busy runs")


def status(ws: Path) -> Any:
    """``jpfs daemon status --format json``."""
    done = jpfs_subprocess("daemon", "status", "--format", "json", cwd=ws)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)
