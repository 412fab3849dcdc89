"""Looks at a git:// remote (jpfs.services.sync.looks): a cycle's fetch skipped when the
remote holds nothing new, and an idle daemon's wait cut short when its record moved.

Real clones, a real ``git daemon`` serving the shared remote, real engines; what is
asserted is which git commands ran (the engine's own step counts) and what the refs
hold afterwards, never how long anything took.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from jpfs.core.workspace import open_workspace
from jpfs.errors import GitError
from jpfs.infra.git import refs
from jpfs.infra.git import remote as gitremote
from jpfs.infra.git.remote import Update
from jpfs.services.sync import cycling
from jpfs.services.sync.engine import SyncEngine
from jpfs.services.sync.leases import LEASE_NS, lease_ref
from tests.conftest import Result, clone_sharing, git, share_record
from tests.gitservers import GitDaemon
from tests.services.sync.test_sync_claims import commit_in_record

Shared = tuple[Path, SyncEngine, SyncEngine, GitDaemon]


def counts(engine: SyncEngine) -> tuple[int, int]:
    """How many fetches and looks ``engine`` made."""
    steps = engine.timings.snapshot()
    return int(steps.get("fetch", {}).get("count", 0)), int(steps.get("look", {}).get("count", 0))


def remote_ref(remote: Path, ref: str) -> str:
    return git(remote, "rev-parse", ref).strip()


@pytest.fixture
def shared(ws: Path, tmp_path: Path, cli: Callable[..., Result]) -> Iterator[Shared]:
    """The remote served over git://, with an engine on ``ws`` and on a peer clone."""
    remote = share_record(tmp_path, ws, cli, interval="2")
    peer = clone_sharing(remote, tmp_path / "peer", cli)
    with GitDaemon(tmp_path).start(probe=remote.name) as served:
        for clone in (ws, peer):
            git(clone, "remote", "set-url", "origin", served.url(remote.name))
        ours, theirs = SyncEngine(open_workspace(ws)), SyncEngine(open_workspace(peer))
        try:
            yield remote, ours, theirs, served
        finally:
            ours.close()
            theirs.close()


def test_a_fetch_that_would_bring_nothing_is_a_look(shared: Shared) -> None:
    remote, ours, theirs, _ = shared
    assert ours.looks.url is not None
    ours.fetch()
    assert counts(ours) == (1, 0)
    ours.fetch(look=True)  # nothing new: looked, not fetched
    assert counts(ours) == (1, 1)
    # A peer's record: fetched, and the tracking ref follows the remote.
    commit_in_record(theirs.ws.root, "job", "note.md", "from the peer\n")
    theirs.sync_once()
    ours.fetch(look=True)
    assert counts(ours) == (2, 2)
    assert refs.resolve(ours.repo, ours.track_record) == remote_ref(remote, "jpfs-record")
    # A peer's claim alone (a lease, no record): fetched too, and seen in our book.
    assert theirs.claim("job")
    ours.fetch(look=True)
    assert counts(ours) == (3, 3)
    seen = ours.book.seen(lease_ref("job"))
    assert seen is not None and seen.oid == remote_ref(remote, lease_ref("job"))


def test_the_cycles_own_pushes_leave_nothing_to_fetch(shared: Shared) -> None:
    """git updates the lease tracking refs the cycle's pushes write, as a fetch would. A
    claim's push (from a worker's thread) does not: a fetch follows it."""
    remote, ours, _, _ = shared
    ours.fetch()
    assert ours.claim("job")
    ours.fetch(look=True)
    assert counts(ours) == (2, 1)
    commit_in_record(ours.ws.root, "job", "result.md", "done\n")
    ours.release("job")
    ours.sync_once()  # the record and the release (a tombstone) pushed together
    ours.fetch(look=True)
    assert counts(ours)[0] == 2
    tracked = refs.resolve(ours.repo, ours.track_leases + lease_ref("job").removeprefix(LEASE_NS))
    assert tracked == remote_ref(remote, lease_ref("job"))
    seen = ours.book.seen(lease_ref("job"))
    assert seen is not None and seen.released == remote_ref(remote, "jpfs-record")


def test_a_fetch_beside_the_cycles_pushes_does_not_fail(shared: Shared) -> None:
    """A fetch off the cycle's thread (after a lost claim) while the cycle's pushes move
    the tracking refs it writes: git refuses a ref that moved under it, and the fetch is
    made again."""
    _, ours, _, _ = shared
    ours.fetch()
    stop, failures = threading.Event(), []
    tree = git(ours.ws.root, "rev-parse", "HEAD^{tree}").strip()

    def push_leases() -> None:
        held: dict[str, str | None] = {}
        n = 0
        while not stop.is_set():
            n += 1
            ref = f"{LEASE_NS}stress{n % 3}"
            value = git(ours.ws.root, "commit-tree", "-m", f"lease {n}", tree).strip()
            pushed = gitremote.push(
                ours.repo, "origin", [Update(ref, value, held.get(ref))], via=ours.cycle_via
            )
            if not pushed.ok:
                failures.append(n)
            held[ref] = value

    pusher = threading.Thread(target=push_leases)
    pusher.start()
    try:
        for _ in range(40):
            ours.fetch()  # raises if a ref moved under it five times in a row
    finally:
        stop.set()
        pusher.join(60)
    assert not failures
    assert counts(ours)[0] >= 41


def test_an_idle_wait_ends_when_the_remote_record_moves(shared: Shared) -> None:
    _, ours, theirs, _ = shared
    ours.fetch()
    ended: list[str] = []
    waiting = threading.Thread(
        target=lambda: ended.append(cycling.wait_cycle(ours, 120.0, lambda: True))
    )
    waiting.start()
    try:
        commit_in_record(theirs.ws.root, "new", "task.md", "# New work\n")
        theirs.sync_once()
        waiting.join(60)  # looks come every interval / 4 (0.5 s); the cycle in 120 s
    finally:
        ours.wake.set()
        waiting.join(10)
    assert ended == ["moved"]


def test_a_busy_daemon_waits_for_its_cycle(shared: Shared) -> None:
    _, ours, theirs, _ = shared
    ours.fetch()
    commit_in_record(theirs.ws.root, "new", "task.md", "# New work\n")
    theirs.sync_once()
    assert cycling.wait_cycle(ours, 1.5, lambda: False) == "due"
    assert counts(ours)[1] == 0  # no look: nothing would start now anyway
    ours.wake.set()
    assert cycling.wait_cycle(ours, 60.0, lambda: True) == "woken"


def test_a_remote_gone_fails_the_fetch_not_the_look(shared: Shared) -> None:
    _, ours, _, served = shared
    ours.fetch()
    served.pause()
    with pytest.raises(GitError):
        ours.fetch(look=True)  # the look failed quietly; the fetch says why
    assert ours.stats.unreachable_since
    assert cycling.wait_cycle(ours, 1.0, lambda: True) == "due"
    served.resume(probe="remote.git")
    ours.fetch(look=True)
    assert not ours.stats.unreachable_since


@pytest.mark.parametrize("setting", ["sync.relay", "url.insteadOf", "core.gitProxy", "2nd url"])
def test_no_look_where_git_would_not_go_straight(
    shared: Shared, setting: str, cli: Callable[..., Result]
) -> None:
    """Off with ``sync.relay = false``, and where the user routes the TCP path (their
    own URL rewrite; a proxy, here for another host) or git fetches from another URL
    (the first of two)."""
    remote, ours, _, served = shared
    base = f"git://127.0.0.1:{served.port}/"
    if setting == "sync.relay":
        assert cli("config", "set", "sync.relay", "false").code == 0
    elif setting == "url.insteadOf":
        git(ours.ws.root, "config", f"url.{base}.insteadOf", base)
    elif setting == "core.gitProxy":
        git(ours.ws.root, "config", "core.gitProxy", "/bin/false for example.com")
    else:
        # git fetches from the first URL, which the user's rewrite makes a path.
        git(ours.ws.root, "config", f"url.{remote}.insteadOf", "alias:")
        git(ours.ws.root, "remote", "set-url", "origin", "alias:")
        git(ours.ws.root, "config", "--add", "remote.origin.url", served.url(remote.name))
    assert_fetches_without_looking(ours.ws.root)


def test_no_look_at_other_transports(ws: Path, tmp_path: Path, cli: Callable[..., Result]) -> None:
    share_record(tmp_path, ws, cli)  # a local path
    assert_fetches_without_looking(ws)


def assert_fetches_without_looking(clone: Path) -> None:
    engine = SyncEngine(open_workspace(clone))
    try:
        assert engine.looks.url is None
        engine.fetch(look=True)
        assert counts(engine) == (1, 0)
    finally:
        engine.close()
