"""Refs listed over git:// in the process (jpfs.infra.git.wire) agree with git itself.

The reference is ``git ls-remote`` against the same real ``git daemon``: generated ref
sets (branches, lightweight and annotated tags, jpfs's lease namespace, hundreds of
refs so that answers span many reads), both hash functions, and a version 0
advertisement as ``git upload-pack`` writes it. Then what a remote may do wrong.
"""

from __future__ import annotations

import random
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from jpfs.errors import GitError
from jpfs.infra.git import relay, wire
from tests.conftest import git
from tests.gitservers import GitDaemon, Peer, free_port

PREFIXES = [["refs/heads/jpfs-record"], ["refs/jpfs/leases/"], ["refs/heads/", "refs/tags/v"]]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[GitDaemon]:
    srv = tmp_path / "srv"
    srv.mkdir()
    git(srv, "init", "-q", "--bare", "probe.git")  # to know when it answers
    with GitDaemon(srv).start(probe="probe.git") as daemon:
        yield daemon


def populate(repo: Path, seed: int, count: int) -> None:
    """``count`` refs of every kind under names drawn from ``seed``."""
    rng = random.Random(seed)
    git(repo, "commit", "-q", "--allow-empty", "-m", "first")
    git(repo, "commit", "-q", "--allow-empty", "-m", "second")
    commits = git(repo, "rev-list", "HEAD").split()
    lines = []
    for n in range(count):
        kind = rng.choice(["heads", "tags/v", "tags/x", "jpfs/leases", "notes", "heads/jpfs"])
        name = f"refs/{kind}/{rng.choice(['a', 'b.c', 'd-e', 'f_g'])}{n}"
        lines.append(f"create {name} {rng.choice(commits)}\n")
    lines.append(f"create refs/heads/jpfs-record {commits[0]}\n")
    lines.append(f"create refs/heads/jpfs-record-old {commits[1]}\n")  # a prefix, not the name
    subprocess.run(
        ["git", "update-ref", "--stdin"], cwd=repo, input="".join(lines).encode(), check=True
    )
    for n in range(3):  # annotated: git ls-remote lists the peeled ^{} too; ls-refs does not
        git(repo, "tag", "-a", "-m", "annotated", f"v-annotated{n}", commits[n % 2])


def by_git(url: str, prefixes: list[str], cwd: Path) -> dict[str, str]:
    listed = {}
    for line in git(cwd, "ls-remote", url).splitlines():
        oid, name = line.split("\t")
        if not name.endswith("^{}") and any(name.startswith(p) for p in prefixes):
            listed[name] = oid
    return listed


@pytest.mark.parametrize("object_format", ["sha1", "sha256"])
@pytest.mark.parametrize(("seed", "count"), [(1, 0), (2, 7), (3, 400)])
def test_listed_refs_are_git_ls_remotes(
    tmp_path: Path, served: GitDaemon, object_format: str, seed: int, count: int
) -> None:
    repo = served.root / "remote.git"
    git(served.root, "init", "-q", f"--object-format={object_format}", str(repo))
    populate(repo, seed, count)
    url = served.url("remote.git")
    for prefixes in PREFIXES:
        expected = by_git(url, prefixes, tmp_path)
        assert wire.list_refs(url, prefixes) == expected
    assert "refs/heads/jpfs-record" in wire.list_refs(url, ["refs/heads/jpfs-record"])
    assert len(wire.list_refs(url, ["refs/"])) == len(by_git(url, ["refs/"], tmp_path)) > count


def test_an_empty_repository_lists_nothing(served: GitDaemon) -> None:
    git(served.root, "init", "-q", "--bare", "empty.git")
    assert wire.list_refs(served.url("empty.git"), ["refs/"]) == {}


def answering(
    answer: Callable[[bytes], bytes | None], piece: int = 1 << 16
) -> Callable[[socket.socket], None]:
    """A remote that reads a request and answers ``answer(request)`` (sent in pieces of
    ``piece`` bytes), or says nothing (None), for what a remote may do wrong."""

    def behave(conn: socket.socket) -> None:
        reply = answer(conn.recv(65536))
        if reply is None:
            return
        for start in range(0, len(reply), piece):
            conn.sendall(reply[start : start + piece])
        conn.shutdown(socket.SHUT_WR)
        while conn.recv(65536):
            pass

    return behave


@pytest.fixture
def peers() -> Iterator[Callable[[Callable[[socket.socket], None]], Peer]]:
    made: list[Peer] = []

    def make(behave: Callable[[socket.socket], None]) -> Peer:
        made.append(Peer(behave))
        return made[-1]

    yield make
    for server in made:
        server.close()


def test_a_version_0_advertisement_is_read_and_filtered(
    tmp_path: Path, peers: Callable[..., Peer]
) -> None:
    """A server that does not speak version 2 advertises every ref at once: the bytes
    here are ``git upload-pack``'s own, sent one byte per read."""
    repo = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", str(repo))
    populate(repo, 4, 60)
    advertised = subprocess.run(
        ["git", "upload-pack", "--advertise-refs", str(repo)], capture_output=True, check=True
    ).stdout
    server = peers(answering(lambda request: advertised, piece=1))
    for prefixes in PREFIXES:
        assert wire.list_refs(server.url(), prefixes) == by_git(str(repo), prefixes, tmp_path)


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        (
            relay.pkt_line(b"ERR no such place\n"),
            "remote error from git://127.0.0.1:PORT/remote.git: no such",
        ),
        (b"HTTP/1.1 400 Bad Request\r\n\r\n", "answered outside git's protocol"),
        (relay.pkt_line(b"version 2\n") + b"0000", "does not list refs"),
        (relay.pkt_line(b"version 2\n"), "hung up in the middle of its answer"),
        (relay.pkt_line(b"not an oid at all\n") + b"0000", "listed a ref outside git's protocol"),
        (
            relay.pkt_line(b"version 1\n") + relay.pkt_line(b"%s refs/heads/x\n" % (b"g" * 40)),
            "outside",
        ),
        (b"", "hung up in the middle of its answer"),
    ],
)
def test_a_remote_that_answers_wrong_is_a_git_error(
    peers: Callable[..., Peer], answer: bytes, says: str
) -> None:
    server = peers(answering(lambda request: answer))
    with pytest.raises(GitError) as caught:
        wire.list_refs(server.url(), ["refs/"], timeout=10)
    assert says.replace("PORT", str(server.port)) in str(caught.value)


def test_a_remote_that_says_nothing_times_out(peers: Callable[..., Peer]) -> None:
    quiet = threading.Event()
    server = peers(answering(lambda request: (quiet.wait(30), None)[1]))
    try:
        with pytest.raises(GitError, match="timed out"):
            wire.list_refs(server.url(), ["refs/"], timeout=0.5)
    finally:
        quiet.set()


def test_an_unreachable_remote_is_a_git_error() -> None:
    url = f"git://127.0.0.1:{free_port()}/remote.git"
    with pytest.raises(GitError, match=r"cannot reach git://127\.0\.0\.1:\d+/remote\.git"):
        wire.list_refs(url, ["refs/"])


@pytest.mark.parametrize(
    "url", ["https://example.com/r.git", "git://host", "git://host/a%20b.git", "/srv/r.git"]
)
def test_only_a_plain_git_url_is_a_target(url: str) -> None:
    with pytest.raises(ValueError):
        wire.Target(url)
