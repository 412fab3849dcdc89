"""The Committer: snapshots working-tree paths into commits on the checked-out branch.

``commit()`` snapshots the working-tree state of the named paths (see
:mod:`jpfs.infra.committer.worktree`) and commits it on top of the current tip of the
checked-out branch, or of HEAD itself when detached. The commits are planned by
:mod:`jpfs.infra.committer.plan`: the tip's tree with only the trees along changed paths
rewritten (:mod:`jpfs.infra.committer.trees`), so whatever others committed meanwhile is
kept and nothing the user staged is read.

A commit's objects go into one packfile, protected by a ``.keep`` file until the ref
reaches them (:mod:`jpfs.infra.committer.objects`: a user's ``git gc --prune=now`` never
drops them); a background geometric repack once 25 packfiles are there keeps their
number down (:mod:`jpfs.infra.committer.maintenance`). The work tree's index (for
jpfs: the record worktree's, never the user's) is synced
(:mod:`jpfs.infra.committer.userindex`) *before* the branch moves by compare-and-swap
(:mod:`jpfs.infra.committer.refs`); if the tip moved, the commit is rebuilt on the new tip
(bounded retries, then :class:`GitError`). Concurrent calls fold into group commits
(:mod:`jpfs.infra.committer.batch`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pygit2

from jpfs.errors import (
    ExistsError,
    GitError,
    JpfsError,
    NotFoundError,
    RepositoryFault,
    ScopeError,
)
from jpfs.infra.committer import settings
from jpfs.infra.committer.batch import GroupCommit, Pending
from jpfs.infra.committer.change import Change
from jpfs.infra.committer.failures import translate
from jpfs.infra.committer.lockfile import LockFile, acquire
from jpfs.infra.committer.maintenance import Maintenance
from jpfs.infra.committer.objects import Objects, write_pack
from jpfs.infra.committer.plan import Plan, Planner
from jpfs.infra.committer.port import PENDING_SUBJECT, PENDING_TRAILERS
from jpfs.infra.committer.refs import Refs
from jpfs.infra.committer.trees import TreeCache, TreeView
from jpfs.infra.committer.userindex import UserIndex
from jpfs.infra.committer.worktree import Blob, Dir, Worktree, check_path, refuse_links
from jpfs.infra.git.dirs import common_dir
from jpfs.infra.textfile import create_new

_MAX_CAS_ATTEMPTS = 64
_TIPS_MAX = 256
_REPACK_EVERY = 25  # packfiles written between two geometric repacks
_HEAL = Change((), "jpfs: heal the index")


class Committer:
    """Commits working-tree state of jpfs-owned paths; safe to share between threads.

    ``owned`` lists the repo-relative prefixes this committer may commit (files or
    directories). Nothing under ``.jpfs/local/`` is ever committed.
    """

    def __init__(
        self,
        repo_root: Path,
        *,
        owned: Sequence[str] = (),
        index_lock_timeout: float = 2.0,
        ref_lock_timeout: float = 10.0,
        maintenance_every: int = 500,
        fsync: bool = False,
    ) -> None:
        try:
            self._repo = pygit2.Repository(str(repo_root))
        except (pygit2.GitError, KeyError, OSError) as exc:
            raise GitError(f"{repo_root} is not a git repository: run `git init` there") from exc
        workdir = self._repo.workdir
        if not workdir:
            raise GitError(f"{repo_root} is a bare repository; jpfs needs a working tree")
        self._root = Path(workdir)
        self._root_str = os.fspath(self._root)
        self._gitdir = Path(self._repo.path)
        self._commondir = common_dir(self._gitdir)
        self._owned = tuple(_normalize_owned(p) for p in owned)
        self._index_lock_timeout = index_lock_timeout
        self._maintenance_every = maintenance_every
        self._fsync = fsync
        if fsync:
            pygit2.settings.enable_fsync_gitdir(True)
        private = self._gitdir / "jpfs"
        common_private = self._common_private = self._commondir / "jpfs"
        self._owners = common_private / "locks"
        for directory in (private, common_private, self._owners):
            try:
                directory.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise GitError(f"cannot create {directory}: {exc.strerror}") from exc
        self._settings = settings.read(self._repo, self._root)

        self._group = GroupCommit(self._run_batch, self._reopen)
        self._worktree = Worktree(self._root, self._settings.filemode)
        self._trees = TreeCache()
        self._tips: dict[str, bytes] = {}  # commit -> its tree, for the tips we saw
        self._planner = Planner(self._worktree, self._trees, self._settings.signature)
        self._refs = Refs(
            self._gitdir,
            self._commondir,
            self._owners,
            lock_timeout=ref_lock_timeout,
            fsync=fsync,
            log_all=self._settings.log_all,
            committer=lambda: self._settings.signature("COMMITTER", None),
        )
        self._index = UserIndex(
            self._root,
            self._gitdir,
            private,
            self._owners,
            fsync=fsync,
            skip_hash=self._settings.skip_hash,
            split=self._settings.split,
            head_tree=self._head_tree,
            request_heal=lambda: self._group.submit(Pending(_HEAL, (), heal=True)),
        )
        self._commits = 0
        self._packs = 0
        self._kept: list[Path] = []  # .keep files of packs no ref reaches yet
        self._maintenance = Maintenance(
            self._root, self._gitdir, self._commondir, private, common_private
        )
        self._maintenance.sweep_debris()

    # -- public ---------------------------------------------------------------------

    def commit(self, change: Change) -> str | None:
        """Commit the current working-tree state of ``change.paths``.

        Returns the sha of the commit containing the change, or None if none of its
        paths differ from the tip. Raises :class:`ScopeError` for paths outside ``owned``
        or beyond a symbolic link (then nothing of the change is committed).

        The files of ``change.creates`` are made first, by the thread that commits the
        batch: a writer's file creation then costs the other writers no hand-offs of
        the interpreter lock (50 writer threads: 15.7 -> 4.7 context switches and 560 ->
        180 us of CPU per write outside the batch). One whose name exists is
        :class:`ExistsError`, one whose directory is missing :class:`NotFoundError`, and
        the change is not committed; files it made before that one stay, uncommitted.
        """
        paths = tuple(check_path(self._owned, p) for p in change.paths)
        creates = tuple((check_path(self._owned, p), text) for p, text in change.creates)
        for path, _ in creates:
            if not any(path == p or path.startswith(p + "/") or not p for p in paths):
                raise ScopeError(f"{path!r} is created by a change that does not commit it")
        return self._group.submit(Pending(change, paths, creates=creates))

    def commit_pending(
        self,
        subject: str = PENDING_SUBJECT,
        trailers: tuple[tuple[str, str], ...] = PENDING_TRAILERS,
    ) -> str | None:
        """Commit every owned path whose working-tree state differs from HEAD.

        Crash recovery: a file written but never committed (process killed in between) is
        picked up here. Untracked files are included unless git-ignored.
        """
        # A missing prefix snapshots as "delete whatever is tracked there", so every
        # owned prefix can be named; the leader alone touches the repository.
        paths = self._owned or ("",)
        return self._group.submit(Pending(Change(paths, subject, trailers), paths))

    def close(self, *, wait: bool = False) -> None:
        """Refuse further commits; with ``wait``, also let background maintenance end.

        Otherwise a running ``git gc``/``git repack`` finishes on its own.
        """
        if self._group.close():
            self._index.close()
            self._repo.free()
        if wait:
            self._maintenance.wait()

    def __enter__(self) -> Committer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing ----------------------------------------------------------------------

    def _reopen(self) -> None:
        self._repo = pygit2.Repository(str(self._root))

    def _acquire(
        self, target: Path, timeout: float, *, required: bool, content: bytes = b""
    ) -> LockFile | None:
        """Take ``<target>.lock`` git-style (see :func:`jpfs.infra.committer.lockfile.acquire`)."""
        return acquire(target, self._owners, timeout, required=required, content=content)

    # -- one batch ------------------------------------------------------------------------

    def _run_batch(self, batch: list[Pending]) -> None:
        if all(item.heal for item in batch):
            self._index.heal()
            for item in batch:
                item.succeed(None)
            return
        for item in batch:
            if item.heal:
                item.succeed(None)  # the commit below re-syncs recent paths anyway
        batch = [item for item in batch if not item.heal]
        ref, tip = self._refs.resolve_head()
        view = self._trees.view(self._repo, self._tree_of(tip))
        reads: dict[str, Blob | Dir | None] = {}
        checked: set[str] = set()
        for item in batch:
            try:
                for path in item.paths:
                    refuse_links(self._root_str, path, checked)
                if item.creates and not item.created:
                    self._create(item)
            except JpfsError as exc:
                item.fail(exc)
            except OSError as exc:
                item.fail(translate(exc))
        # Every file made before any is read: the changes of a batch may share a
        # directory, and a path is read once per batch.
        for item in batch:
            if item.done:
                continue
            try:
                item.snapshot = [
                    self._worktree.read(self._repo, p, view, reads) for p in item.paths
                ]
            except JpfsError as exc:
                item.fail(exc)
            except OSError as exc:
                item.fail(translate(exc))
        live = [item for item in batch if not item.done]
        if live:
            self._commit_batch(live, ref, tip)

    def _create(self, item: Pending) -> None:
        """Make the files of ``item.creates`` (its directories checked by the caller)."""
        for path, text in item.creates:
            try:
                made = create_new(Path(self._root_str, path), text, parents=False, root=self._root)
            except (FileNotFoundError, NotADirectoryError) as exc:
                raise NotFoundError(f"cannot create {path}: its directory is missing") from exc
            if not made:
                raise ExistsError(f"{path} already exists; nothing of the change was committed")
        item.created = True

    # -- building and landing commits ----------------------------------------------------

    def _commit_batch(self, live: list[Pending], ref: str, tip: str | None) -> None:
        try:
            self._land(live, ref, tip)
        finally:
            # The objects are reachable now (or never will be): gc may have them.
            for kept in self._kept:
                kept.unlink(missing_ok=True)
            self._kept.clear()

    def _land(self, live: list[Pending], ref: str, tip: str | None) -> None:
        # ``tip`` as the snapshot was taken: if the ref moved since, the compare-and-swap
        # fails and the commit is rebuilt on the new tip.
        plan = self._plan(live, tip)
        if plan.new_tip is None and self._index.agrees(plan.entries, plan.tree):
            for item in live:
                item.succeed(None)  # nothing to commit, nothing to fix: no lock needed
            return
        index_lock = self._acquire(self._gitdir / "index", self._index_lock_timeout, required=False)
        try:
            for _attempt in range(_MAX_CAS_ATTEMPTS):
                # The index is written *before* the ref moves: `git commit` reads HEAD,
                # then the index, both before taking index.lock. Whoever sees our new
                # HEAD must also see our index, or its commit would revert our files;
                # whoever saw the old HEAD fails its compare-and-swap and rolls back.
                if index_lock is not None:
                    self._index.sync(plan.entries, plan.tree)
                if plan.new_tip is None or self._refs.move(ref, tip, plan.new_tip, plan.log_msg):
                    break
                ref, tip = self._refs.resolve_head()
                plan = self._plan(live, tip)
            else:
                raise GitError(
                    f"could not update {ref}: it kept moving under "
                    f"{_MAX_CAS_ATTEMPTS} attempts; retry when other git writers are idle"
                )
            if index_lock is not None:
                self._index.debt.clear()
            else:
                self._index.debt.update(plan.entries)
            if plan.new_tip is not None:
                self._index.remember(plan.entries)
            for item in live:
                item.succeed(plan.shas[item.run] if item.run is not None else None)
            if plan.new_tip is not None:
                self._after_commits(len(plan.shas))
        finally:
            if index_lock is not None:
                index_lock.release()

    def _plan(self, live: list[Pending], tip: str | None) -> Plan:
        plan = self._planner.plan(self._repo, live, tip, self._tree_of(tip))
        if plan.objects.items:
            self._write_objects(plan.objects)
        if plan.new_tip is not None and plan.tree.root is not None:
            if len(self._tips) >= _TIPS_MAX:
                self._tips.clear()
            self._tips[plan.new_tip] = plan.tree.root
        return plan

    def _write_objects(self, objects: Objects) -> None:
        # Always one packfile, kept until the ref moves (see objects.write_pack): a
        # loose object written before the ref reaches it is what a user's
        # `git gc --prune=now` deletes, leaving the branch pointing at a missing tree.
        pack_dir = self._commondir / "objects" / "pack"
        kept = write_pack(
            pack_dir, objects.items, self._fsync, keep=True, tmp_dir=self._common_private
        )
        if kept is not None:
            self._kept.append(kept)
        self._packs += 1
        if self._packs % _REPACK_EVERY == 0 or self._packs == 1:
            self._repack_if_many(pack_dir)

    def _repack_if_many(self, pack_dir: Path) -> None:
        """Roll packfiles up once there are many, whoever wrote them: one-shot commands
        each write a few, and git's own `gc --auto` repacks everything at 50."""
        try:
            count = sum(1 for e in os.scandir(pack_dir) if e.name.endswith(".idx"))
        except OSError:
            return
        if count >= _REPACK_EVERY:
            self._maintenance.repack()

    def _tree_of(self, tip: str | None) -> bytes | None:
        """The id of commit ``tip``'s tree (ours are remembered: commits are immutable)."""
        if tip is None:
            return None
        tree = self._tips.get(tip)
        if tree is not None:
            return tree
        try:
            commit = self._repo[tip].peel(pygit2.Commit)
        except (KeyError, ValueError, pygit2.GitError) as exc:
            raise RepositoryFault(
                f"HEAD points to {tip}, which is not a readable commit ({exc}): run `git fsck`"
            ) from exc
        tree = commit.tree_id.raw
        self._tips[tip] = tree
        return tree

    def _after_commits(self, count: int) -> None:
        before = self._commits
        self._commits += count
        every = self._maintenance_every
        if every > 0 and before // every != self._commits // every:
            self._maintenance.start()

    def _head_tree(self) -> TreeView:
        _, tip = self._refs.resolve_head()
        return self._trees.view(self._repo, self._tree_of(tip))


def _normalize_owned(prefix: str) -> str:
    path = prefix.strip("/")
    if not path or any(part in ("", ".", "..") for part in path.split("/")):
        raise ValueError(f"invalid owned prefix {prefix!r}")
    return path
