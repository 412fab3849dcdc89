"""The Committer: snapshots working-tree paths into commits on the checked-out branch.

``commit()`` snapshots the working-tree state of the named paths (see
:mod:`jpfs.infra.committer.worktree`) and commits it on top of the current tip of the
checked-out branch, or of HEAD itself when detached. The new tree is the tip's tree with
only the trees along changed paths rewritten (:mod:`jpfs.infra.committer.trees`): whatever
others committed meanwhile is kept and nothing the user staged is read. Unchanged blobs
are recognised by hash and never rewritten.

A commit's objects go into one packfile from 16 objects on and are written loose below
that (:mod:`jpfs.infra.committer.objects`); a background geometric repack every 25 packfiles
keeps their number down (:mod:`jpfs.infra.committer.maintenance`). The work tree's index (for
jpfs: the record worktree's, never the user's) is synced
(:mod:`jpfs.infra.committer.userindex`) *before* the branch moves by compare-and-swap
(:mod:`jpfs.infra.committer.refs`); if the tip moved, the commit is rebuilt on the new tip
(bounded retries, then :class:`GitError`). Concurrent calls fold into group commits
(:mod:`jpfs.infra.committer.batch`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pygit2

from jpfs.errors import GitError, JpfsError, RepositoryFault
from jpfs.infra.committer.batch import GroupCommit, Pending
from jpfs.infra.committer.change import Change, Identity
from jpfs.infra.committer.failures import translate
from jpfs.infra.committer.lockfile import LockFile, acquire
from jpfs.infra.committer.maintenance import Maintenance
from jpfs.infra.committer.objects import BLOB, COMMIT, TREE, Objects, commit_object, write_pack
from jpfs.infra.committer.refs import Refs
from jpfs.infra.committer.trees import TreeBuilder, TreeView, same, tree_files
from jpfs.infra.committer.userindex import UserIndex
from jpfs.infra.committer.worktree import Blob, Dir, Worktree, check_path
from jpfs.infra.gitdirs import common_dir

_FALLBACK_NAME = "jpfs"
_FALLBACK_EMAIL = "jpfs@localhost"
_MAX_CAS_ATTEMPTS = 64
_PACK_MIN = 16  # objects from which a commit's objects go into one packfile
_REPACK_EVERY = 25  # packfiles written between two geometric repacks
_DEFAULT_PENDING_TRAILERS: tuple[tuple[str, str], ...] = (("Jpfs-Event", "recover"),)
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
        self._gitdir = Path(self._repo.path)
        self._commondir = common_dir(self._gitdir)
        self._owned = tuple(_normalize_owned(p) for p in owned)
        self._index_lock_timeout = index_lock_timeout
        self._maintenance_every = maintenance_every
        self._fsync = fsync
        if fsync:
            pygit2.settings.enable_fsync_gitdir(True)
        private = self._gitdir / "jpfs"
        common_private = self._commondir / "jpfs"
        self._owners = common_private / "locks"
        for directory in (private, common_private, self._owners):
            try:
                directory.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise GitError(f"cannot create {directory}: {exc.strerror}") from exc
        self._read_config()

        self._group = GroupCommit(self._run_batch, self._reopen)
        self._worktree = Worktree(self._root, self._filemode)
        self._trees = TreeBuilder()
        self._refs = Refs(
            self._gitdir,
            self._commondir,
            self._owners,
            lock_timeout=ref_lock_timeout,
            fsync=fsync,
            log_all=self._log_all,
            committer=lambda: self._identity("COMMITTER", None),
        )
        self._index = UserIndex(
            self._root,
            self._gitdir,
            private,
            self._owners,
            fsync=fsync,
            skip_hash=self._skip_hash,
            head_tree=self._head_tree,
            request_heal=lambda: self._group.submit(Pending(_HEAL, (), heal=True)),
        )
        self._commits = 0
        self._packs = 0
        self._maintenance = Maintenance(
            self._root, self._gitdir, self._commondir, private, common_private
        )
        self._maintenance.sweep_debris()

    # -- public ---------------------------------------------------------------------

    def commit(self, change: Change) -> str | None:
        """Commit the current working-tree state of ``change.paths``.

        Returns the sha of the commit containing the change, or None if none of its
        paths differ from the tip. Raises :class:`ScopeError` for paths outside ``owned``.
        """
        paths = tuple(check_path(self._root, self._owned, p) for p in change.paths)
        return self._group.submit(Pending(change, paths))

    def commit_pending(
        self,
        subject: str = "jpfs: recover uncommitted changes",
        trailers: tuple[tuple[str, str], ...] = _DEFAULT_PENDING_TRAILERS,
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

    # -- configuration ----------------------------------------------------------------

    def _read_config(self) -> None:
        try:
            config = self._repo.config.snapshot()
        except pygit2.GitError as exc:
            raise GitError(f"cannot read git config of {self._root}: {exc}") from exc

        def get(key: str) -> str | None:
            try:
                return str(config[key])
            except (KeyError, pygit2.GitError):
                return None

        self._config_name = get("user.name")
        self._config_email = get("user.email")
        logall = (get("core.logAllRefUpdates") or "true").lower()
        self._log_all = logall in ("true", "yes", "on", "1", "always")
        self._filemode = (get("core.fileMode") or "true").lower() not in ("false", "no", "off", "0")
        # git >= 2.40 writes (and accepts) a null index checksum when asked to: at 100k
        # entries that saves ~5 ms of SHA-1 per index write.
        self._skip_hash = (get("index.skipHash") or "").lower() in ("true", "yes", "on", "1")

    def _identity(self, kind: str, override: Identity | None) -> pygit2.Signature:
        if override is not None:
            name, email = override.name, override.email
        else:
            name = os.environ.get(f"GIT_{kind}_NAME") or self._config_name or _FALLBACK_NAME
            email = os.environ.get(f"GIT_{kind}_EMAIL") or self._config_email or _FALLBACK_EMAIL
        return pygit2.Signature(name, email, int(time.time()), _local_offset_minutes())

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
        _, tip = self._refs.resolve_head()
        tip_tree = self._tree_of(tip)
        view = TreeView(tip_tree)
        reads: dict[str, Blob | Dir | None] = {}
        for item in batch:
            try:
                item.snapshot = [
                    self._worktree.read(self._repo, p, tip_tree, reads, view.contains)
                    for p in item.paths
                ]
            except JpfsError as exc:
                item.fail(exc)
            except OSError as exc:
                item.fail(translate(exc))
        live = [item for item in batch if not item.done]
        if live:
            self._commit_batch(live)

    # -- building and landing commits ----------------------------------------------------

    def _commit_batch(self, live: list[Pending]) -> None:
        ref, tip = self._refs.resolve_head()
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

    def _plan(self, live: list[Pending], tip: str | None) -> _Plan:
        base_tree = self._tree_of(tip)
        base = TreeView(base_tree)
        current: dict[str, Blob | None] = {}
        owner: dict[str, int] = {}
        runs: list[_Run] = []
        all_entries: dict[str, Blob | None] = {}
        for item in live:
            entries: dict[str, Blob | None] = {}
            for path, snap in zip(item.paths, item.snapshot, strict=True):
                if isinstance(snap, Dir):
                    for gone in tree_files(base_tree, path):
                        entries[gone] = None
                    entries.update(snap.files)
                else:
                    if snap is None:
                        for gone in tree_files(base_tree, path):
                            entries[gone] = None
                    if path:
                        entries[path] = snap
            diff = {
                p: blob
                for p, blob in entries.items()
                if not same(current[p] if p in current else base.get(p), blob)
            }
            # Only what changed goes on to the index: a conversation's unchanged events
            # are in it already, and syncing them all made a commit O(events).
            all_entries.update(diff)
            author = item.change.author
            if diff:
                if not runs or runs[-1].author != author:
                    runs.append(_Run(author))
                run_no = len(runs) - 1
                runs[run_no].changes.update(diff)
                runs[run_no].items.append(item)
                current.update(diff)
                owner.update(dict.fromkeys(diff, run_no))
                item.run = run_no
            else:
                owning = [owner[p] for p in entries if p in owner]
                item.run = max(owning) if owning else None
                if item.run is not None:
                    runs[item.run].items.append(item)

        parent = tip
        tree_oid = base_tree.id.raw if base_tree is not None else None
        objects = Objects()
        shas: list[str] = []
        log_msg = ""
        for run in runs:
            for path, blob in run.changes.items():
                data = self._worktree.data(self._repo, path, blob) if blob is not None else None
                if blob is not None and data is not None:
                    objects.add(BLOB, data, blob.oid.raw)
            new_tree = self._trees.build(self._repo, tree_oid, run.changes, objects)
            tree_oid = new_tree if new_tree is not None else objects.add(TREE, b"")
            message, subject = _message(run.items)
            data = commit_object(
                tree_oid,
                [parent] if parent else [],
                self._identity("AUTHOR", run.author),
                self._identity("COMMITTER", None),
                message,
            )
            log_msg = f"commit{'' if parent else ' (initial)'}: {subject}"
            parent = objects.add(COMMIT, data).hex()
            shas.append(parent)
        if objects.items:
            self._write_objects(objects)
        tree = base_tree
        if runs and tree_oid is not None:
            tree = self._repo[pygit2.Oid(raw=tree_oid)].peel(pygit2.Tree)
        return _Plan(shas[-1] if shas else None, shas, all_entries, log_msg, tree)

    def _write_objects(self, objects: Objects) -> None:
        if len(objects.items) >= _PACK_MIN:
            # One packfile instead of dozens of loose files: creating a file is the
            # slowest thing a commit does, and a group commit writes many objects.
            write_pack(self._commondir / "objects" / "pack", objects.items, self._fsync)
            self._packs += 1
            if self._packs % _REPACK_EVERY == 0:
                self._maintenance.repack()
        else:
            odb = self._repo.odb
            for kind, data, _ in objects.items:
                odb.write(kind, data)

    def _tree_of(self, tip: str | None) -> pygit2.Tree | None:
        if tip is None:
            return None
        try:
            commit = self._repo[tip].peel(pygit2.Commit)
        except (KeyError, ValueError, pygit2.GitError) as exc:
            raise RepositoryFault(
                f"HEAD points to {tip}, which is not a readable commit ({exc}): run `git fsck`"
            ) from exc
        try:
            return commit.tree
        except (KeyError, ValueError, pygit2.GitError) as exc:
            raise RepositoryFault(
                f"tree {commit.tree_id} of commit {tip} cannot be read ({exc}): run `git fsck`"
            ) from exc

    def _after_commits(self, count: int) -> None:
        before = self._commits
        self._commits += count
        every = self._maintenance_every
        if every > 0 and before // every != self._commits // every:
            self._maintenance.start()

    def _head_tree(self) -> pygit2.Tree | None:
        _, tip = self._refs.resolve_head()
        return self._tree_of(tip)


@dataclass
class _Run:
    author: Identity | None
    changes: dict[str, Blob | None] = field(default_factory=dict)
    items: list[Pending] = field(default_factory=list)


@dataclass
class _Plan:
    new_tip: str | None
    shas: list[str]
    entries: dict[str, Blob | None]
    log_msg: str
    tree: pygit2.Tree | None  # the tree new_tip (or the unchanged tip) holds


def _normalize_owned(prefix: str) -> str:
    path = prefix.strip("/")
    if not path or any(part in ("", ".", "..") for part in path.split("/")):
        raise ValueError(f"invalid owned prefix {prefix!r}")
    return path


def _local_offset_minutes() -> int:
    return -(time.altzone if time.localtime().tm_isdst > 0 else time.timezone) // 60


def _message(items: list[Pending]) -> tuple[str, str]:
    """The commit message for ``items`` (folded if several) and its subject."""
    trailers = [f"{key}: {value}" for item in items for key, value in item.change.trailers]
    if len(items) == 1:
        subject = items[0].change.subject
        body = ""
    else:
        subject = f"jpfs: {len(items)} changes"
        # The "- " prefix keeps a subject like "Fix: x" from parsing as a trailer.
        body = "\n".join(f"- {item.change.subject}" for item in items) + "\n"
    message = subject + "\n"
    if body:
        message += "\n" + body
    if trailers:
        message += "\n" + "\n".join(trailers) + "\n"
    return message, subject
