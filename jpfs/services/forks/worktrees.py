"""Removing forks' worktrees and branches: ``jpfs discard`` and the worktree half of ``jpfs gc``.

The conversation record always stays: discarding marks it (``discarded = <time>``) and
removes its worktree and branch; gc removes only worktrees (a killed child's branch may
still be worth merging, a merged branch costs nothing) and prunes git's worktree list,
so ``git worktree list`` never shows a dangling entry afterwards.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from jpfs.core import ids, locks, record, scope, tree
from jpfs.core.conversation import Conversation, now
from jpfs.core.scope import CONVERSATION_TOML
from jpfs.core.workspace import WORKTREES_DIR, Workspace
from jpfs.errors import FormatError
from jpfs.infra import git
from jpfs.infra.git.refs import is_ancestor
from jpfs.services.forks.branches import (
    Fork,
    admin_dir,
    commit_edits,
    enclosing_fork,
    flock,
    fork_of,
    require_fork,
    rev,
)


@dataclass
class GcReport:
    removed: list[tuple[str, str]] = field(default_factory=list)  # (what, why)
    kept: list[tuple[str, str]] = field(default_factory=list)


def _remove_worktree(ws: Workspace, path: Path) -> None:
    """Remove a worktree directory and its registration; caller holds the layout lock."""
    if admin_dir(path) is not None:
        git.run(ws.root, ["worktree", "remove", "--force", str(path)], ok=(0, 128))
    if path.exists():
        # Unregistered debris (a crash mid-creation) or a worktree git refused to remove.
        shutil.rmtree(path)
    git.run(ws.root, ["worktree", "prune"])


@contextlib.contextmanager
def _holding(ws: Workspace, conv_ids: list[str]) -> Iterator[None]:
    """Hold the run locks of ``conv_ids`` (LockError if one of them is running)."""
    with contextlib.ExitStack() as stack:
        for conv_id in conv_ids:
            stack.enter_context(locks.conversation_lock(ws.local_dir, conv_id))
        yield


def discard(ws: Workspace, conv_id: str, *, within: str | None = None) -> list[str]:
    """Remove the worktree and branch of ``conv_id`` and of every fork below it.

    Forks below it were forked from its branch and could only merge into it, so they
    go too. Conversation records stay (marked ``discarded``). Returns the ids discarded.
    """
    conv_id = scope.resolve(ws.conv_root, conv_id, within=within)
    require_fork(ws, conv_id)
    subtree = [conv_id, *tree.walk(ws.conv_root, conv_id)]
    forks = [f for f in (fork_of(ws, c) for c in subtree) if f is not None and not f.discarded]
    done = []
    with _holding(ws, subtree):
        for fork in reversed(forks):  # deepest first
            with flock(ws, "layout"):
                _remove_worktree(ws, fork.worktree)
                if rev(ws.root, fork.ref) is not None:
                    git.run(ws.root, ["branch", "-D", fork.branch])
            Conversation(ws.conv_root, fork.conv_id).update(discarded=now())
            record.commit(ws, fork.conv_id, "discard", note=fork.branch)
            done.append(fork.conv_id)
    return done


def _forks(ws: Workspace) -> Iterator[tuple[Fork, str]]:
    """Every conversation with a branch, with its status (cheap text check before parsing)."""
    for conv_id in tree.walk(ws.conv_root):
        path = Conversation(ws.conv_root, conv_id).path / CONVERSATION_TOML
        try:
            if "worktree" not in path.read_text(encoding="utf-8"):
                continue
            meta = Conversation(ws.conv_root, conv_id).meta()
            fork = fork_of(ws, conv_id, meta)
        except (OSError, FormatError):
            continue
        if fork is not None:
            yield fork, str(meta.get("status", "active"))


def _in_use(ws: Workspace, conv_id: str) -> bool:
    table = locks.lock_table()
    return any(
        locks.is_locked(ws.local_dir, c, table)
        for c in [conv_id, *tree.walk(ws.conv_root, conv_id)]
    )


def _merged(ws: Workspace, fork: Fork) -> bool:
    """Merged, and nothing committed since: its branch is contained in its target."""
    if fork.merged is None:
        return False
    tip = rev(ws.root, fork.ref)
    parent = enclosing_fork(ws, ids.parent(fork.conv_id))
    target = rev(ws.root, parent.ref if parent is not None else "HEAD")
    return tip is not None and target is not None and is_ancestor(ws.root, tip, target)


def _verdict(ws: Workspace, fork: Fork, status: str) -> str | None:
    """Why the worktree may go (None: keep it). Commits pending edits before deciding."""
    if fork.discarded:
        return "discarded"
    if status == "killed":
        commit_edits(ws, fork.conv_id, note="before gc")
        return "killed"
    if fork.merged is not None:
        commit_edits(ws, fork.conv_id, note="before gc")
        if _merged(ws, fork):
            return "merged"
    return None


def gc(ws: Workspace) -> GcReport:
    """Remove worktrees of killed, discarded and merged forks and of removed conversations.

    Kept (and reported): worktrees in use by a run, and forks still working or with
    unmerged commits. Killed forks keep their branch (it can still be merged or diffed).
    """
    report = GcReport()
    root = (ws.root / WORKTREES_DIR).resolve()
    known: set[Path] = set()
    for fork, status in _forks(ws):
        known.add(fork.worktree.resolve())
        if admin_dir(fork.worktree) is None and not fork.worktree.exists():
            continue
        if _in_use(ws, fork.conv_id):
            report.kept.append((fork.conv_id, "in use by a run"))
            continue
        why = _verdict(ws, fork, status)
        if why is None:
            why_kept = "has commits since its merge" if fork.merged else f"{status}, not merged"
            report.kept.append((fork.conv_id, why_kept))
            continue
        with flock(ws, "layout"):
            _remove_worktree(ws, fork.worktree)
        report.removed.append((fork.conv_id, why))
    with flock(ws, "layout"):
        git.run(ws.root, ["worktree", "prune"])
        for path in sorted(root.iterdir()) if root.is_dir() else []:
            if path.resolve() in known:
                continue
            if admin_dir(path) is None and not (path / ".git").exists() and any(path.iterdir()):
                report.kept.append(
                    (str(path.relative_to(ws.root)), "not a worktree; remove it by hand")
                )
                continue
            _remove_worktree(ws, path)
            report.removed.append((str(path.relative_to(ws.root)), "no conversation uses it"))
        git.run(ws.root, ["worktree", "prune"])
    return report
