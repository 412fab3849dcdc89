"""Objects read and written in process (libgit2 through pygit2), for the services that
would otherwise run a git process per object, with pygit2's errors translated here.

    blob_id   the id git gives a file's contents (the daemon compares it with HEAD's)
    Tip       a work tree's tip, read-only: its entries and files, what it ignores
    Store     commits written: the lease book's empty ones, migration's copies

A handle is not to be shared between threads (pygit2's rule): a :class:`Tip` serves one
thread; a :class:`Store` is used under its owner's lock.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pygit2

from jpfs.errors import GitError, RepositoryFault
from jpfs.infra.git import identity, refs

_TREE = pygit2.GIT_OBJECT_TREE


def blob_id(data: bytes) -> str:
    """The id of a blob holding ``data`` (nothing is written)."""
    return str(pygit2.hash(data))


def _open(repo: Path) -> pygit2.Repository:
    try:
        return refs.fresh(repo)
    except pygit2.GitError as exc:
        raise GitError(f"{repo} is not a git repository") from exc


class Tip:
    """Read-only view of the tree of ``root``'s HEAD (the daemon reads the record's:
    ``root`` is the record worktree), or of commit ``rev``, taken anew by :meth:`refresh`."""

    def __init__(self, root: Path, rev: str = "HEAD") -> None:
        self._repo = _open(root)
        self._rev = rev
        self._tip: str | None = None
        self._tree: pygit2.Tree | None = None

    def refresh(self) -> str | None:
        """The tip's commit id (None on an unborn branch), its tree read if it moved."""
        try:
            commit = self._repo.revparse_single(self._rev)
        except KeyError:  # an unborn branch: nothing committed yet
            self._tip, self._tree = None, None
            return None
        except pygit2.GitError as exc:
            raise RepositoryFault(
                f"the record's tip cannot be read ({exc}): run `git fsck`"
            ) from exc
        tip = str(commit.id)
        if tip != self._tip:
            head = commit.peel(pygit2.Commit)
            try:
                tree = head.tree
            except pygit2.GitError as exc:
                raise RepositoryFault(
                    f"tree {head.tree_id} of the record's tip {tip} cannot be read ({exc}):"
                    " run `git fsck`"
                ) from exc
            self._tip, self._tree = tip, tree
        return tip

    def entry(self, rel: str) -> tuple[str, int] | None:
        """(blob id, mode) of the file at ``rel``; None when it is absent or a tree."""
        if self._tree is None:
            return None
        try:
            obj = self._tree[rel]
        except KeyError:
            return None
        if obj.type == _TREE:
            return None
        return str(obj.id), int(obj.filemode)

    def files_under(self, rel: str) -> list[str]:
        """The paths of every file in the tree at ``rel`` (none if it is no tree)."""
        if self._tree is None:
            return []
        try:
            node = self._tree[rel]
        except KeyError:
            return []
        if node.type != _TREE:
            return []
        out: list[str] = []
        try:
            stack: list[tuple[str, pygit2.Tree]] = [(rel, node.peel(pygit2.Tree))]
            while stack:
                prefix, tree = stack.pop()
                for item in tree:
                    path = f"{prefix}/{item.name}"
                    if item.type == _TREE:
                        stack.append((path, item.peel(pygit2.Tree)))
                    else:
                        out.append(path)
        except pygit2.GitError as exc:
            raise RepositoryFault(
                f"a tree under {rel} in the record's tip cannot be read ({exc}): run `git fsck`"
            ) from exc
        return out

    def ignored(self, rel: str) -> bool:
        """Whether git ignores ``rel`` (False when it cannot tell)."""
        try:
            return bool(self._repo.path_is_ignored(rel))
        except pygit2.GitError:
            return False


class Store:
    """Commits written into ``repo``'s object database; nothing moves a ref but
    :meth:`create_branch`."""

    def __init__(self, repo: Path) -> None:
        self.repo = repo
        self._repo = _open(repo)

    def empty_commit(self, message: str, parents: Sequence[str], *, epoch: bool = False) -> str:
        """A commit of the empty tree by jpfs's own identity, made now or (``epoch``) at
        time 0, so that every machine makes the same one."""
        try:
            if epoch:
                who = pygit2.Signature(identity.FALLBACK_NAME, identity.FALLBACK_EMAIL, 0, 0)
            else:
                who = pygit2.Signature(identity.FALLBACK_NAME, identity.FALLBACK_EMAIL)
            tree = self._repo.TreeBuilder().write()
            return str(self._repo.create_commit(None, who, who, message, tree, list(parents)))
        except (pygit2.GitError, OSError, ValueError) as exc:
            raise GitError(f"cannot write a commit in {self.repo}: {exc}") from exc

    def first_parents(self) -> list[str] | None:
        """HEAD and its first parents, oldest first; None when HEAD has no commit."""
        try:
            head = self._repo.head.peel(pygit2.Commit)
        except (pygit2.GitError, KeyError):
            return None
        try:
            chain = [head]
            while chain[-1].parents:
                chain.append(chain[-1].parents[0])
        except pygit2.GitError as exc:
            raise GitError(f"the history of HEAD in {self.repo} cannot be read: {exc}") from exc
        return [str(commit.id) for commit in reversed(chain)]

    def subtree(self, commit: str, path: str) -> str | None:
        """The id of the tree at ``path`` in ``commit``; None when that is no tree."""
        try:
            entry = self._commit(commit).tree[path]
        except KeyError:
            return None
        except pygit2.GitError as exc:
            raise GitError(f"the tree of {commit} cannot be read: {exc}") from exc
        return str(entry.id) if entry.type == _TREE else None

    def copy_commit(self, commit: str, tree: str, parent: str | None) -> str:
        """A commit of ``tree`` on ``parent`` with ``commit``'s author, committer, dates
        and message."""
        original = self._commit(commit)
        parents = [pygit2.Oid(hex=parent)] if parent else []
        try:
            copy = self._repo.create_commit(
                None, original.author, original.committer, original.message,
                pygit2.Oid(hex=tree), parents,
            )  # fmt: skip
            return str(copy)
        except (pygit2.GitError, OSError, ValueError) as exc:
            raise GitError(f"cannot write a copy of {commit} in {self.repo}: {exc}") from exc

    def create_branch(self, name: str, commit: str) -> None:
        """Branch ``name`` at ``commit``; refused if it exists."""
        try:
            self._repo.references.create(f"refs/heads/{name}", pygit2.Oid(hex=commit))
        except (pygit2.GitError, ValueError) as exc:
            raise GitError(f"cannot create branch {name}: {exc}") from exc

    def _commit(self, commit: str) -> pygit2.Commit:
        try:
            found = self._repo.get(commit)
        except (pygit2.GitError, ValueError) as exc:
            raise GitError(f"commit {commit} cannot be read: {exc}") from exc
        if not isinstance(found, pygit2.Commit):
            raise GitError(f"{commit} is not a commit")
        return found
