"""Leases across a push that took effect on the remote but failed here, on real clones
and a real bare remote.

The remote is made to update its refs and then die before it reports (git's
``reference-transaction`` hook kills its ``receive-pack`` once the update is committed),
as a connection cut at that moment does: the push fails here, the remote holds our new
value. The lease must stay ours (or be released, as that push said), never be taken
for another machine's: that mistake forfeited the conversation and dropped the turn
its result held, and the turn then ran again (issue #49, "each turn runs once").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from jpfs.core.workspace import open_workspace
from jpfs.errors import GitError
from jpfs.services.sync.engine import SyncEngine
from tests.conftest import Result, git, held_leases, rgit, share_record, wait_until

# Kills receive-pack (its parent) after the refs are updated, before it reports; once
# per ``die-after-update`` file left in the remote (receive-pack runs hooks there).
_HOOK = """#!/bin/sh
if [ "$1" = committed ] && [ -e die-after-update ]; then
    rm -f die-after-update
    kill -9 $PPID
fi
"""


def dying_remote(tmp_path: Path, ws: Path, cli: Callable[..., Result]) -> Path:
    remote = share_record(tmp_path, ws, cli, interval="0.3", lease="1.5")
    hook = remote / "hooks" / "reference-transaction"
    hook.write_text(_HOOK, encoding="utf-8")
    hook.chmod(0o755)
    return remote


def die_at_next_push(remote: Path) -> None:
    (remote / "die-after-update").touch()


def remote_file(remote: Path, path: str) -> str:
    return git(remote, "show", f"jpfs-record:{path}", check=False)


def test_a_renewal_that_landed_but_failed_here_keeps_the_lease_and_the_turn(
    ws: Path, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    remote = dying_remote(tmp_path, ws, cli)
    engine = SyncEngine(open_workspace(ws))
    try:
        assert engine.claim("job")
        # A third of the lease later its renewal is due; the remote takes it, then dies.
        wait_until(lambda: engine.book.due(time.monotonic()), timeout=10)
        die_at_next_push(remote)
        with pytest.raises(GitError):
            engine.push()
        assert not (remote / "die-after-update").exists()  # the hook ran: the ref moved
        # The turn ends: its result, then the release pushed with it.
        (ws / "conversations" / "job").mkdir(parents=True, exist_ok=True)
        (ws / "conversations" / "job" / "result.md").write_text("done\n", encoding="utf-8")
        rgit(ws, "add", "-A")
        rgit(ws, "commit", "-q", "-m", "job: result")
        engine.release("job")
        engine.sync_once()
        # Our own value on the remote was not another machine's claim: nothing forfeit,
        # the result kept here and pushed, the lease released with it.
        assert engine.stats.forfeits == 0 and engine.book.forfeits() == []
        assert (ws / "conversations" / "job" / "result.md").read_text(encoding="utf-8") == "done\n"
        assert remote_file(remote, "job/result.md") == "done\n"
        assert held_leases(remote) == [] and engine.book.held() == []
    finally:
        engine.close()


def test_a_release_that_landed_but_failed_here_is_taken_as_released(
    ws: Path, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    remote = dying_remote(tmp_path, ws, cli)
    engine = SyncEngine(open_workspace(ws))
    try:
        assert engine.claim("job")
        (ws / "conversations" / "job").mkdir(parents=True, exist_ok=True)
        (ws / "conversations" / "job" / "result.md").write_text("done\n", encoding="utf-8")
        rgit(ws, "add", "-A")
        rgit(ws, "commit", "-q", "-m", "job: result")
        engine.release("job")
        die_at_next_push(remote)
        with pytest.raises(GitError):
            engine.push()  # the record and the release, in one atomic push
        assert remote_file(remote, "job/result.md") == "done\n"  # it landed
        engine.sync_once()
        assert engine.stats.forfeits == 0 and engine.book.forfeits() == []
        assert engine.book.held() == [] and held_leases(remote) == []
        assert (ws / "conversations" / "job" / "result.md").read_text(encoding="utf-8") == "done\n"
    finally:
        engine.close()
