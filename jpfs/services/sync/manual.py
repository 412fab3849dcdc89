"""``jpfs sync``: one cycle by hand, for a clone with no daemon."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jpfs.core.workspace import Workspace
from jpfs.errors import ConfigError, GitError
from jpfs.infra.git import refs
from jpfs.services.sync.engine import SyncEngine


@dataclass(frozen=True)
class HandSync:
    """What one ``jpfs sync`` did."""

    remote: str
    machine: str
    committed: str | None  # the commit of edits not committed before, if any
    integrated: str  # "up-to-date", "fast-forward" or "merge"
    head: str | None
    conflicts: list[str]

    def to_json(self) -> dict[str, Any]:
        return {
            "remote": self.remote,
            "machine": self.machine,
            "committed": self.committed,
            "integrated": self.integrated,
            "head": self.head,
            "conflicts": self.conflicts,
        }


def sync_by_hand(ws: Workspace) -> HandSync:
    """``jpfs sync``: commit what was written here, take the remote's record, push ours.

    For a clone with no daemon (a laptop where a human writes ``task.md``); with a
    daemon running it is one more cycle, harmless. Holds no lease: it never acts *for*
    a conversation, it only moves files."""
    if not ws.config.sync.remote:
        raise ConfigError(
            "sync.remote is not set: name the git remote that shares the record,"
            " e.g. `jpfs config set sync.remote origin`"
        )
    ws.ensure_record()
    engine = SyncEngine(ws, share=False)
    try:
        committed = ws.committer.commit_pending(
            "jpfs: edits synced by hand",
            (("Jpfs-Event", "edit"), ("Jpfs-Machine", engine.machine)),
        )
        # Push first when ours simply adds to theirs: what others wait for lands a round
        # trip sooner; a push that loses fetches, merges and pushes as ever.
        outcome = engine.sync_once(eager=True, observe=False)
    finally:
        engine.close()
    if outcome.kind == "busy":
        # Nothing of ours went out (a push must contain theirs): say so, and what to do.
        done = f"your edits are committed here ({committed[:12]}); " if committed else ""
        raise GitError(
            f"the record of {engine.remote} could not be merged here ({outcome.reason});"
            f" {done}nothing was pushed: run `jpfs sync` again"
        )
    head = refs.resolve(ws.root, f"refs/heads/{ws.record_branch}")
    return HandSync(engine.remote, engine.machine, committed, outcome.kind, head, outcome.conflicts)
