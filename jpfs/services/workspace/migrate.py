"""``jpfs migrate``: move conversations tracked on the user's branch onto the record branch.

Before the record branch, jpfs committed ``conversations/`` onto the checked-out
branch. Migration keeps that history: every commit on the branch's first-parent chain
that changed ``conversations/`` becomes a commit on the record branch with the same
author, committer, date and message (trailers included), its tree being the
conversation root of the original. Then, as the command whose job it is, it removes
``conversations/`` from the user's index (the files stay on disk), adds and stages the
``.gitignore`` line and attaches the record worktree. The user commits the two.
"""

from __future__ import annotations

from dataclasses import dataclass

from jpfs.core.workspace import Workspace
from jpfs.errors import StateError
from jpfs.infra import git
from jpfs.infra.git import objects, refs


@dataclass(frozen=True)
class Migration:
    branch: str
    commits: int  # record commits written
    tip: str


def migrate(ws: Workspace) -> Migration:
    rel, branch = ws.conv_root_rel, ws.record_branch
    store = objects.Store(ws.root)
    if refs.resolve(ws.root, f"refs/heads/{branch}") is not None:
        raise StateError(
            f"branch {branch} exists already; the conversations were migrated"
            f" (or delete that branch to migrate again)"
        )
    chain = store.first_parents()
    if chain is None:
        raise StateError("your branch has no commit yet: there is nothing to migrate")
    parent: str | None = None
    previous: str | None = None
    count = 0
    for commit in chain:
        tree = store.subtree(commit, rel)
        if tree is None or tree == previous:
            continue
        parent = store.copy_commit(commit, tree, parent)
        previous, count = tree, count + 1
    if parent is None:
        raise StateError(f"{rel}/ is not tracked on your branch: there is nothing to migrate")
    store.create_branch(branch, parent)
    git.run(ws.root, ["rm", "-r", "-q", "--cached", "--", rel])
    from jpfs.services.workspace.bootstrap import IGNORE_LINE, add_ignore_lines

    if add_ignore_lines(ws.root, [IGNORE_LINE, f"/{rel}/"]):
        git.run(ws.root, ["add", "--", ".gitignore"])
    ws.ensure_record()
    return Migration(branch, count, parent)
