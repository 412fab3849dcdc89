"""The shared record over real network transports, and a remote that goes away.

The remote is a bare repository served on 127.0.0.1 by ``git daemon`` (``git://``), by
``git http-backend`` behind an HTTP server (smart HTTP), or by OpenSSH's ``sshd`` (the
key given by ``core.sshCommand``), all started here (:mod:`tests.gitservers`). Real daemons on their own clones share the work; every model
turn is counted at the local Messages API server.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import git, held_leases, jpfs_subprocess, wait_until
from tests.gitservers import GitDaemon, SmartHttp, Sshd
from tests.messages_server import MessagesServer, last_user_text, text_reply
from tests.services.sync.test_sync_machines import (
    TASK_RE,
    assistant_turns,
    fsck,
    jpfs,
    key_of,
    seed_remote,
    start_daemon,
    status,
    stop_daemon,
)
from tests.services.sync.test_sync_ssh import new_workspace, require_sshd

CONVERSATIONS = 12
LEASE = 8.0

Server = GitDaemon | SmartHttp | Sshd


@pytest.fixture(params=["git", "http", "ssh"])
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Server]:
    if request.param == "ssh":
        require_sshd()
    srv = tmp_path / "srv"
    srv.mkdir()
    git(srv, "init", "-q", "--bare", "-b", "main", "remote.git")
    server: Server
    if request.param == "ssh":
        server = Sshd(srv, tmp_path / "sshd")
    else:
        server = GitDaemon(srv) if request.param == "git" else SmartHttp(srv)
    with server.start(probe="remote.git"):
        if isinstance(server, Sshd):  # the key as a deploy key is given (protocol/sync.md)
            git(tmp_path, "config", "--global", "core.sshCommand", server.command())
        yield server


def clone(tmp_path: Path, url: str, name: str) -> Path:
    git(tmp_path, "clone", "-q", url, str(tmp_path / name))
    return tmp_path / name


def results_on(remote: Path) -> set[str]:
    listed = git(remote, "ls-tree", "-r", "--name-only", "jpfs-record")
    return {line.split("/")[0] for line in listed.splitlines() if line.endswith("/result.md")}


def write_tasks(writer: Path, count: int) -> None:
    for number in range(count):
        conv = writer / "conversations" / f"t-{number:03d}"
        conv.mkdir(parents=True)
        (conv / "task.md").write_text(f"# Task {number}\n\nSay hello.\n", encoding="utf-8")


@pytest.mark.timeout(600)
def test_two_daemons_share_the_work_over_a_network_remote(
    tmp_path: Path, served: Server, api_env: MessagesServer
) -> None:
    api_env.responder = lambda request: text_reply("Done.", delay=0.05)  # type: ignore[assignment]
    url = served.url("remote.git")
    remote = served.root / "remote.git"
    seed_remote(tmp_path, lease=LEASE, url=url)
    daemons = [clone(tmp_path, url, f"d{i}") for i in (1, 2)]
    writer = clone(tmp_path, url, "writer")
    try:
        for ws in daemons:
            start_daemon(ws, f"key-{ws.name}")
        write_tasks(writer, CONVERSATIONS)
        jpfs(writer, "sync")
        wait_until(
            lambda: len(results_on(remote)) == CONVERSATIONS,
            timeout=300,
            interval=0.2,
            message="every result on the remote",
        )
        for ws in daemons:
            wait_until(lambda ws=ws: status(ws)["sync"]["ahead"] == 0, timeout=60)  # type: ignore[index]
            # Every transport is fetched alike: nothing relayed, nothing looked at.
            shown = status(ws)["sync"]
            assert "relayed" not in shown and "look" not in shown["timings"], shown  # type: ignore[index,operator]
    finally:
        for ws in daemons:
            stop_daemon(ws)
    # Each turn reached the model once, and the record holds it once.
    asked = [int(TASK_RE.search(last_user_text(r.body)).group(1)) for r in api_env.requests]  # type: ignore[union-attr]
    assert sorted(asked) == list(range(CONVERSATIONS))
    assert {key_of(r) for r in api_env.requests} <= {"key-d1", "key-d2"}
    jpfs(writer, "sync")
    for number in range(CONVERSATIONS):
        assert assistant_turns(writer, number) == 1, number
    for path in [*daemons, writer, remote]:
        fsck(path)


@pytest.mark.timeout(600)
def test_a_remote_that_goes_away_and_comes_back(
    tmp_path: Path, served: Server, api_env: MessagesServer
) -> None:
    gate = threading.Event()

    def respond(request: dict[str, object]) -> object:
        gate.wait(120)  # the turn is in flight while the remote goes away
        return text_reply("Done.")

    api_env.responder = respond  # type: ignore[assignment]
    url = served.url("remote.git")
    remote = served.root / "remote.git"
    seed_remote(tmp_path, lease=LEASE, url=url)
    ws = clone(tmp_path, url, "d1")
    writer = clone(tmp_path, url, "writer")
    try:
        start_daemon(ws, "key-d1")
        write_tasks(writer, 1)
        jpfs(writer, "sync")
        wait_until(lambda: len(api_env.requests) == 1, timeout=120, message="the turn to start")
        served.pause()
        # The cycles fail from now on: status says so, with since when.
        wait_until(
            lambda: status(ws)["sync"]["unreachable_since"],  # type: ignore[index]
            timeout=60,
            message="status to say the remote is unreachable",
        )
        shown = jpfs(ws, "daemon", "status")
        assert re.search(r"remote unreachable since \d\d:\d\d:\d\d", shown), shown
        if isinstance(served, GitDaemon):  # in git's words
            said = status(ws)["sync"]["last_error"]  # type: ignore[index]
            assert "unable to connect to 127.0.0.1" in said, said
        gate.set()  # the claimed turn finishes while the remote is away
        wait_until(
            lambda: (ws / "conversations" / "t-000" / "result.md").exists(),
            timeout=120,
            message="the result, committed here",
        )
        assert results_on(remote) == set()
        served.resume(probe="remote.git")
        wait_until(
            lambda: results_on(remote) == {"t-000"}, timeout=120, message="the result pushed"
        )
        wait_until(lambda: not status(ws)["sync"]["unreachable_since"], timeout=60)  # type: ignore[index]
        # Given back with the result (one push); the daemon's book follows the push.
        wait_until(lambda: status(ws)["sync"]["leases_held"] == [], timeout=60)  # type: ignore[index]
        assert held_leases(remote) == []
    finally:
        gate.set()
        stop_daemon(ws)
    assert len(api_env.requests) == 1  # nothing ran twice
    jpfs(writer, "sync")
    assert assistant_turns(writer, 0) == 1
    fsck(remote)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("transport", ["git", "http", "https", "file-url", "path"])
def test_the_first_jpfs_sync_to_an_empty_remote(
    tmp_path: Path, transport: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every transport from the first sync (issue #49; SSH: tests/services/sync/test_sync_ssh.py)."""
    srv = tmp_path / "srv"
    srv.mkdir()
    git(srv, "init", "-q", "--bare", "-b", "main", "remote.git")
    with contextlib.ExitStack() as stack:
        if transport in ("git", "http", "https"):
            server: Server = (
                GitDaemon(srv)
                if transport == "git"
                else SmartHttp(srv, tls=tmp_path / "tls" if transport == "https" else None)
            )
            stack.enter_context(server.start(probe="remote.git"))
            url = server.url("remote.git")
            if isinstance(server, SmartHttp) and server.ca is not None:
                monkeypatch.setenv("GIT_SSL_CAINFO", str(server.ca))  # trusted, as a user's CA
        else:
            path = srv / "remote.git"
            url = path.as_uri() if transport == "file-url" else str(path)
        ws = new_workspace(tmp_path, url, "ws", project=False)  # the remote stays empty
        jpfs(ws, "sync")
        jpfs(ws, "sync")
    assert git(srv / "remote.git", "rev-parse", "jpfs-record").strip()


@pytest.mark.timeout(300)
def test_an_https_remote_that_asks_for_credentials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The user's credential helper answers for jpfs, from their own git configuration,
    as for their pushes (issue #49); with none, a sync fails at once (no prompt waits
    on a terminal a daemon does not have) saying to set one up; with a stale password
    stored, saying to update it."""
    srv = tmp_path / "srv"
    srv.mkdir()
    git(srv, "init", "-q", "--bare", "-b", "main", "remote.git")
    server = SmartHttp(srv, tls=tmp_path / "tls", auth=("alice", "s3cret"))
    assert server.ca is not None
    monkeypatch.setenv("GIT_SSL_CAINFO", str(server.ca))  # trusted, as a user's CA
    store = tmp_path / "credentials"

    def helper(password: str | None) -> None:
        if password is None:
            git(tmp_path, "config", "--global", "--unset", "credential.helper")
            return
        store.write_text(f"https://alice:{password}@127.0.0.1:{server.port}\n", encoding="utf-8")
        git(tmp_path, "config", "--global", "credential.helper", f"store --file={store}")

    with server.start(probe="remote.git"):
        helper("s3cret")
        ws = new_workspace(tmp_path, server.url("remote.git"), "ws", project=False)
        jpfs(ws, "sync")
        assert git(srv / "remote.git", "rev-parse", "jpfs-record").strip()
        assert "s3cret" not in (ws / ".git" / "config").read_text(encoding="utf-8")

        helper(None)
        refused = jpfs_subprocess("sync", cwd=ws, timeout=60)
        assert refused.returncode != 0
        assert "terminal prompts disabled" in refused.stderr, refused.stderr
        assert "store them with a credential helper" in refused.stderr, refused.stderr

        helper("wrong")
        refused = jpfs_subprocess("sync", cwd=ws, timeout=60)
        assert refused.returncode != 0
        assert "update them in your credential helper" in refused.stderr, refused.stderr
