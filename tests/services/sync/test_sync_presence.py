"""Presence (jpfs.services.sync.presence): a daemon says on the remote that it is there,
so that peers rank work with it before any lease; kept fresh, deleted at stop, swept
when left behind; refused, it fails nothing. Real clones, a real bare remote, a real
daemon."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from jpfs.core.workspace import open_workspace
from jpfs.errors import GitError
from jpfs.infra.git.remote import Update
from jpfs.services.sync.engine import SyncEngine
from jpfs.services.sync.presence import MACHINES_NS, Presence, machine_ref
from tests.conftest import Result, clone_sharing, git, running_daemon, share_record, wait_until
from tests.services.sync.test_sync_machines import status

MINUTE = 60.0


def values() -> Callable[[str], str]:
    """A stand-in for LeaseBook.commit: a distinct value per message (no repository
    needed for the bookkeeping)."""
    made: list[str] = []

    def make(message: str) -> str:
        made.append(message)
        return f"{len(made):040x}"

    return make


def tracked(*entries: tuple[str, str, str]) -> dict[str, tuple[str, str]]:
    """Tracking refs as a fetch leaves them: (machine, value, message) each."""
    return {f"track/{machine_ref(m)[len(MACHINES_NS) :]}": (oid, msg) for m, oid, msg in entries}


def said(machine: str) -> str:
    return f"jpfs machine: {machine}\n\nJpfs-Present: {machine}\n"


# -- the bookkeeping ---------------------------------------------------------------------------


def test_a_presence_is_said_at_once_then_every_third_of_its_lifetime() -> None:
    presence = Presence("desk", "inc", MINUTE, values())
    first = presence.due(0.0)
    assert first is not None and first.ref == machine_ref("desk") and first.expect is None
    assert first.new is not None
    presence.pushed(first.new, 0.0)
    assert presence.due(19.9) is None
    again = presence.due(20.0)
    assert again is not None and again.expect == first.new and again.new != first.new
    assert presence.leaving() == Update(machine_ref("desk"), None, first.new)


def test_a_restarted_daemon_replaces_its_predecessors_presence() -> None:
    presence = Presence("desk", "new-incarnation", MINUTE, values())
    assert presence.leaving() is None  # nothing said yet: nothing to delete
    presence.observe(tracked(("desk", "a" * 40, said("desk"))), "track/", 0.0)
    update = presence.due(0.0)
    assert update is not None and update.expect == "a" * 40


def test_a_machine_is_present_while_its_presence_changes() -> None:
    presence = Presence("desk", "inc", MINUTE, values())
    presence.observe(tracked(("laptop", "a" * 40, said("laptop"))), "track/", 0.0)
    assert presence.present(59.9) == {"laptop"}
    assert presence.present(60.0) == set()  # unchanged a lifetime: gone
    presence.observe(tracked(("laptop", "a" * 40, said("laptop"))), "track/", 70.0)
    assert presence.present(70.0) == set()  # the same value seen again is no news
    presence.observe(tracked(("laptop", "b" * 40, said("laptop"))), "track/", 80.0)
    assert presence.present(80.0) == {"laptop"}
    presence.observe({}, "track/", 81.0)
    assert presence.present(81.0) == set()  # deleted: gone at once


def test_junk_under_the_namespace_names_no_machine() -> None:
    presence = Presence("desk", "inc", MINUTE, values())
    presence.observe(
        {"track/x": ("a" * 40, "a stray commit\n"), "track/y": ("b" * 40, "")}, "track/", 0.0
    )
    assert presence.present(0.0) == set()
    assert presence.stale(120.0) == [(MACHINES_NS + "x", "a" * 40), (MACHINES_NS + "y", "b" * 40)]


def test_a_presence_left_unchanged_twice_its_lifetime_is_stale_but_never_our_own() -> None:
    presence = Presence("desk", "inc", MINUTE, values())
    presence.observe(
        tracked(("laptop", "a" * 40, said("laptop")), ("desk", "b" * 40, said("desk"))),
        "track/",
        0.0,
    )
    assert presence.stale(119.9) == []
    assert presence.stale(120.0) == [(machine_ref("laptop"), "a" * 40)]


def test_a_presence_swept_while_we_stalled_is_said_again() -> None:
    presence = Presence("desk", "inc", MINUTE, values())
    first = presence.due(0.0)
    assert first is not None and first.new is not None
    presence.pushed(first.new, 0.0)
    presence.observe({}, "track/", 5.0)  # a peer swept it
    update = presence.due(5.0)
    assert update is not None and update.expect is None


# -- on a real remote --------------------------------------------------------------------------


def presence_refs(remote: Path) -> list[str]:
    return git(remote, "for-each-ref", "--format=%(refname)", MACHINES_NS).split()


def engines(
    ws: Path, tmp_path: Path, cli: Callable[..., Result], *, announced: bool = False
) -> tuple[Path, SyncEngine, SyncEngine]:
    """The remote, a daemon's engine at ``ws`` (machine "desk", announcing) and a plain
    one at a peer clone (machine "laptop"); ``announced``: desk's presence pushed."""
    remote = share_record(tmp_path, ws, cli, machine="desk")
    peer = clone_sharing(remote, tmp_path / "peer", cli)
    assert cli("config", "set", "sync.machine", "laptop", cwd=peer).code == 0
    desk, laptop = SyncEngine(open_workspace(ws), announce=True), SyncEngine(open_workspace(peer))
    if announced:  # the daemon's first cycle: its presence on the remote
        desk.sync_once()
        desk.announce()
    return remote, desk, laptop


def test_peers_rank_work_with_a_daemon_before_it_holds_any_lease(
    ws: Path, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    remote, desk, laptop = engines(ws, tmp_path, cli)
    try:
        laptop.fetch()
        assert laptop.stats.working == set()  # nobody said anything yet
        assert all(laptop.claimer.rank(f"t-{n:04d}") == 0 for n in range(50))
        desk.sync_once()
        desk.announce()
        assert presence_refs(remote) == [machine_ref("desk")]
        laptop.announce()  # a plain engine (jpfs sync, a run without a daemon) says nothing
        assert presence_refs(remote) == [machine_ref("desk")]
        laptop.fetch()
        assert laptop.stats.peers == {} and laptop.stats.working == {"desk"}
        ranks = [laptop.claimer.rank(f"t-{n:04d}") for n in range(200)]
        assert 60 < ranks.count(0) < 140 and set(ranks) == {0, 1}
        pushes = desk.timings.snapshot().get("present", {}).get("count")
        desk.announce()  # not due again for a third of its lifetime
        assert desk.timings.snapshot().get("present", {}).get("count") == pushes == 1
    finally:
        desk.close()
    assert presence_refs(remote) == []  # deleted at stop
    laptop.fetch()
    assert laptop.stats.working == set()
    laptop.close()


def test_a_presence_left_behind_stops_counting_and_is_swept(
    ws: Path, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    remote, desk, laptop = engines(ws, tmp_path, cli, announced=True)
    desk.ssh.close()  # killed: no close(), its presence stays on the remote
    laptop.presence.lifetime = laptop.upkeep.age = 0.5  # not to wait minutes here
    laptop.fetch()
    assert laptop.stats.working == {"desk"}

    def swept() -> bool:
        laptop.fetch()
        laptop.sweep()
        return presence_refs(remote) == []

    wait_until(swept, timeout=20, interval=0.1, message="the presence left behind swept")
    assert laptop.stats.working == set()
    laptop.close()


def test_a_stop_does_not_wait_on_a_remote_that_stopped_answering(
    ws: Path, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    remote, desk, laptop = engines(ws, tmp_path, cli, announced=True)
    remote.rename(tmp_path / "gone.git")
    with pytest.raises(GitError):
        desk.fetch()
    assert desk.stats.unreachable_since
    desk.close()  # no push tried: over a network, one could hang until ssh gives up
    assert desk.timings.snapshot()["present"]["count"] == 1
    (tmp_path / "gone.git").rename(remote)
    assert presence_refs(remote) == [machine_ref("desk")]  # left for the peers' sweep
    laptop.close()


def test_a_refused_presence_is_said_once_and_fails_nothing(
    ws: Path, tmp_path: Path, cli: Callable[..., Result], caplog: pytest.LogCaptureFixture
) -> None:
    remote, desk, _laptop = engines(ws, tmp_path, cli)
    hook = remote / "hooks" / "update"
    hook.write_text(
        '#!/bin/sh\ncase "$1" in refs/jpfs/machines/*) echo "no presence here" >&2; exit 1;; esac\n',
        encoding="utf-8",
    )
    hook.chmod(0o755)
    try:
        with caplog.at_level(logging.WARNING, logger="jpfs.services.sync"):
            desk.sync_once()
            desk.announce()
        assert "refused this machine's presence" in caplog.text
        assert "no presence here" in desk.presence.refused
        assert desk.presence.due(1e9) is None  # never asked again
        assert desk.claim("job")  # the rest goes on
        desk.release("job")
        desk.sync_once()
        assert presence_refs(remote) == []
    finally:
        desk.close()


def test_a_running_daemon_is_present_on_the_remote_and_gone_after_it_stops(
    ws: Path, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    """Its presence is on the remote while it runs, and a peer's presence is in its view
    (`daemon status`: `present`) before that peer holds any lease."""
    remote = share_record(tmp_path, ws, cli, machine="desk", interval="0.2", lease="1")
    peer = clone_sharing(remote, tmp_path / "peer", cli)
    assert cli("config", "set", "sync.machine", "laptop", cwd=peer).code == 0
    laptop = SyncEngine(open_workspace(peer), announce=True)
    try:
        laptop.announce()
        with running_daemon(ws):
            wait_until(
                lambda: (
                    sorted(presence_refs(remote)) == sorted(map(machine_ref, ["desk", "laptop"]))
                ),
                timeout=30,
                message="the daemon's presence on the remote",
            )
            said_by = git(remote, "log", "-1", "--format=%B", machine_ref("desk"))
            assert "Jpfs-Present: desk" in said_by
            wait_until(
                lambda: sync_view(ws).get("present") == ["desk", "laptop"],
                timeout=30,
                message="both machines present in the daemon's view",
            )
            assert sync_view(ws).get("peers") == {}  # no lease: only presence says so
            shown = cli("daemon", "status", cwd=ws).stdout
            assert "peers: laptop" in shown  # present, holding nothing
        assert presence_refs(remote) == [machine_ref("laptop")]
    finally:
        laptop.close()
    assert presence_refs(remote) == []


def sync_view(ws: Path) -> dict[str, object]:
    shown = status(ws).get("sync")
    return dict(shown) if isinstance(shown, dict) else {}
