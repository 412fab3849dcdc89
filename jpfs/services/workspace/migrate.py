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

import pygit2

from jpfs.core.workspace import Workspace
from jpfs.errors import StateError, WorkspaceError
from jpfs.infra import git


@dataclass(frozen=True)
class Migration:
    branch: str
    commits: int  # record commits written
    tip: str


def migrate(ws: Workspace) -> Migration:
    rel, branch = ws.conv_root_rel, ws.record_branch
    try:
        repo = pygit2.Repository(str(ws.root))
    except pygit2.GitError as exc:
        raise WorkspaceError(f"{ws.root} is not a git repository") from exc
    if repo.references.get(f"refs/heads/{branch}") is not None:
        raise StateError(
            f"branch {branch} exists already; the conversations were migrated"
            f" (or delete that branch to migrate again)"
        )
    try:
        head = repo.head.peel(pygit2.Commit)
    except (pygit2.GitError, KeyError) as exc:
        raise StateError("your branch has no commit yet: there is nothing to migrate") from exc
    chain = [head]
    while chain[-1].parents:
        chain.append(chain[-1].parents[0])
    parent: pygit2.Oid | None = None
    previous: pygit2.Oid | None = None
    count = 0
    for commit in reversed(chain):
        try:
            entry = commit.tree[rel]
        except KeyError:
            continue
        if entry.type != pygit2.GIT_OBJECT_TREE or entry.id == previous:
            continue
        parent = repo.create_commit(
            None, commit.author, commit.committer, commit.message, entry.id,
            [parent] if parent is not None else [],
        )  # fmt: skip
        previous, count = entry.id, count + 1
    if parent is None:
        raise StateError(f"{rel}/ is not tracked on your branch: there is nothing to migrate")
    repo.references.create(f"refs/heads/{branch}", parent)
    git.run(ws.root, ["rm", "-r", "-q", "--cached", "--", rel])
    from jpfs.services.workspace.bootstrap import IGNORE_LINE, add_ignore_lines

    if add_ignore_lines(ws.root, [IGNORE_LINE, f"/{rel}/"]):
        git.run(ws.root, ["add", "--", ".gitignore"])
    ws.ensure_record()
    return Migration(branch, count, str(parent))
