"""Merging a fork's branch into its caller's workspace, without overwriting anyone's work.

The target is the parent's workspace: the parent's (inherited) branch, checked out in its
worktree, or, at the top, whatever is checked out in the main work tree, where the user
may have uncommitted edits. So the merge is done with plumbing, never ``git merge`` (which would need a clean-ish tree and
could leave a half-merged state behind):

1. ``git merge-tree --write-tree tip branch``: the merged tree, computed in the object
   store only. Conflicts -> :class:`MergeConflict` with the paths; nothing has changed.
2. ``git commit-tree`` the merge commit M (two parents, always: the join stays visible in
   ``git log --graph`` even when a fast-forward would do).
3. ``git update-index --refresh`` then ``git read-tree -m -u tip M``: git's own two-tree
   "switch" (what ``git checkout`` uses). It moves index and working tree from tip to M
   for exactly the paths the merge changes, keeps every other staged or unstaged change,
   and refuses as a whole, before writing anything, if one of those paths has
   uncommitted changes or an untracked file is in the way -> :class:`MergeConflict`
   naming them, nothing changed. It holds ``index.lock`` like any git command, so it
   serialises with the committer's index updates and the user's ``git add``.
4. ``git update-ref REF M tip``: git's own compare-and-swap. jpfs commits on its record
   branch, never here, so only a user's commit can move the branch in between; then
   step 3 is undone (``read-tree -m -u M tip``) and the merge reports it, nothing forced.

Index and working tree are updated before the branch moves, never after: a user's
``git commit`` in between then at worst includes the merged files (and the merge commit
follows with no further change), whereas the other order could let it commit a tree
without them, silently reverting the child's work.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from jpfs.core import locks, record, scope
from jpfs.core.conversation import Conversation
from jpfs.core.workspace import Workspace
from jpfs.errors import GitError, MergeConflict, StateError
from jpfs.infra import git
from jpfs.infra.git import checkout
from jpfs.infra.git.refs import is_ancestor
from jpfs.services.forks.branches import (
    commit_edits,
    commit_tree,
    flock,
    is_ready,
    require_fork,
    rev,
    target_of,
)

if TYPE_CHECKING:
    from jpfs.infra.committer import Identity

_IN_PROGRESS = ("MERGE_HEAD", "CHERRY_PICK_HEAD", "REVERT_HEAD", "rebase-merge", "rebase-apply")
_QUOTED = re.compile(r"'([^']+)'")


@dataclass(frozen=True)
class MergeResult:
    conversation: str
    branch: str
    into: str  # the target branch ("main", "jpfs/a/_") or "HEAD" when detached
    commit: str  # the merge commit; the target's tip when there was nothing to merge
    stat: str  # diff --stat of what the merge brought
    already: bool  # nothing to merge: the branch was already contained in the target

    def summary(self) -> str:
        if self.already:
            return f"{self.conversation}: {self.branch} is already merged into {self.into}"
        head = f"merged {self.conversation} ({self.branch}) into {self.into}: {self.commit[:12]}"
        return f"{head}\n{self.stat.rstrip()}" if self.stat.strip() else head


def merge(
    ws: Workspace, conv_id: str, *, within: str | None = None, author: Identity | None = None
) -> MergeResult:
    """Merge ``conv_id``'s branch into its parent's workspace (see the module docstring).

    ``within`` scopes the id like every tool (only strict descendants of the caller);
    ``author`` authors the merge commit (default: the git identity, i.e. the user).
    """
    conv_id = scope.resolve(ws.conv_root, conv_id, within=within)
    fork = require_fork(ws, conv_id)
    if fork.discarded:
        raise StateError(f"the branch of {conv_id!r} was discarded; there is nothing to merge")
    conv = Conversation(ws.conv_root, conv_id)
    agent = str(conv.meta().get("agent", "")) or None
    # Not while it runs: the merge takes what its branch holds now.
    with locks.conversation_lock(ws.local_dir, conv_id):
        if is_ready(fork.worktree):
            commit_edits(ws, conv_id, agent=agent, note="before merge")
        theirs = rev(ws.root, fork.ref)
        if theirs is None:
            raise GitError(f"branch {fork.branch} of {conv_id!r} is missing: discard it")
        root, parent = target_of(ws, conv_id)
        into = parent.branch if parent is not None else _current_branch(root)
        label = f"merging {conv_id} ({fork.branch}) into {into}"
        subject = f"jpfs({conv_id}): merge {fork.branch} into {into}"
        trailers = [("Jpfs-Conversation", conv_id), ("Jpfs-Event", "merge")]
        if agent:
            trailers.append(("Jpfs-Agent", agent))
        trailers += [(record.MERGED, c) for c in _brought(root, theirs)]
        key = f"worktree:{parent.branch}" if parent is not None else "main"
        with flock(ws, key):
            commit, already = merge_into(
                root,
                theirs,
                label=label,
                subject=subject,
                body=f"Merge branch '{fork.branch}' into {into}",
                trailers=trailers,
                author=author,
            )
        stat = ""
        if not already:
            stat = git.run(root, ["diff", "--stat=100", f"{commit}^1", commit]).stdout.rstrip()
        conv.update(merged=commit, merged_into=into)
        record.commit(ws, conv_id, "merged", agent=agent, note=f"into {into} as {commit[:12]}")
    return MergeResult(conv_id, fork.branch, into, commit, stat, already)


def _brought(root: Path, theirs: str) -> list[str]:
    """The conversations whose commits a merge of ``theirs`` brings into HEAD (nested
    forks merged into the child first included): ``Jpfs-Merged`` names each, so a
    reader of the target's history sees them without walking the branch."""
    proc = git.run(
        root,
        ["log", "--format=%(trailers:key=Jpfs-Conversation,valueonly)", theirs, "--not", "HEAD"],
        ok=(0, 128),
    )
    return sorted({line.strip() for line in proc.stdout.splitlines() if line.strip()})


def _current_branch(root: Path) -> str:
    proc = git.run(root, ["symbolic-ref", "-q", "--short", "HEAD"], ok=(0, 1))
    return proc.stdout.strip() if proc.returncode == 0 else "HEAD"


def merge_into(
    root: Path,
    theirs: str,
    *,
    label: str,
    subject: str,
    body: str,
    trailers: list[tuple[str, str]],
    author: Identity | None,
) -> tuple[str, bool]:
    """Merge commit ``theirs`` into the branch checked out at ``root``; (commit, already)."""
    _refuse_in_progress(root, label)
    ref = _head_ref(root)
    tip0 = rev(root, "HEAD")
    if tip0 is None:
        raise GitError(f"{label}: the target has no commit yet")
    if is_ancestor(root, theirs, tip0):
        return tip0, True

    def merge_commit(tip: str) -> str:
        tree = _merged_tree(root, tip, theirs, label)
        return commit_tree(root, tree, [tip, theirs], subject, trailers, body=body, author=author)

    merged = merge_commit(tip0)
    _switch(root, tip0, merged, label)
    # git's own compare-and-swap: only a user's commit can move the branch meanwhile
    # (jpfs commits on the record branch), and then the merge is undone, not forced.
    moved = git.run(
        root, ["update-ref", "-m", f"merge {theirs[:12]}: {subject}", ref, merged, tip0],
        ok=(0, 1, 128),
    )  # fmt: skip
    if moved.returncode != 0:
        _switch(root, merged, tip0, label)  # index and work tree back to the branch
        raise StateError(
            f"{label}: {ref} moved during the merge ({moved.stderr.strip().splitlines()[-1:]}); "
            "nothing was changed, retry"
        )
    return merged, False


def _head_ref(root: Path) -> str:
    """The ref a merge moves: HEAD's branch, or HEAD itself when detached."""
    proc = git.run(root, ["symbolic-ref", "-q", "HEAD"], ok=(0, 1))
    return proc.stdout.strip() if proc.returncode == 0 else "HEAD"


def _refuse_in_progress(root: Path, label: str) -> None:
    for name in _IN_PROGRESS:
        if Path(root, git.output(root, "rev-parse", "--git-path", name)).exists():
            raise StateError(
                f"{label}: a merge, rebase or cherry-pick is in progress in {root};"
                " finish or abort it first"
            )


def _merged_tree(root: Path, ours: str, theirs: str, label: str) -> str:
    proc = git.run(
        root, ["merge-tree", "--write-tree", "-z", "--name-only", "--no-messages", ours, theirs],
        ok=(0, 1),
    )  # fmt: skip
    tree, *rest = proc.stdout.split("\0")
    if proc.returncode == 1:
        paths = sorted({p for p in rest if p})
        raise MergeConflict(
            f"{label} would conflict in {_paths(paths)}; nothing was changed."
            " Ask the agent to redo its change on the new state, merge by hand"
            " (`git merge BRANCH`), or discard it",
            paths,
        )
    return tree.strip()


def _switch(root: Path, old: str, new: str, label: str) -> None:
    """``read-tree -m -u old new`` (index + working tree), waiting out a busy index.lock."""
    proc = checkout.switch(root, old, new, lock_wait=checkout.LOCK_WAIT)
    if proc.returncode == 0:
        return
    err = proc.stderr
    paths = sorted(set(_QUOTED.findall(err)))
    if not paths or "index.lock" in err:
        raise GitError(f"{label}: {git.complaint(err) or 'read-tree failed'}")
    raise MergeConflict(
        f"{label} would overwrite uncommitted changes in {_paths(paths)};"
        " nothing was changed. Commit or stash them, then retry",
        paths,
    )


def _paths(paths: list[str]) -> str:
    shown = ", ".join(paths[:10])
    return shown + (f" and {len(paths) - 10} more" if len(paths) > 10 else "")
