"""The git:// relay between git and a server that misbehaves, and clients that do.

Whatever either side does (hang up at once, send junk, stop half way, never speak),
git fails with its own clear error, the relay's threads end, and the next connection
is relayed as before.
"""

from __future__ import annotations

import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from jpfs.infra.git import relay
from tests.conftest import git
from tests.gitservers import Peer
from tests.infra.git.test_relay import relay_threads

pytestmark = pytest.mark.skipif(
    not hasattr(socket, "TCP_QUICKACK"), reason="the relay runs where TCP_QUICKACK exists"
)


def hang_up(conn: socket.socket) -> None:
    pass


def junk(conn: socket.socket) -> None:
    conn.recv(4096)
    conn.sendall(b"\xff\xfe not a pkt-line at all \x00" * 100)


def half_an_answer(conn: socket.socket) -> None:
    conn.recv(4096)
    conn.sendall(b"0045version 2\n")  # says 0x45 bytes, sends fewer, then goes


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "repo"
    git(tmp_path, "init", "-q", str(path))
    yield path


@pytest.mark.parametrize("behave", [hang_up, junk, half_an_answer])
def test_a_misbehaving_server_fails_git_cleanly_and_the_relay_goes_on(
    repo: Path, behave: Callable[[socket.socket], None]
) -> None:
    server = Peer(behave)
    try:
        git(repo, "remote", "add", "origin", f"git://127.0.0.1:{server.port}/r.git")
        with relay.for_remote(repo, "origin") as relays:
            settings = [arg for setting in relays.settings for arg in ("-c", setting)]
            for _ in range(2):  # and again: the relay still serves
                done = subprocess.run(
                    ["git", *settings, "ls-remote", "origin"],
                    cwd=repo,
                    capture_output=True,
                    text=True,
                    errors="replace",  # git quotes the junk it got
                    timeout=60,
                )
                assert done.returncode != 0
                assert "fatal:" in done.stderr, done.stderr
            assert relays.connections() == 2
    finally:
        server.close()
    assert relay_threads() == []


def test_clients_that_never_speak_or_leave_at_once_leak_nothing() -> None:
    answered = threading.Event()

    def answer(conn: socket.socket) -> None:
        if conn.recv(4096) == b"0000":
            answered.set()

    server = Peer(answer)
    try:
        with relay.Relay("127.0.0.1", server.port) as relayed:
            socket.create_connection(("127.0.0.1", relayed.port), timeout=10).close()
            silent = socket.create_connection(("127.0.0.1", relayed.port), timeout=10)
            talker = socket.create_connection(("127.0.0.1", relayed.port), timeout=10)
            talker.sendall(b"0000")
            assert answered.wait(10)
            talker.close()
            # The silent one is still open when the relay closes: close ends it.
        assert silent.recv(10) == b""
        silent.close()
    finally:
        server.close()
    assert relay_threads() == []
