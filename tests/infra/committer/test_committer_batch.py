"""Group commit: whom a leader waits for, and checks the leader makes for the writers."""

from __future__ import annotations

import os
import queue
import subprocess
import threading
from pathlib import Path

import pytest

from jpfs.errors import ScopeError
from jpfs.infra.committer import Change, Committer, batch
from jpfs.infra.committer.batch import GroupCommit, Pending
from tests.conftest import wait_until

_CHANGE = Change(("a",), "change")


class _Group:
    """A group commit whose batches succeed at once, recording each batch and every
    wait of a gathering leader."""

    def __init__(self) -> None:
        self.batches: list[list[int | None]] = []
        self.waits = 0
        self.release = threading.Event()
        self.release.set()
        self.running = threading.Event()
        self.group = GroupCommit(self._run, lambda: None)
        owner = self

        class Recording(threading.Condition):
            def wait(self, timeout: float | None = None) -> bool:
                owner.waits += 1
                return super().wait(timeout)

        self.group._arrivals = Recording(self.group._mutex)

    def _run(self, batch: list[Pending]) -> None:
        self.running.set()
        self.release.wait()
        self.batches.append([item.writer for item in batch])
        for item in batch:
            item.succeed(None)

    def submit(self) -> None:
        self.group.submit(Pending(_CHANGE, ("a",)))

    def in_thread(self) -> threading.Thread:
        thread = threading.Thread(target=self.submit)
        thread.start()
        return thread


def test_a_thread_that_committed_once_is_not_waited_for() -> None:
    g = _Group()
    g.in_thread().join()  # committed once, then went on to other work
    g.submit()
    g.waits = 0
    # Only this thread wrote the last batch: nobody else is expected back.
    g.submit()
    assert g.waits == 0
    assert g.batches[-1] == [threading.get_ident()]


def test_the_writers_of_the_last_batch_are_waited_for() -> None:
    g = _Group()
    g.release.clear()
    leader = g.in_thread()
    assert g.running.wait(10)
    # Two writers queue while a batch runs, and form the next batch together.
    first, second = g.in_thread(), g.in_thread()
    wait_until(lambda: len(g.group._queue) == 2, message="two writers queued")
    g.release.set()
    for thread in (leader, first, second):
        thread.join()
    assert sorted(g.batches[-1], key=str) == sorted([first.ident, second.ident], key=str)
    g.waits = 0
    # A writer alone: its batch waits a moment for the writers of the last one.
    thread = threading.Thread(target=g.submit)
    thread.start()
    thread.join()
    assert g.waits >= 1
    assert g.batches[-1] == [thread.ident]


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True)
    return done.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    path = tmp_path / "repo"
    path.mkdir()
    _git(path, "init", "-q", "-b", "main")
    _git(path, "config", "user.name", "Ann User")
    _git(path, "config", "user.email", "ann@example.com")
    (path / "README").write_text("readme\n")
    _git(path, "add", "README")
    _git(path, "commit", "-q", "-m", "initial")
    return path


def test_a_path_beyond_a_link_fails_alone(repo: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("secret\n")
    (repo / "conversations/a").mkdir(parents=True)
    (repo / "conversations/a/m.md").write_text("mine\n")
    os.symlink(outside, repo / "conversations/link")
    head = _git(repo, "rev-parse", "HEAD")
    with Committer(repo, owned=("conversations",)) as c:
        with pytest.raises(ScopeError, match="symbolic link"):
            c.commit(Change(("conversations/a/m.md", "conversations/link/secret"), "both"))
        assert _git(repo, "rev-parse", "HEAD") == head  # not even the path before it
        # The link is found again in a later batch: the check is not remembered.
        with pytest.raises(ScopeError, match="symbolic link"):
            c.commit(Change(("conversations/link/secret",), "again"))
        assert c.commit(Change(("conversations/a/m.md",), "mine")) is not None
    assert _git(repo, "ls-tree", "-r", "--name-only", "HEAD").splitlines() == [
        "README",
        "conversations/a/m.md",
    ]


class _Writer:
    """A thread that submits to ``group`` when told: one writer across several rounds."""

    def __init__(self, group: _Group) -> None:
        self._group = group
        self._orders: queue.Queue[bool] = queue.Queue()
        self._done: queue.Queue[bool] = queue.Queue()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while self._orders.get():
            self._group.submit()
            self._done.put(True)

    def submit(self) -> None:
        self._orders.put(True)

    def wait(self) -> None:
        self._done.get(timeout=20)

    def stop(self) -> None:
        self._orders.put(False)
        self.thread.join()


def test_a_round_split_across_two_batches_is_gathered_as_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Four writers committed lately, the last batch was b's alone; in the next round a
    leads and expects b, but c and d come first: they must not complete a's count."""
    monkeypatch.setattr(batch, "_ACTIVE_SECONDS", 60.0)  # however slow the machine
    g = _Group()
    a, b, c, d = (_Writer(g) for _ in range(4))
    try:
        for w in (a, c, d, b):
            w.submit()
            w.wait()
        assert g.batches[-1] == [b.thread.ident]
        # Wide gaps: the arrivals' spacing on a busy machine decides nothing.
        monkeypatch.setattr(batch, "_GATHER_GAP", 1.0)
        monkeypatch.setattr(batch, "_GATHER_MAX", 10.0)
        g.waits = 0
        a.submit()  # leads, and waits for b
        wait_until(lambda: g.waits >= 1, message="the leader to gather")
        c.submit()
        wait_until(lambda: len(g.group._queue) == 2, message="c queued")
        d.submit()
        wait_until(lambda: len(g.group._queue) == 3, message="d queued")
        b.submit()
        for w in (a, b, c, d):
            w.wait()
        idents = [w.thread.ident for w in (a, b, c, d)]
        assert sorted(g.batches[-1], key=str) == sorted(idents, key=str)
        assert len(g.batches) == 5
    finally:
        for w in (a, b, c, d):
            w.stop()
