"""A conversation's admission (``.jpfs/local/admitted/``) is one directory per
conversation holding the digest of the snapshot admitted last; it is forgotten once
the conversation is gone, when a daemon starts (a first start or a restart), and never
for one created while its scan listed the others."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from jpfs.core.conversation import Conversation
from jpfs.core.workspace import Workspace, open_workspace
from jpfs.errors import ProfileError
from jpfs.infra.git.objects import Tip
from jpfs.services.daemon.pool import Pool
from jpfs.services.daemon.reconciler import Reconciler
from jpfs.services.workspace import policy
from tests.conftest import Result


def admitted(ws: Workspace) -> Path:
    return ws.local_dir / policy.ADMITTED_DIR


def marks(ws: Workspace, conv_id: str) -> list[str]:
    owner = hashlib.sha256(conv_id.encode()).hexdigest()[:16]
    where = admitted(ws) / owner
    return sorted(os.listdir(where)) if where.is_dir() else []


def made(cli: Callable[..., Result], ws: Workspace, *names: str) -> list[Conversation]:
    for name in names:
        done = cli("conversation", "new", name)
        assert done.code == 0, done.stderr
    return [Conversation(ws.conv_root, name) for name in names]


def test_one_mark_per_conversation_the_snapshot_admitted_last(
    ws: Path, cli: Callable[..., Result]
) -> None:
    workspace = open_workspace(ws)
    (first,) = made(cli, workspace, "first")
    assert len(marks(workspace, "first")) == 1  # admitted when it was created
    before = marks(workspace, "first")

    # A narrower snapshot (the profile lets callers choose the model) replaces it.
    policy.admit(workspace, "first", "default", {**first.config, "model": "claude-haiku-4-5"})
    after = marks(workspace, "first")
    assert len(after) == 1 and after != before

    # The snapshot it had before is checked again if it comes back: admitted again here.
    policy.admit(workspace, "first", "default", first.config)
    assert marks(workspace, "first") == before


def test_a_mark_of_the_old_layout_counts_and_is_moved(ws: Path, cli: Callable[..., Result]) -> None:
    """Marks named by their digest alone (before this layout) still spare a conversation
    its check (a narrower branch must not fail work under way), and are moved."""
    workspace = open_workspace(ws)
    (conv,) = made(cli, workspace, "older")
    shutil.rmtree(admitted(workspace))
    widened = json.loads(json.dumps(conv.config))
    widened["tools"]["allow"] = [*widened["tools"]["allow"], "not_granted_here"]
    with pytest.raises(ProfileError):
        policy.admit(workspace, "older", "default", widened)  # no mark: checked

    text = json.dumps(["older", widened], sort_keys=True, default=str)
    legacy = admitted(workspace) / hashlib.sha256(text.encode()).hexdigest()[:40]
    legacy.parent.mkdir()
    legacy.touch()
    policy.admit(workspace, "older", "default", widened)  # admitted before: not checked
    assert not legacy.exists() and marks(workspace, "older") == [legacy.name]
    other = admitted(workspace) / ("0" * 40)
    other.touch()
    assert policy.keep_admitted(workspace, [], float("inf")) == 1  # "older"'s directory
    assert other.exists()  # whose it is, only its next check can tell


def test_a_removed_conversation_is_forgotten_one_made_meanwhile_is_not(
    ws: Path, cli: Callable[..., Result]
) -> None:
    workspace = open_workspace(ws)
    made(cli, workspace, "kept", "gone")
    owner = admitted(workspace) / hashlib.sha256(b"gone").hexdigest()[:16]
    listed = owner.stat().st_mtime  # its mark is not older than the listing: kept
    assert policy.keep_admitted(workspace, ["kept"], listed) == 0
    assert policy.keep_admitted(workspace, ["kept"], listed + 1) == 1
    assert marks(workspace, "gone") == [] and len(marks(workspace, "kept")) == 1


def test_a_daemon_start_forgets_removed_conversations(ws: Path, cli: Callable[..., Result]) -> None:
    workspace = open_workspace(ws)
    made(cli, workspace, "stays", "removed")
    shutil.rmtree(workspace.conv_root / "removed")
    pool = Pool(1, lambda job: None, lambda conv_id: None)
    try:
        reconciler = Reconciler(workspace, pool, debounce=0.05, settle=0.3, scan_interval=30.0)
        reconciler.head = Tip(workspace.conv_root)
        reconciler.scan(full=False)
        assert len(marks(workspace, "removed")) == 1  # only full scans prune
        reconciler.scan(full=True)
        assert len(marks(workspace, "removed")) == 1  # nor a rescan: the start does
        reconciler.close()  # what a stopped daemon leaves: its next start is incremental
        restarted = Reconciler(workspace, pool, debounce=0.05, settle=0.3, scan_interval=30.0)
        restarted.start()
        assert marks(workspace, "removed") == [] and len(marks(workspace, "stays")) == 1
    finally:
        pool.stop()
        assert pool.join(5.0)
