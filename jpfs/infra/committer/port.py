"""The committer's interface: what jpfs asks of whatever turns file state into commits.

Two implementations: :class:`jpfs.infra.committer.core.Committer`, the fast one jpfs
runs, and :class:`jpfs.infra.committer.reference.ReferenceCommitter`, a plain one built
on git's own plumbing commands that the tests hold the fast one against.
"""

from __future__ import annotations

from typing import Protocol

from jpfs.infra.committer.change import Change

PENDING_SUBJECT = "jpfs: recover uncommitted changes"
PENDING_TRAILERS: tuple[tuple[str, str], ...] = (("Jpfs-Event", "recover"),)


class CommitterPort(Protocol):
    """Commits the working-tree state of owned paths on the branch checked out in a
    work tree, keeping that work tree's index in step."""

    def commit(self, change: Change) -> str | None:
        """Make ``change.creates``, then commit the state of ``change.paths`` (a missing
        path: its deletion; a directory: every non-ignored file under it) as one commit
        on the tip; its sha, or None when nothing differs from the tip."""
        ...

    def commit_pending(
        self,
        subject: str = PENDING_SUBJECT,
        trailers: tuple[tuple[str, str], ...] = PENDING_TRAILERS,
    ) -> str | None:
        """Commit every owned path whose working-tree state differs from HEAD."""
        ...

    def close(self, *, wait: bool = False) -> None:
        """Refuse further commits."""
        ...
