"""What a fork's branch changed: its committed changes since the merge base with its
merge target (``jpfs diff``, ``branch_diff``, the diff stat of a status mail).

The branch and worktree themselves are :mod:`jpfs.services.forks.branches`'.
"""

from __future__ import annotations

from jpfs.core import ids
from jpfs.core.workspace import Workspace
from jpfs.errors import GitError, StateError
from jpfs.infra import git
from jpfs.services.forks.branches import Fork, enclosing_fork, fork_of, require_fork, rev


def since(ws: Workspace, conv_id: str) -> tuple[Fork, str]:
    """The fork and the commit its changes are counted from: the merge base with its
    merge target (what a merge would bring), or its recorded base."""
    fork = require_fork(ws, conv_id)
    if fork.discarded:
        raise StateError(f"the branch of {conv_id!r} was discarded")
    if rev(ws.root, fork.ref) is None:
        raise GitError(f"branch {fork.branch} of {conv_id!r} is missing: discard it")
    parent = enclosing_fork(ws, ids.parent(conv_id))
    target = "HEAD" if parent is None else parent.ref
    found = git.run(ws.root, ["merge-base", target, fork.ref], ok=(0, 1))
    start = found.stdout.strip() if found.returncode == 0 and found.stdout.strip() else fork.base
    if start is None:
        raise GitError(f"conversation {conv_id!r} records no base commit")
    return fork, start


def diff(ws: Workspace, conv_id: str, *, stat: bool = False) -> str:
    """The committed changes of ``conv_id``'s branch (patch, or ``--stat`` summary)."""
    fork, start = since(ws, conv_id)
    mode = ["--stat=100"] if stat else ["--patch"]
    return git.run(ws.root, ["diff", "--no-color", "--no-ext-diff", *mode, start, fork.ref]).stdout


def diffstat(ws: Workspace, conv_id: str) -> str:
    """The diff stat for the status mail; "" for conversations without a branch."""
    if fork_of(ws, conv_id) is None:
        return ""
    try:
        text = diff(ws, conv_id, stat=True).rstrip()
    except GitError as exc:
        return f"(no diff: {exc})"
    return text or "no changes"
