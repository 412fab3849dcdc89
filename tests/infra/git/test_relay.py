"""The git:// relay (jpfs.infra.git.relay) against a real ``git daemon``.

git itself makes every connection here (fetch, push, clone); the relay must pass it all
through unchanged, report an unreachable remote in git's own words, leave nothing
running when closed, and stay out of the way of a path the user routes.
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from jpfs.infra.git import relay
from jpfs.infra.git import remote as gitremote
from jpfs.infra.git.remote import Update
from tests.conftest import git
from tests.gitservers import GitDaemon, free_port

pytestmark = pytest.mark.skipif(
    not hasattr(socket, "TCP_QUICKACK"), reason="the relay runs where TCP_QUICKACK exists"
)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[GitDaemon]:
    srv = tmp_path / "srv"
    srv.mkdir()
    git(srv, "init", "-q", "--bare", "-b", "main", "remote.git")
    with GitDaemon(srv).start(probe="remote.git") as daemon:
        yield daemon


def relay_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("jpfs-relay")]


def clone_with_remote(tmp_path: Path, name: str, url: str) -> Path:
    repo = tmp_path / name
    git(tmp_path, "init", "-q", "-b", "main", str(repo))
    git(repo, "remote", "add", "origin", url)
    return repo


def test_git_fetches_and_pushes_through_the_relay_as_it_would_directly(
    tmp_path: Path, served: GitDaemon
) -> None:
    url = served.url("remote.git")
    ours = clone_with_remote(tmp_path, "ours", url)
    theirs = clone_with_remote(tmp_path, "theirs", url)
    # Several packets' worth, not compressible: the pack crosses the relay in many reads.
    (ours / "blob.bin").write_bytes(os.urandom(3 * 1024 * 1024))
    git(ours, "add", "blob.bin")
    git(ours, "commit", "-q", "-m", "a big file")
    head = git(ours, "rev-parse", "HEAD").strip()
    with relay.for_remote(ours, "origin") as relays:
        assert relays.upstreams == [f"127.0.0.1:{served.port}"]
        pushed = gitremote.push(
            ours, "origin", [Update("refs/heads/main", head, None, "HEAD")], via=relays.settings
        )
        assert pushed.ok
        # A compare-and-swap that must lose loses through the relay too.
        git(ours, "commit", "-q", "--allow-empty", "-m", "next")
        later = git(ours, "rev-parse", "HEAD").strip()
        stale = gitremote.push(
            ours, "origin", [Update("refs/heads/main", later, None, "HEAD")], via=relays.settings
        )
        assert not stale.ok and "refs/heads/main" in stale.rejected()
        gitremote.fetch(
            theirs, "origin", ["+refs/heads/main:refs/remotes/origin/main"], via=relays.settings
        )
        assert relays.connections() == 3
    assert git(theirs, "rev-parse", "refs/remotes/origin/main").strip() == head
    assert git(theirs, "cat-file", "-s", f"{head}:blob.bin").strip() == str(3 * 1024 * 1024)
    assert git(tmp_path / "srv" / "remote.git", "rev-parse", "main").strip() == head
    assert relay_threads() == []


def test_many_connections_at_once(tmp_path: Path, served: GitDaemon) -> None:
    url = served.url("remote.git")
    repos = [clone_with_remote(tmp_path, f"c{n}", url) for n in range(6)]
    for n, repo in enumerate(repos):
        git(repo, "commit", "-q", "--allow-empty", "-m", f"commit {n}")
    with relay.for_remote(repos[0], "origin") as relays:
        failures: list[BaseException] = []

        def push(n: int, repo: Path) -> None:
            try:
                head = git(repo, "rev-parse", "HEAD").strip()
                done = gitremote.push(
                    repo, "origin", [Update(f"refs/heads/b{n}", head, None, "HEAD")],
                    via=relays.settings,
                )  # fmt: skip
                assert done.ok, done
            except BaseException as exc:  # reported below, on the test thread
                failures.append(exc)

        threads = [threading.Thread(target=push, args=(n, r)) for n, r in enumerate(repos)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert failures == []
        assert relays.connections() == len(repos)
    heads = git(tmp_path / "srv" / "remote.git", "for-each-ref", "--format=%(refname)")
    assert sorted(heads.split()) == [f"refs/heads/b{n}" for n in range(len(repos))]


def test_an_unreachable_remote_is_reported_in_gits_words(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    repo = clone_with_remote(tmp_path, "ours", f"git://127.0.0.1:{port}/remote.git")
    with relay.for_remote(repo, "origin") as relays:
        settings = [arg for setting in relays.settings for arg in ("-c", setting)]
        done = subprocess.run(
            ["git", *settings, "fetch", "origin"], cwd=repo, capture_output=True, text=True
        )
    assert done.returncode != 0
    assert f"remote error: cannot reach 127.0.0.1:{port}: Connection refused" in done.stderr
    assert relay_threads() == []


def test_close_ends_connections_in_flight_and_stops_listening() -> None:
    # A server that accepts and never answers: the relayed connection stays open.
    silent = socket.create_server(("127.0.0.1", 0))
    try:
        upstream_port = silent.getsockname()[1]
        relayed = relay.Relay("127.0.0.1", upstream_port)
        client = socket.create_connection(("127.0.0.1", relayed.port))
        accepted, _ = silent.accept()
        client.sendall(b"0000")
        assert accepted.recv(4) == b"0000"
        relayed.close()
        client.settimeout(10)
        assert client.recv(10) == b""  # ended by the relay
        assert relay_threads() == []
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", relayed.port), timeout=5).close()
        client.close()
        accepted.close()
    finally:
        silent.close()


@pytest.mark.parametrize(
    ("setup", "relayed"),
    [
        ([["remote", "add", "origin", "git://127.0.0.1:9/r.git"]], ["127.0.0.1:9"]),
        ([["remote", "add", "origin", "git://example.test/r.git"]], ["example.test:9418"]),
        ([["remote", "add", "origin", "git://[::1]:9/r.git"]], ["[::1]:9"]),
        (
            [
                ["remote", "add", "origin", "git://a.test/r.git"],
                ["remote", "set-url", "--push", "origin", "git://b.test:7/r.git"],
            ],
            ["a.test:9418", "b.test:7"],
        ),
        ([["remote", "add", "origin", "http://a.test/r.git"]], []),
        ([["remote", "add", "origin", "git://a.test:port/r.git"]], []),
        ([["remote", "add", "other", "git://a.test/r.git"]], []),
        (
            [
                ["remote", "add", "origin", "git://a.test/r.git"],
                ["config", "core.gitProxy", "my-proxy for a.test"],
            ],
            [],
        ),
        (
            [
                ["remote", "add", "origin", "git://a.test/r.git"],
                ["config", "url.git://mirror.test/.insteadOf", "git://a.test/"],
            ],
            [],
        ),
    ],
    ids=[
        "git-port", "git-default-port", "ipv6", "push-url", "http", "bad-port", "other-remote",
        "user-proxy", "user-rewrite",
    ],
)  # fmt: skip
def test_only_git_urls_the_user_does_not_route_are_relayed(
    tmp_path: Path, setup: list[list[str]], relayed: list[str]
) -> None:
    git(tmp_path, "init", "-q", "repo")
    for args in setup:
        git(tmp_path / "repo", *args)
    with relay.for_remote(tmp_path / "repo", "origin") as relays:
        assert relays.upstreams == relayed
        assert len(relays.settings) == len(relayed)
    assert relay_threads() == []


def test_a_proxy_command_in_the_environment_is_left_in_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    git(tmp_path, "init", "-q", "repo")
    git(tmp_path / "repo", "remote", "add", "origin", "git://a.test/r.git")
    monkeypatch.setenv("GIT_PROXY_COMMAND", "my-proxy")
    with relay.for_remote(tmp_path / "repo", "origin") as relays:
        assert relays.settings == ()
