"""A shared record when the remote misbehaves: gone, or holding junk where leases go.

The daemon keeps working locally and says what is wrong; `jpfs sync` fails with one
line; nothing written here is lost, and everything reaches the remote once it is back.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from tests.conftest import Result, git, jpfs_subprocess, running_daemon, share_record, wait_until


def sync_status(ws: Path) -> dict[str, object]:
    out = jpfs_subprocess("daemon", "status", "--format", "json", cwd=ws).stdout
    return dict(json.loads(out).get("sync") or {})


def test_a_vanished_remote_leaves_the_daemon_working_and_loses_nothing(
    tmp_path: Path, ws: Path, cli: Callable[..., Result]
) -> None:
    remote = share_record(tmp_path, ws, cli, interval="0.2")
    aside = tmp_path / "aside.git"
    with running_daemon(ws):
        wait_until(lambda: sync_status(ws).get("last_fetch_s") is not None, timeout=20)
        remote.rename(aside)
        notes = ws / "conversations" / "notes" / "files"
        notes.mkdir(parents=True)
        (notes / "a.md").write_text("written while the remote is gone\n", encoding="utf-8")
        # Committed here all the same; the status names the problem.
        wait_until(
            lambda: "a.md" in git(ws / "conversations", "log", "-1", "--name-only"), timeout=20
        )
        wait_until(lambda: sync_status(ws).get("last_error"), timeout=20, message="a sync error")
        failed = cli("sync")
        assert failed.code == 1 and len(failed.stderr.strip().splitlines()) == 1, failed.stderr
        assert "Traceback" not in failed.stderr
        aside.rename(remote)
        wait_until(
            lambda: (
                "notes/files/a.md" in git(remote, "ls-tree", "-r", "--name-only", "jpfs-record")
            ),
            timeout=20,
            message="the edit to reach the remote once it is back",
        )
        wait_until(lambda: not sync_status(ws).get("last_error"), timeout=20)


def test_junk_under_the_lease_refs_is_not_mistaken_for_a_lease(
    tmp_path: Path, ws: Path, cli: Callable[..., Result]
) -> None:
    remote = share_record(tmp_path, ws, cli, interval="0.2")
    empty_tree = git(ws, "hash-object", "-w", "-t", "tree", "/dev/null").strip()
    git(ws, "push", "-q", "origin", f"{empty_tree}:refs/jpfs/leases/junk")
    # Plain files (no task.md): nothing for a daemon to claim, so the junk stays alone.
    (ws / "conversations" / "notes" / "files").mkdir(parents=True)
    (ws / "conversations" / "notes" / "files" / "a.md").write_text("a\n", encoding="utf-8")
    done = cli("sync")
    assert done.code == 0, done.stderr
    assert "notes/files/a.md" in git(remote, "ls-tree", "-r", "--name-only", "jpfs-record")
    with running_daemon(ws):
        status = wait_until(
            lambda: sync_status(ws).get("last_fetch_s") is not None and sync_status(ws)
        )
        assert status["peers"] == {} and status["leases_on_remote"] == 1, status  # type: ignore[index]
        assert not status["last_error"], status  # type: ignore[index]


def test_a_release_naming_a_commit_nobody_has_makes_the_claim_ask_the_remote(
    tmp_path: Path, ws: Path, cli: Callable[..., Result]
) -> None:
    """A tombstone whose ``Jpfs-Released:`` names no commit here (forged, or its record
    never fetched): the claim wins all the same, and fetches the record to be sure."""
    from jpfs.core.workspace import open_workspace
    from jpfs.services.sync import report
    from jpfs.services.sync.engine import SyncEngine
    from jpfs.services.sync.leases import lease_ref

    share_record(tmp_path, ws, cli)
    forged = git(
        ws, "commit-tree", "-m",
        "jpfs lease released: job\n\nJpfs-Conversation: job\nJpfs-Released: " + "ab" * 20,
        git(ws, "hash-object", "-w", "-t", "tree", "/dev/null").strip(),
    ).strip()  # fmt: skip
    git(ws, "push", "-q", "origin", f"{forged}:{lease_ref('job')}")
    engine = SyncEngine(open_workspace(ws))
    engine.fetch()
    assert engine.claim("job")
    timings = engine.timings.snapshot()
    assert timings["claim-fetch"]["count"] == 1 and "claim-known" not in timings
    assert report.status(engine)["leases_held"] == ["job"]


def test_junk_under_the_presence_refs_names_no_machine_and_breaks_nothing(
    tmp_path: Path, ws: Path, cli: Callable[..., Result]
) -> None:
    """A tree, a blob and a stray commit where machines say they are there: no machine
    is made up from them, the daemon's own presence goes beside them, and its status is
    clean."""
    remote = share_record(tmp_path, ws, cli, interval="0.2", machine="desk")
    empty_tree = git(ws, "hash-object", "-w", "-t", "tree", "/dev/null").strip()
    said = tmp_path / "said.txt"
    said.write_text("Jpfs-Present: blob\n", encoding="utf-8")
    blob = git(ws, "hash-object", "-w", str(said)).strip()
    stray = git(ws, "commit-tree", empty_tree, "-m", "not a presence\n\nJpfs-Present:\n").strip()
    for name, oid in (("tree", empty_tree), ("blob", blob), ("stray", stray)):
        git(ws, "push", "-q", "origin", f"{oid}:refs/jpfs/machines/{name}")
    with running_daemon(ws):
        wait_until(
            lambda: sync_status(ws).get("present") == ["desk"],
            timeout=20,
            message="the daemon's own presence, and no other",
        )
        assert not sync_status(ws)["last_error"]
    listed = git(remote, "for-each-ref", "--format=%(refname:lstrip=3)", "refs/jpfs/machines/")
    assert sorted(listed.split()) == ["blob", "stray", "tree"]  # left for the sweep, in time
