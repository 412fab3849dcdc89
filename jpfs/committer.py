"""The one committer: every jpfs state change becomes a git commit through here.

Commits
=======
``commit()`` snapshots the working-tree state of the named paths (a file's blob and mode,
a missing file as a deletion, a directory as every non-ignored file under it plus
deletions of tracked files that vanished) and commits it on top of the current tip of the
checked-out branch, or of HEAD itself when detached. The new tree is the tip's tree with
only the trees along changed paths rewritten (serialised here, with the few trees along
jpfs's paths cached): whatever others committed meanwhile is kept and nothing the user
staged is read. Unchanged blobs are recognised by hash and never rewritten.

*Objects.* Creating a file is the most expensive thing a commit does on a busy disk
(0.1-1 ms each), and a group commit of 30 changes makes ~60 objects. A commit's objects
therefore go into one packfile (pack and index, version 2) from 16 objects on, and are
written loose below that. A background ``git repack -d --geometric=2`` every 25
packfiles keeps their number logarithmic, far below the 50 at which any ``git gc
--auto`` would repack everything. libgit2 fails hard, without refreshing, when a
packfile it had indexed was deleted by a concurrent repack; a batch that hits this is
retried once with a freshly opened repository (nothing is committed before the ref
moves).

*Moving the branch.* pygit2's ``Reference.set_target`` is a real compare-and-swap
(libgit2's ``git_reference_set_target`` passes the reference's old oid to
``git_reference_create_matching``; the files backend compares it under ``<ref>.lock`` and
fails with ``GIT_EMODIFIED``). We still run git's lock protocol ourselves (create
``<ref>.lock`` exclusively holding the new value, re-read the loose ref or
``packed-refs`` under it, compare, append the reflogs, rename the lock over the ref),
because only then can the lock be marked as ours (see *Stale locks*): a SIGKILL inside
libgit2's window would leave an anonymous ``refs/heads/<b>.lock`` that blocks every
later commit. Measured on the 2-core dev box: libgit2 ``set_target`` ~0.36 ms, this
protocol ~0.42 ms (with the registration and both reflog appends), ``git update-ref NEW
OLD`` ~2.9 ms. If the tip moved, the commit is rebuilt on the new tip (bounded retries,
then :class:`GitError`).

*Group commit.* ``commit()`` calls from threads of one process queue up; the first caller
becomes leader and commits everything queued (consecutive changes with the same author
share one commit), the others wait on a condition and get the sha of the commit holding
their change. A leader that sees other writers active waits up to 5 ms for them to
re-queue, so concurrent writers fold into one commit per round. Processes serialise on
the index and ref locks.

The user's index
================
After a commit, ``git status`` shows the committed paths clean: their index entries are
set to the committed state, nothing else is touched. This happens while we hold
``<gitdir>/index.lock`` (the lock ``git add``/``git commit`` take), and the index is
written *before* the ref moves. ``git commit`` reads HEAD and then the index before it
takes ``index.lock``, and its ref update is a compare-and-swap against the HEAD it read:
whoever sees our new HEAD therefore also sees our index, and a commit that saw the old
HEAD fails and changes nothing (writing the index after the ref would let it commit our
new HEAD with our files reverted). If ``index.lock`` stays busy for ``index_lock_timeout``
(2 s; ``git commit`` holds it while the editor is open) we commit without touching the
index, and the next commit that gets the lock syncs those paths.

git's own lost-update race remains: a plain ``git commit`` writes back the index it read
before locking (refreshed stat data, cache-tree) even when its ref update then fails. A
retry started within milliseconds would see our HEAD without our entries and revert our
files. We shrink that window: when we find the index rewritten by someone else, we
re-sync the paths committed in the last 10 s (up to 128), at the next commit and, for
10 s after a commit, within 10 ms from a watcher that polls the index's stat. The
working-tree files survive in any case, and ``commit_pending()`` recommits them.

Writing a 100k-entry index with libgit2 costs ~33 ms (SHA-1DC hashing), more than the
whole rest of a commit, so the index is handled by a small codec here: entries stay in
memory as their on-disk bytes in chunks with cached joined bytes, re-parsed only when
the file's stat identity changed (someone else wrote it); changes go in by bisect; the
file is re-emitted with a gathered write and OpenSSL SHA-1 (~10-13 ms at 100k entries,
~1-2 ms at 10k, dominated by hashing and ext4's flush on rename-over). New entries carry
the stat data of the file we read (fstat before reading, as git does), so ``git status``
does not rehash them. As in git, entries racily clean relative to the index being
replaced are re-checked against the working tree and smudged (size 0) if modified. The
cache-tree (``TREE``) is invalidated along changed paths exactly like git's
``cache_tree_invalidate_path``; ``REUC`` is kept; other optional extensions (``UNTR``,
``FSMN``, ``EOIE``, ``IEOT``) are dropped, which only costs git a rebuild. Index version
4 goes through libgit2 (slower; entries without stat data). Split or sparse indexes
(mandatory extensions ``link``, ``sdir``) are left alone: the commit lands and
``git status`` lists the paths until the user's next ``git add``/``git reset``.

Stale locks
===========
git never removes a stale ``*.lock``; users do, by hand. We must never remove a lock a
live process holds (git or jpfs), and age proves nothing: ``git commit`` holds
``index.lock`` for as long as the editor is open. So a lock is broken only when it is
provably ours and its creator provably dead:

* Each process keeps one marker file ``<common>/jpfs/locks/proc-<pid>-<rand>`` under an
  exclusive ``flock`` for its lifetime; the kernel drops the flock when the process
  dies, however it dies.
* A lock is built as an unnamed ``O_TMPFILE`` in the lock's directory holding its final
  content (the new ref value, or a random token for ``index.lock``), registered by
  hard-linking the marker as ``<dev>-<ino>-<content digest>``, and only then named
  ``X.lock`` with ``linkat``, which fails if the name exists (git's ``O_EXCL``). So the
  lock appears already registered: no crash leaves an anonymous lock of ours. (Without
  ``O_TMPFILE`` we fall back to ``O_EXCL`` + register, where a crash between the two
  calls leaves an anonymous lock, as a crashed git does; the error names the file.)
* A contender finding ``X.lock`` looks up the registration from the lock's dev, inode
  and content. None: a foreign (git) lock; wait, never break it. If ``flock(LOCK_NB)``
  on it succeeds, the creator is dead: after checking that the registration name still
  points at the inode it locked (a concurrent breaker) and the lock is unchanged, it
  removes the lock, then the registration.
* Holders and breakers remove the lock before its registration. A registration that
  outlives its lock is inert, because the content digest keeps a later git lock that
  reuses the inode from matching it. Sweeps at start-up and during maintenance remove
  such registrations and dead markers.

Crash safety and durability
===========================
Objects are written before the ref; refs and the index are replaced by ``rename``;
reflog lines are single ``O_APPEND`` writes. A SIGKILL at any point leaves ``git fsck``
clean (at worst dangling objects) and no lock that blocks forever (above); a crash
between writing a file and committing it is repaired by ``commit_pending()``. Like git's
defaults (``core.fsync`` leaves out refs, the index and loose objects), nothing is fsynced
unless ``fsync=True``, which also turns on libgit2's gitdir fsync process-wide.

Worktrees: per-worktree files (``HEAD``, ``index``, their locks, ``logs/HEAD``) live in the
worktree's gitdir (``repo.path``); branches, ``packed-refs``, objects and lock markers in
the common dir (``<gitdir>/commondir``). Content filters (``.gitattributes`` clean/eol,
LFS) are not applied: jpfs files are stored verbatim. POSIX only (``flock``); reftable
and SHA-256 repositories are not supported. Create committers after forking.

Maintenance: every ``maintenance_every`` commits a background thread runs
``git gc --auto`` and ``git commit-graph write --reachable --split`` (never blocking a
commit) and sweeps debris of killed processes; ``close(wait=True)`` waits for it.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import fcntl
import hashlib
import logging
import os
import random
import re
import secrets
import stat
import struct
import subprocess
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import pygit2

from jpfs.errors import GitError, JpfsError, ScopeError

__all__ = ["Change", "Committer", "Identity"]

log = logging.getLogger(__name__)

_ZERO_OID = "0" * 40
_MODE_BLOB = 0o100644
_MODE_EXEC = 0o100755
_MODE_LINK = 0o120000
_MODE_TREE = 0o040000
_LOCAL_DIR = ".jpfs/local"
_TRAILER_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]*\Z")
_HEX_OID = re.compile(r"[0-9a-f]{40}\Z")
_FALLBACK_NAME = "jpfs"
_FALLBACK_EMAIL = "jpfs@localhost"
# Refs that live in a worktree's own gitdir rather than the common dir (git's rules).
_PER_WORKTREE_REFS = ("refs/bisect/", "refs/worktree/", "refs/rewritten/")
_MASK32 = 0xFFFFFFFF


# --------------------------------------------------------------------------- public API


@dataclass(frozen=True)
class Identity:
    """A commit author or committer."""

    name: str
    email: str

    def __post_init__(self) -> None:
        for value in (self.name, self.email):
            if any(ch in value for ch in "<>\n\r\0"):
                raise ValueError(f"invalid character in identity {self.name!r} <{self.email}>")


@dataclass(frozen=True)
class Change:
    """One logical state change: snapshot ``paths`` and record them under ``subject``."""

    paths: tuple[str, ...]
    subject: str
    trailers: tuple[tuple[str, str], ...] = ()
    author: Identity | None = None

    def __post_init__(self) -> None:
        if isinstance(self.paths, str):
            raise TypeError("Change.paths must be a tuple of paths, not a string")
        if not self.subject.strip() or "\n" in self.subject or "\r" in self.subject:
            raise ValueError(f"commit subject must be one non-empty line: {self.subject!r}")
        for key, value in self.trailers:
            if not _TRAILER_KEY.match(key):
                raise ValueError(f"invalid trailer key {key!r}")
            if "\n" in value or "\r" in value:
                raise ValueError(f"trailer {key} must be a single line: {value!r}")


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
        owned: Sequence[str] = ("conversations",),
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
        self._commondir = _common_dir(self._gitdir)
        self._owned = tuple(_normalize_owned(p) for p in owned)
        self._index_lock_timeout = index_lock_timeout
        self._ref_lock_timeout = ref_lock_timeout
        self._maintenance_every = maintenance_every
        self._fsync = fsync
        if fsync:
            pygit2.settings.enable_fsync_gitdir(True)
        self._private = self._gitdir / "jpfs"
        self._common_private = self._commondir / "jpfs"
        self._owners = self._common_private / "locks"
        for directory in (self._private, self._common_private, self._owners):
            try:
                directory.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise GitError(f"cannot create {directory}: {exc.strerror}") from exc
        self._read_config()

        mutex = threading.Lock()
        self._cv = threading.Condition(mutex)  # followers wait here for results
        self._arrivals = threading.Condition(mutex)  # a gathering leader waits here
        self._queue: list[_Pending] = []
        self._leading = False
        self._writers: dict[int, float] = {}  # thread id -> when it last submitted
        self._closed = False
        self._index_cache: _IndexFile | None = None
        self._index_debt: set[str] = set()
        # Paths we committed lately, re-checked in the index at every write and by the
        # watcher: `git commit` may write back an index it read before ours.
        self._recent: dict[str, float] = {}
        self._last_commit = 0.0
        self._watcher: threading.Thread | None = None
        self._stopping = threading.Event()
        self._verified: dict[bytes, tuple[tuple[int, int, int, int], bytes]] = {}
        self._root_bytes = os.fsencode(self._root)
        self._packed_cache: tuple[tuple[int, int, int], dict[str, str]] | None = None
        self._commits = 0
        self._packs = 0
        self._tree_cache: dict[bytes, dict[bytes, tuple[int, bytes]]] = {}
        self._maintenance: threading.Thread | None = None
        self._sweep_debris()

    # -- public ---------------------------------------------------------------------

    def commit(self, change: Change) -> str | None:
        """Commit the current working-tree state of ``change.paths``.

        Returns the sha of the commit containing the change, or None if none of its
        paths differ from the tip. Raises :class:`ScopeError` for paths outside ``owned``.
        """
        paths = tuple(self._check_path(p) for p in change.paths)
        return self._submit(_Pending(change, paths))

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
        return self._submit(_Pending(Change(self._owned, subject, trailers), self._owned))

    def close(self, *, wait: bool = False) -> None:
        """Refuse further commits; with ``wait``, also let background maintenance end.

        Otherwise a running ``git gc``/``git repack`` finishes on its own.
        """
        with self._cv:
            closing = not self._closed
            self._closed = True
            while self._leading:
                self._cv.wait()
        if closing:
            self._stopping.set()
            self._index_cache = None
            self._repo.free()
        maintenance = self._maintenance
        if wait and maintenance is not None:
            maintenance.join()

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

    # -- paths ---------------------------------------------------------------------------

    def _check_path(self, raw: str) -> str:
        path = raw.rstrip("/")
        parts = path.split("/")
        if (
            not path
            or path.startswith("/")
            or "\0" in path
            or any(part in ("", ".", "..") or part.lower() == ".git" for part in parts)
        ):
            raise ScopeError(f"{raw!r} is not a repo-relative path")
        if path == _LOCAL_DIR or path.startswith(_LOCAL_DIR + "/"):
            raise ScopeError(f"{raw!r} is under {_LOCAL_DIR}/, which is never committed")
        if not any(path == p or path.startswith(p + "/") for p in self._owned):
            owned = ", ".join(self._owned)
            raise ScopeError(f"{raw!r} is outside the paths jpfs commits here ({owned})")
        # git refuses paths beyond a symlink; following one could commit foreign files.
        parent = self._root
        for part in parts[:-1]:
            parent = parent / part
            try:
                if stat.S_ISLNK(os.lstat(parent).st_mode):
                    raise ScopeError(f"{raw!r} is beyond a symbolic link ({part})")
            except (FileNotFoundError, NotADirectoryError):
                break
        return path

    # -- group commit --------------------------------------------------------------------

    def _submit(self, pending: _Pending) -> str | None:
        with self._cv:
            if self._closed:
                raise GitError("the committer is closed")
            self._queue.append(pending)
            if not pending.heal:
                self._writers[threading.get_ident()] = time.monotonic()
            self._arrivals.notify()
            while not pending.done and self._leading:
                self._cv.wait()
            if pending.done:
                return pending.outcome()
            self._leading = True
            # Under concurrency, the writers of the last batch are re-queueing right now;
            # a moment's wait folds every active writer into one commit, instead of
            # commits alternating between groups (each costs a full index write).
            now = time.monotonic()
            self._writers = {t: w for t, w in self._writers.items() if now - w < _ACTIVE_SECONDS}
            deadline = now + _GATHER_SECONDS
            while len(self._queue) < len(self._writers):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._arrivals.wait(remaining)
            batch, self._queue = self._queue, []
        try:
            try:
                self._run_batch(batch)
            except pygit2.GitError:
                # libgit2 fails hard (no refresh) when a packfile it indexed was deleted
                # by a concurrent `git repack`/`git gc`: reopen and retry what is left.
                # Nothing was committed for unfinished items (the ref moves last).
                self._repo = pygit2.Repository(str(self._root))
                self._run_batch([item for item in batch if not item.done])
        except (pygit2.GitError, OSError) as exc:
            error: BaseException = _translate(exc)
            error.__cause__ = exc
            for item in batch:
                if not item.done:
                    item.fail(error)
        except BaseException as exc:
            # JpfsErrors are for the user; anything else is a bug every waiter reports.
            for item in batch:
                if not item.done:
                    item.fail(exc)
            if not isinstance(exc, Exception):
                raise
        finally:
            with self._cv:
                self._leading = False
                self._cv.notify_all()
        return pending.outcome()

    def _run_batch(self, batch: list[_Pending]) -> None:
        if all(item.heal for item in batch):
            self._heal()
            for item in batch:
                item.succeed(None)
            return
        for item in batch:
            if item.heal:
                item.succeed(None)  # the commit below re-syncs recent paths anyway
        batch = [item for item in batch if not item.heal]
        _, tip = self._resolve_head()
        tip_tree = self._tree_of(tip)
        reads: dict[str, _Blob | _Dir | None] = {}
        for item in batch:
            try:
                item.snapshot = [self._read(p, tip_tree, reads) for p in item.paths]
            except JpfsError as exc:
                item.fail(exc)
            except OSError as exc:
                item.fail(_translate(exc))
        live = [item for item in batch if not item.done]
        if live:
            self._commit_batch(live)

    # -- working tree snapshot ---------------------------------------------------------

    def _read(
        self, path: str, tip_tree: pygit2.Tree | None, reads: dict[str, _Blob | _Dir | None]
    ) -> _Blob | _Dir | None:
        if path in reads:
            return reads[path]
        full = os.path.join(self._root, path)
        try:
            st = os.lstat(full)
        except (FileNotFoundError, NotADirectoryError):
            result: _Blob | _Dir | None = None
        else:
            if stat.S_ISDIR(st.st_mode):
                result = _Dir(self._walk(path, tip_tree))
            else:
                result = self._read_file(path, full, st, tip_tree)
        reads[path] = result
        return result

    def _read_file(
        self, path: str, full: str, st: os.stat_result, tip_tree: pygit2.Tree | None
    ) -> _Blob | None:
        if stat.S_ISLNK(st.st_mode):
            try:
                data = os.fsencode(os.readlink(full))
            except (FileNotFoundError, NotADirectoryError):
                return None  # removed while we looked: snapshot it as gone
            mode = _MODE_LINK
        elif stat.S_ISREG(st.st_mode):
            try:
                fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except (FileNotFoundError, NotADirectoryError):
                return None
            try:
                st = os.fstat(fd)
                data = _read_all(fd, st.st_size)
            finally:
                os.close(fd)
            mode = _MODE_EXEC if st.st_mode & stat.S_IXUSR else _MODE_BLOB
            if not self._filemode and tip_tree is not None:
                with contextlib.suppress(KeyError):
                    old = tip_tree[path].filemode
                    if old in (_MODE_BLOB, _MODE_EXEC):
                        mode = old
        else:
            return None  # fifos, sockets, devices: git cannot store them either
        return _Blob(pygit2.hash(data), mode, data, st)

    def _walk(self, top: str, tip_tree: pygit2.Tree | None) -> dict[str, _Blob]:
        files: dict[str, _Blob] = {}
        stack = [top]
        while stack:
            rel = stack.pop()
            try:
                entries = list(os.scandir(os.path.join(self._root, rel)))
            except (FileNotFoundError, NotADirectoryError):
                continue
            for entry in entries:
                child = f"{rel}/{entry.name}"
                if entry.name.lower() == ".git" or child == _LOCAL_DIR:
                    continue
                tracked = tip_tree is not None and child in tip_tree
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    if os.path.lexists(os.path.join(entry.path, ".git")):
                        continue  # a nested repository: not ours to snapshot
                    if not tracked and self._repo.path_is_ignored(child + "/"):
                        continue
                    stack.append(child)
                    continue
                if not tracked and self._repo.path_is_ignored(child):
                    continue
                blob = self._read_file(child, entry.path, st, tip_tree)
                if blob is not None:
                    files[child] = blob
        return files

    # -- building and landing commits ------------------------------------------------------

    def _commit_batch(self, live: list[_Pending]) -> None:
        ref, tip = self._resolve_head()
        plan = self._plan(live, tip)
        if plan.new_tip is None and self._index_agrees(plan):
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
                    self._sync_index(plan)
                if plan.new_tip is None or self._move_ref(ref, tip, plan.new_tip, plan.log_msg):
                    break
                ref, tip = self._resolve_head()
                plan = self._plan(live, tip)
            else:
                raise GitError(
                    f"could not update {ref}: it kept moving under "
                    f"{_MAX_CAS_ATTEMPTS} attempts; retry when other git writers are idle"
                )
            if index_lock is not None:
                self._index_debt.clear()
            else:
                self._index_debt.update(plan.entries)
            if plan.new_tip is not None:
                self._remember(plan.entries)
            for item in live:
                item.succeed(plan.shas[item.run] if item.run is not None else None)
            if plan.new_tip is not None:
                self._after_commits(len(plan.shas))
        finally:
            if index_lock is not None:
                index_lock.release()

    def _plan(self, live: list[_Pending], tip: str | None) -> _Plan:
        base_tree = self._tree_of(tip)
        base = _TreeView(base_tree)
        current: dict[str, _Blob | None] = {}
        owner: dict[str, int] = {}
        runs: list[_Run] = []
        all_entries: dict[str, _Blob | None] = {}
        for item in live:
            entries: dict[str, _Blob | None] = {}
            for path, snap in zip(item.paths, item.snapshot, strict=True):
                if isinstance(snap, _Dir):
                    for gone in _tree_files(base_tree, path):
                        entries[gone] = None
                    entries.update(snap.files)
                else:
                    if snap is None:
                        for gone in _tree_files(base_tree, path):
                            entries[gone] = None
                    entries[path] = snap
            all_entries.update(entries)
            diff = {
                p: blob
                for p, blob in entries.items()
                if not _same(current[p] if p in current else base.get(p), blob)
            }
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
        objects = _Objects()
        shas: list[str] = []
        log_msg = ""
        for run in runs:
            for blob in run.changes.values():
                if blob is not None:
                    objects.add(_BLOB, blob.data, blob.oid.raw)
            new_tree = self._build_tree(tree_oid, run.changes, objects)
            tree_oid = new_tree if new_tree is not None else objects.add(_TREE, b"")
            message, subject = _message(run.items)
            data = _commit_object(
                tree_oid,
                [parent] if parent else [],
                self._identity("AUTHOR", run.author),
                self._identity("COMMITTER", None),
                message,
            )
            log_msg = f"commit{'' if parent else ' (initial)'}: {subject}"
            parent = objects.add(_COMMIT, data).hex()
            shas.append(parent)
        if objects.items:
            self._write_objects(objects)
        tree = base_tree
        if runs and tree_oid is not None:
            tree = self._repo[pygit2.Oid(raw=tree_oid)].peel(pygit2.Tree)
        return _Plan(shas[-1] if shas else None, shas, all_entries, log_msg, tree)

    def _build_tree(
        self, base: bytes | None, changes: dict[str, _Blob | None], objects: _Objects
    ) -> bytes | None:
        """Serialise ``base`` with ``changes``; only trees along changed paths are new."""
        entries = dict(self._tree_entries(base, objects)) if base is not None else {}
        nested: dict[bytes, dict[str, _Blob | None]] = {}
        for path, blob in changes.items():
            head, sep, rest = path.partition("/")
            name = os.fsencode(head)
            if sep:
                nested.setdefault(name, {})[rest] = blob
            elif blob is None:
                entries.pop(name, None)
            else:
                entries[name] = (blob.mode, blob.oid.raw)
        for name, sub in nested.items():
            current = entries.get(name)
            child = current[1] if current is not None and current[0] == _MODE_TREE else None
            if child is None and all(blob is None for blob in sub.values()):
                continue  # deleting under a directory that does not exist
            oid = self._build_tree(child, sub, objects)
            if oid is None:
                entries.pop(name, None)
            else:
                entries[name] = (_MODE_TREE, oid)
        if not entries:
            return None
        # git orders tree entries by name, a directory's name as if it ended in "/".
        ordered = sorted(
            entries.items(), key=lambda e: e[0] + b"/" if e[1][0] == _MODE_TREE else e[0]
        )
        data = b"".join(b"%o %s\0%s" % (mode, name, oid) for name, (mode, oid) in ordered)
        oid = objects.add(_TREE, data)
        if oid == base:
            objects.discard(oid)  # unchanged: it exists already
        else:
            objects.trees[oid] = entries
            self._cache_tree(oid, entries)
        return oid

    def _tree_entries(self, oid: bytes, objects: _Objects) -> dict[bytes, tuple[int, bytes]]:
        entries = objects.trees.get(oid) or self._tree_cache.get(oid)
        if entries is None:
            tree = self._repo[pygit2.Oid(raw=oid)].peel(pygit2.Tree)
            entries = {e.raw_name: (e.filemode, e.id.raw) for e in tree if e.raw_name}
            self._cache_tree(oid, entries)
        return entries

    def _cache_tree(self, oid: bytes, entries: dict[bytes, tuple[int, bytes]]) -> None:
        # Trees are immutable: the few along jpfs's paths are needed at every commit.
        self._tree_cache[oid] = entries
        if len(self._tree_cache) > _TREE_CACHE_MAX:
            del self._tree_cache[next(iter(self._tree_cache))]

    def _write_objects(self, objects: _Objects) -> None:
        if len(objects.items) >= _PACK_MIN:
            # One packfile instead of dozens of loose files: creating a file is the
            # slowest thing a commit does, and a group commit writes many objects.
            _write_pack(self._commondir / "objects" / "pack", objects.items, self._fsync)
            self._packs += 1
            if self._packs % _REPACK_EVERY == 0:
                self._start_maintenance(_REPACK)
        else:
            odb = self._repo.odb
            for kind, data, _ in objects.items:
                odb.write(kind, data)

    def _tree_of(self, tip: str | None) -> pygit2.Tree | None:
        if tip is None:
            return None
        try:
            return self._repo[tip].peel(pygit2.Tree)
        except (KeyError, ValueError, pygit2.GitError) as exc:
            raise GitError(
                f"HEAD points to {tip}, which is not a readable commit: run `git fsck`"
            ) from exc

    def _after_commits(self, count: int) -> None:
        before = self._commits
        self._commits += count
        every = self._maintenance_every
        if every > 0 and before // every != self._commits // every:
            self._start_maintenance()

    # -- refs -------------------------------------------------------------------------------

    def _ref_base(self, name: str) -> Path:
        if name == "HEAD" or name.startswith(_PER_WORKTREE_REFS):
            return self._gitdir
        return self._commondir

    def _read_loose(self, name: str) -> str | None:
        try:
            with open(self._ref_base(name) / name, "rb") as fh:
                return fh.read().decode().strip()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None

    def _read_packed(self, name: str) -> str | None:
        path = self._commondir / "packed-refs"
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        if self._packed_cache is None or self._packed_cache[0] != key:
            refs: dict[str, str] = {}
            with open(path, "rb") as fh:
                for line in fh.read().decode().splitlines():
                    if line and line[0] not in "#^":
                        oid, _, refname = line.partition(" ")
                        refs[refname] = oid
            self._packed_cache = (key, refs)
        return self._packed_cache[1].get(name)

    def _read_ref(self, name: str) -> str | None:
        value = self._read_loose(name)
        if value is None and name != "HEAD":
            value = self._read_packed(name)
        return value

    def _resolve_head(self) -> tuple[str, str | None]:
        """The ref a commit must move (HEAD's symbolic target, or HEAD when detached)."""
        name = "HEAD"
        try:
            for _ in range(5):
                value = self._read_ref(name)
                if value is None:
                    if name == "HEAD":
                        raise GitError(f"{self._gitdir}/HEAD is missing: the repository is broken")
                    return name, None  # unborn branch
                if not value.startswith("ref:"):
                    if not _HEX_OID.match(value):
                        raise GitError(f"ref {name} holds {value!r}, not a commit id")
                    return name, value
                name = value[4:].strip()
        except OSError as exc:
            raise _translate(exc) from exc
        raise GitError("HEAD is a chain of more than 5 symbolic refs")

    def _move_ref(self, name: str, old: str | None, new: str, message: str) -> bool:
        """Compare-and-swap ``name`` from ``old`` to ``new``; False if it had moved."""
        base = self._ref_base(name)
        target = base / name
        lock = self._acquire(
            target, self._ref_lock_timeout, required=True, content=f"{new}\n".encode()
        )
        assert lock is not None
        try:
            if self._read_ref(name) != old:
                return False
            if self._fsync:
                os.fsync(lock.fd)
            self._append_reflogs(name, old, new, message)
            lock.commit()
            return True
        except OSError as exc:
            raise GitError(f"cannot update {name} in {base}: {exc.strerror}") from exc
        finally:
            lock.release()

    def _append_reflogs(self, name: str, old: str | None, new: str, message: str) -> None:
        sig = self._identity("COMMITTER", None)
        line = f"{old or _ZERO_OID} {new} {_ident(sig)}\t{message}\n"
        targets = [(self._ref_base(name), name)]
        if name != "HEAD":
            head = self._read_loose("HEAD")
            if head is not None and head.startswith("ref:") and head[4:].strip() == name:
                targets.append((self._gitdir, "HEAD"))
        for base, refname in targets:
            path = base / "logs" / refname
            if not self._log_all and not path.exists():
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)

    # -- locks --------------------------------------------------------------------------------

    def _acquire(
        self, target: Path, timeout: float, *, required: bool, content: bytes = b""
    ) -> _LockFile | None:
        """Take ``<target>.lock`` git-style, breaking it only if provably ours and dead."""
        lock = _LockFile(target, self._owners)
        deadline = time.monotonic() + timeout
        delay = 0.0005
        while True:
            try:
                if lock.try_acquire(content):
                    return lock
            except OSError as exc:
                raise GitError(f"cannot create {lock.path}: {exc.strerror}") from exc
            if lock.break_if_stale():
                continue
            now = time.monotonic()
            if now >= deadline:
                if not required:
                    return None
                raise GitError(
                    f"{lock.path} exists: another git process seems to be running. If none "
                    f"is, remove that file and retry"
                )
            # Polling is git's own strategy for lock files (there is nothing to wait on);
            # jitter keeps contending processes from retrying in lockstep.
            time.sleep(min(delay * (0.5 + random.random()), deadline - now))
            delay = min(delay * 2, 0.02)

    # -- the user's index ------------------------------------------------------------------

    def _load_index(self) -> _IndexFile | None:
        path = self._gitdir / "index"
        try:
            st = os.stat(path)
        except FileNotFoundError:
            self._index_cache = _FastIndex.empty()
            return self._index_cache
        cached = self._index_cache
        if cached is not None and cached.stamp == _stamp(st):
            return cached
        self._index_cache = None
        try:
            data = path.read_bytes()
            loaded: _IndexFile = _FastIndex.parse(data, st)
        except _IndexVersion4:
            loaded = _Libgit2Index.load(path, self._private, st)
        except _IndexUnsupported as exc:
            log.debug("leaving the index alone: %s", exc)
            return None
        loaded.foreign = True
        self._index_cache = loaded
        return loaded

    def _sync_index(self, plan: _Plan) -> None:
        """Set the user's index entries of the plan's paths to the plan's tree (locked)."""
        try:
            index = self._load_index()
            if index is None:
                return
            desired = self._desired(plan, index)
            changed = False
            for path, blob in desired.items():
                key = os.fsencode(path)
                if blob is None:
                    changed |= index.remove(key)
                elif index.get(key) != (blob.oid.raw, blob.mode):
                    index.set(key, blob.oid.raw, blob.mode, blob.stat)
                    changed = True
            if changed:
                index.save(
                    self._gitdir / "index",
                    self._private,
                    self._racy_modified,
                    fsync=self._fsync,
                    skip_hash=self._skip_hash,
                )
                index.foreign = False
        except BaseException:
            # The in-memory copy may be half-updated; re-read it next time.
            self._index_cache = None
            raise

    def _desired(self, plan: _Plan, index: _IndexFile) -> dict[str, _Blob | None]:
        """Index state wanted for the plan's paths, owed paths and recent paths.

        Recent paths only matter in an index someone else wrote since our last write:
        that is how a `git commit` can have put back entries it read before ours.
        """
        desired: dict[str, _Blob | None] = dict(plan.entries)
        extra = self._index_debt | self._recent.keys() if index.foreign else self._index_debt
        view = _TreeView(plan.tree)
        for path in extra - desired.keys():
            found = view.get(path)
            desired[path] = None if found is None else _Blob(found[0], found[1], b"", None)
        return desired

    def _index_agrees(self, plan: _Plan) -> bool:
        """Whether the index already holds the plan's state (an unlocked look)."""
        index = self._load_index()
        if index is None:
            return True  # an index we cannot rewrite: nothing to do either way
        return all(
            index.get(os.fsencode(path)) == (None if blob is None else (blob.oid.raw, blob.mode))
            for path, blob in self._desired(plan, index).items()
        )

    def _remember(self, paths: Iterable[str]) -> None:
        now = time.monotonic()
        for path in paths:
            self._recent.pop(path, None)
            self._recent[path] = now
        while self._recent:
            oldest, when = next(iter(self._recent.items()))
            if len(self._recent) <= _RECENT_MAX and now - when < _WATCH_SECONDS:
                break
            del self._recent[oldest]
        self._last_commit = now
        if self._watcher is None or not self._watcher.is_alive():
            self._watcher = threading.Thread(
                target=self._watch, name="jpfs-index-watch", daemon=True
            )
            self._watcher.start()

    def _watch(self) -> None:
        """For a while after a commit, heal the index when someone else rewrites it."""
        path = self._gitdir / "index"
        seen: tuple[int, int, int, int] | None = None
        while time.monotonic() - self._last_commit < _WATCH_SECONDS:
            if self._stopping.wait(_WATCH_INTERVAL):
                return
            try:
                stamp = _stamp(os.stat(path))
            except OSError:
                continue
            cache = self._index_cache
            if stamp == seen or cache is None or stamp == cache.stamp:
                continue
            seen = stamp
            try:
                self._submit(_Pending(_HEAL, (), heal=True))
            except JpfsError:
                return

    def _heal(self) -> None:
        """Re-sync recent paths if an index written behind our back lost them."""
        if not self._recent and not self._index_debt:
            return
        _, tip = self._resolve_head()
        plan = _Plan(None, [], {}, "", self._tree_of(tip))
        if self._index_agrees(plan):
            return
        lock = self._acquire(self._gitdir / "index", _HEAL_LOCK_TIMEOUT, required=False)
        if lock is None:
            return
        try:
            self._sync_index(plan)
            self._index_debt.clear()
        finally:
            lock.release()

    def _racy_modified(self, path: bytes, raw: bytes) -> bool:
        """Whether a racily clean index entry's file changed although its stat matches."""
        (mtime,) = struct.unpack_from(">I", raw, 8)
        (ino,) = struct.unpack_from(">I", raw, 20)
        (size,) = struct.unpack_from(">I", raw, 36)
        oid = raw[40:60]
        full = os.path.join(self._root_bytes, path)
        try:
            st = os.lstat(full)
            if (
                int(st.st_mtime) & _MASK32 != mtime
                or st.st_ino & _MASK32 != ino
                or st.st_size & _MASK32 != size
            ):
                return False  # git notices from the stat data alone
            identity = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            if self._verified.get(path) == (identity, oid):
                return False
            checked_at = time.time_ns()
            if stat.S_ISLNK(st.st_mode):
                data = os.fsencode(os.readlink(full))
            else:
                with open(full, "rb") as fh:
                    data = fh.read()
        except OSError:
            return False
        if pygit2.hash(data).raw != oid:
            return True
        # Unchanged since well before we read it: a later write would move the ctime
        # past the filesystem's timestamp granularity, so the same ctime proves the same
        # content and the next write need not read it again.
        if st.st_ctime_ns < checked_at - _TIMESTAMP_SLACK_NS:
            if len(self._verified) > 4096:
                self._verified.clear()
            self._verified[path] = (identity, oid)
        return False

    # -- maintenance ------------------------------------------------------------------------

    def _start_maintenance(self, commands: Sequence[Sequence[str]] = ()) -> None:
        if self._maintenance is not None and self._maintenance.is_alive():
            return  # the next trigger runs it again
        thread = threading.Thread(
            target=self._maintain,
            args=(commands or _MAINTENANCE,),
            name="jpfs-git-maintenance",
            daemon=True,
        )
        self._maintenance = thread
        thread.start()

    def _maintain(self, commands: Sequence[Sequence[str]]) -> None:
        for argv in commands:
            try:
                subprocess.run(
                    argv,
                    cwd=self._root,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    check=False,
                    timeout=600,
                )
            except (OSError, subprocess.SubprocessError) as exc:
                log.debug("maintenance command %s failed: %s", argv, exc)
        self._sweep_debris()

    def _sweep_debris(self) -> None:
        """Remove temp files and lock-owner files left by killed processes."""
        cutoff = time.time() - 3600
        for directory, prefixes in (
            (self._private, ("tmp-",)),
            (self._common_private, ("tmp-",)),
            (self._commondir / "objects", ("tmp_object_git2_",)),
            (self._commondir / "objects" / "pack", ("tmp_pack_jpfs_", "tmp_idx_jpfs_")),
        ):
            with contextlib.suppress(OSError):
                for entry in os.scandir(directory):
                    if entry.name.startswith(prefixes) and entry.stat().st_mtime < cutoff:
                        with contextlib.suppress(OSError):
                            os.unlink(entry.path)
        with contextlib.suppress(OSError):
            live = _lock_registrations(self._gitdir, self._commondir)
            for entry in os.scandir(self._owners):
                _sweep_owner_file(Path(entry.path), live)


# --------------------------------------------------------------------------- internals

_MAX_CAS_ATTEMPTS = 64
_PACK_MIN = 16  # objects from which a commit's objects go into one packfile
_REPACK_EVERY = 25  # packfiles written between two geometric repacks
_TREE_CACHE_MAX = 512
_MAINTENANCE: tuple[tuple[str, ...], ...] = (
    ("git", "-c", "gc.autoDetach=false", "gc", "--auto", "--quiet"),
    ("git", "commit-graph", "write", "--reachable", "--split", "--no-progress"),
)
# Rolls our small packfiles up so their number stays logarithmic, far below the 50 at
# which any `git gc --auto` (run by every `git commit`) would repack everything.
_REPACK: tuple[tuple[str, ...], ...] = (
    ("git", "repack", "-d", "-q", "--geometric=2", "--no-write-bitmap-index"),
)
_COMMIT, _TREE, _BLOB = 1, 2, 3  # packfile object types
_TYPE_NAMES = {_COMMIT: b"commit", _TREE: b"tree", _BLOB: b"blob"}
_GATHER_SECONDS = 0.005
_ACTIVE_SECONDS = 0.5
_RECENT_MAX = 128
_WATCH_SECONDS = 10.0
_WATCH_INTERVAL = 0.01
_HEAL_LOCK_TIMEOUT = 0.2
# Filesystem timestamps come from a coarse clock (jiffies); 50 ms is far beyond it.
_TIMESTAMP_SLACK_NS = 50_000_000


@dataclass
class _Blob:
    oid: pygit2.Oid
    mode: int
    data: bytes
    stat: os.stat_result | None


class _Objects:
    """The objects one plan creates, in order, each once; and the trees it built."""

    def __init__(self) -> None:
        self.items: list[tuple[int, bytes, bytes]] = []  # (type, data, oid)
        self._seen: set[bytes] = set()
        self.trees: dict[bytes, dict[bytes, tuple[int, bytes]]] = {}

    def add(self, kind: int, data: bytes, oid: bytes | None = None) -> bytes:
        if oid is None:
            oid = hashlib.sha1(b"%s %d\0%s" % (_TYPE_NAMES[kind], len(data), data)).digest()
        if oid not in self._seen:
            self._seen.add(oid)
            self.items.append((kind, data, oid))
        return oid

    def discard(self, oid: bytes) -> None:
        if oid in self._seen:
            self._seen.discard(oid)
            self.items = [item for item in self.items if item[2] != oid]


def _write_pack(pack_dir: Path, objects: list[tuple[int, bytes, bytes]], fsync: bool) -> None:
    """Write ``objects`` as one packfile (version 2) with its index (version 2)."""
    parts = [b"PACK" + struct.pack(">II", 2, len(objects))]
    offset = 12
    table: list[tuple[bytes, int, int]] = []
    for kind, data, oid in objects:
        size = len(data)
        head = bytearray()
        byte = (kind << 4) | (size & 0x0F)
        size >>= 4
        while size:
            head.append(byte | 0x80)
            byte = size & 0x7F
            size >>= 7
        head.append(byte)
        packed = bytes(head) + zlib.compress(data, 1)
        table.append((oid, zlib.crc32(packed), offset))
        parts.append(packed)
        offset += len(packed)
    if offset >= 1 << 31:
        raise ValueError("packfile too large for 32-bit offsets")
    digest = hashlib.sha1()
    for part in parts:
        digest.update(part)
    checksum = digest.digest()
    parts.append(checksum)
    table.sort()
    fanout = [0] * 256
    for oid, _, _ in table:
        fanout[oid[0]] += 1
    for i in range(1, 256):
        fanout[i] += fanout[i - 1]
    index = b"".join(
        [
            b"\xfftOc" + struct.pack(">I", 2) + struct.pack(">256I", *fanout),
            *(oid for oid, _, _ in table),
            *(struct.pack(">I", crc) for _, crc, _ in table),
            *(struct.pack(">I", at) for _, _, at in table),
            checksum,
        ]
    )
    name = f"pack-{checksum.hex()}"
    # The pack first, its index last: readers find packs by their index.
    _write_new(pack_dir / f"{name}.pack", parts, pack_dir / "tmp_pack_jpfs_", fsync)
    index_parts = [index, hashlib.sha1(index).digest()]
    _write_new(pack_dir / f"{name}.idx", index_parts, pack_dir / "tmp_idx_jpfs_", fsync)


def _write_new(target: Path, buffers: Sequence[bytes], tmp_prefix: Path, fsync: bool) -> None:
    tmp = Path(f"{tmp_prefix}{os.getpid()}_{secrets.token_hex(6)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444)
    try:
        try:
            _writev_all(fd, buffers)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@dataclass
class _Dir:
    files: dict[str, _Blob]


@dataclass
class _Run:
    author: Identity | None
    changes: dict[str, _Blob | None] = field(default_factory=dict)
    items: list[_Pending] = field(default_factory=list)


@dataclass
class _Plan:
    new_tip: str | None
    shas: list[str]
    entries: dict[str, _Blob | None]
    log_msg: str
    tree: pygit2.Tree | None  # the tree new_tip (or the unchanged tip) holds


class _Pending:
    """One queued change and, once the leader is through, its outcome."""

    __slots__ = ("_error", "_sha", "change", "done", "heal", "paths", "run", "snapshot")

    def __init__(self, change: Change, paths: tuple[str, ...], *, heal: bool = False) -> None:
        self.change = change
        self.paths = paths
        self.heal = heal
        self.snapshot: list[_Blob | _Dir | None] = []
        self.run: int | None = None
        self.done = False
        self._sha: str | None = None
        self._error: BaseException | None = None

    def succeed(self, sha: str | None) -> None:
        self._sha, self.done = sha, True

    def fail(self, error: BaseException) -> None:
        self._error, self.done = error, True

    def outcome(self) -> str | None:
        if self._error is not None:
            raise self._error
        return self._sha


def _translate(exc: BaseException) -> GitError:
    if isinstance(exc, OSError):
        where = f" ({exc.filename})" if exc.filename else ""
        return GitError(
            f"git repository I/O failed{where}: {exc.strerror or exc}; check "
            "permissions and free disk space, then retry"
        )
    if isinstance(exc, pygit2.GitError):
        return GitError(f"git operation failed: {exc}; run `git fsck` if this persists")
    return GitError(f"commit failed: {exc!r}")


def _normalize_owned(prefix: str) -> str:
    path = prefix.strip("/")
    if not path or any(part in ("", ".", "..") for part in path.split("/")):
        raise ValueError(f"invalid owned prefix {prefix!r}")
    return path


def _common_dir(gitdir: Path) -> Path:
    try:
        text = (gitdir / "commondir").read_text().strip()
    except FileNotFoundError:
        return gitdir
    return (gitdir / text).resolve()


def _local_offset_minutes() -> int:
    return -(time.altzone if time.localtime().tm_isdst > 0 else time.timezone) // 60


def _read_all(fd: int, size_hint: int) -> bytes:
    # Asking for one byte more than the size usually gets the whole file in one read.
    first = os.read(fd, max(size_hint, 0) + 1)
    if len(first) <= size_hint or not first:
        return first
    chunks = [first]
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


class _TreeView:
    """File lookups in one tree, listing each directory once.

    pygit2's ``tree[path]`` walks and loads every level on each call (~20 µs).
    """

    def __init__(self, tree: pygit2.Tree | None) -> None:
        self._tree = tree
        self._dirs: dict[str, dict[str, tuple[pygit2.Oid, int]]] = {}

    def get(self, path: str) -> tuple[pygit2.Oid, int] | None:
        parent, _, name = path.rpartition("/")
        listing = self._dirs.get(parent)
        if listing is None:
            listing = self._dirs[parent] = self._list(parent)
        found = listing.get(name)
        return None if found is None or found[1] == _MODE_TREE else found

    def _list(self, parent: str) -> dict[str, tuple[pygit2.Oid, int]]:
        tree = self._tree
        if tree is None:
            return {}
        if parent:
            try:
                obj = tree[parent]
            except KeyError:
                return {}
            if obj.filemode != _MODE_TREE:
                return {}
            tree = obj.peel(pygit2.Tree)
        return {entry.name: (entry.id, entry.filemode) for entry in tree if entry.name}


def _same(current: tuple[pygit2.Oid, int] | _Blob | None, blob: _Blob | None) -> bool:
    if blob is None or current is None:
        return blob is None and current is None
    if isinstance(current, _Blob):
        return current.oid == blob.oid and current.mode == blob.mode
    return current[0] == blob.oid and current[1] == blob.mode


def _tree_files(tree: pygit2.Tree | None, path: str) -> list[str]:
    """Every file path tracked under directory ``path`` in ``tree`` (empty if none)."""
    if tree is None:
        return []
    try:
        obj = tree[path]
    except KeyError:
        return []
    if obj.filemode != _MODE_TREE:
        return []
    found: list[str] = []
    stack: list[tuple[str, pygit2.Tree]] = [(path, obj.peel(pygit2.Tree))]
    while stack:
        prefix, sub = stack.pop()
        for entry in sub:
            child = f"{prefix}/{entry.name}"
            if entry.filemode == _MODE_TREE:
                stack.append((child, entry.peel(pygit2.Tree)))
            else:
                found.append(child)
    return found


def _commit_object(
    tree: bytes,
    parents: list[str],
    author: pygit2.Signature,
    committer: pygit2.Signature,
    message: str,
) -> bytes:
    """A commit object's content, as git writes it (UTF-8, no encoding header)."""
    lines = [f"tree {tree.hex()}", *(f"parent {p}" for p in parents)]
    lines += [f"author {_ident(author)}", f"committer {_ident(committer)}"]
    return ("\n".join(lines) + "\n\n" + message).encode()


def _ident(sig: pygit2.Signature) -> str:
    """``Name <email> seconds +hhmm``, git's identity line."""
    offset = sig.offset
    zone = f"{'-' if offset < 0 else '+'}{abs(offset) // 60:02d}{abs(offset) % 60:02d}"
    return f"{sig.name} <{sig.email}> {sig.time} {zone}"


def _message(items: list[_Pending]) -> tuple[str, str]:
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


def _stamp(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


# --------------------------------------------------------------------------- lock files


class _Marker:
    """This process's flocked marker file; hard links to it name the locks we hold.

    The kernel releases the flock when the process dies, so "the marker's flock is free"
    means "its process is dead". Linking is much cheaper than creating a file.
    """

    _lock: ClassVar[threading.Lock] = threading.Lock()
    _by_dir: ClassVar[dict[Path, _Marker]] = {}

    def __init__(self, directory: Path) -> None:
        self.pid = os.getpid()
        name = f"{self.pid}-{secrets.token_hex(6)}"
        self.path = directory / f"proc-{name}"
        # Flocked before it gets the name sweepers look at, so none can take it for dead.
        fresh = directory / f"new-{name}"
        self.fd = os.open(fresh, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        os.write(self.fd, f"jpfs pid {self.pid}\n".encode())
        os.rename(fresh, self.path)

    @classmethod
    def for_dir(cls, directory: Path, *, renew: bool = False) -> _Marker:
        with cls._lock:
            marker = cls._by_dir.get(directory)
            # After a fork the child shares the parent's flock; it needs its own.
            if renew or marker is None or marker.pid != os.getpid():
                marker = cls._by_dir[directory] = cls(directory)
            return marker


_HAVE_PROC_FD = os.path.isdir("/proc/self/fd")
_LOCK_SAMPLE = 256  # bytes of a lock's content that go into its registration name


def _registration(st: os.stat_result, content: bytes) -> str:
    digest = hashlib.sha1(content[:_LOCK_SAMPLE]).hexdigest()[:24]
    return f"{st.st_dev}-{st.st_ino}-{digest}"


class _LockFile:
    """``<target>.lock`` taken git-style (exclusive create), registered as ours.

    The registration is a hard link ``<owners>/<dev>-<ino>-<content digest>`` to this
    process's flocked marker. Where the kernel allows, the lock is built as an unnamed
    ``O_TMPFILE`` holding its final content, registered, and only then given its name
    with ``linkat`` (which fails if the name exists): it appears already registered, so
    no crash leaves an anonymous lock. See "Stale locks" in the module docstring.
    """

    def __init__(self, target: Path, owners: Path) -> None:
        self.target = target
        self.path = target.with_name(target.name + ".lock")
        self._owners = owners
        self._fd = -1
        self._owner: Path | None = None

    @property
    def fd(self) -> int:
        return self._fd

    def try_acquire(self, content: bytes = b"") -> bool:
        """Create the lock holding ``content`` (a unique token if empty)."""
        data = content or f"jpfs lock {os.getpid()} {secrets.token_hex(8)}\n".encode()
        for attempt in range(2):
            try:
                return self._try_create(data)
            except FileNotFoundError:
                if attempt:
                    raise
                self.path.parent.mkdir(parents=True, exist_ok=True)
        return False  # unreachable

    def _try_create(self, data: bytes) -> bool:
        if not _HAVE_PROC_FD:
            return self._try_create_named(data)
        dfd = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            try:
                fd = os.open(".", os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o666, dir_fd=dfd)
            except OSError as exc:
                if exc.errno in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
                    return self._try_create_named(data)
                raise
            owner: Path | None = None
            try:
                _write_all(fd, data)
                owner = self._register(os.fstat(fd), data)
                try:
                    # A dir fd makes os.link use linkat(AT_SYMLINK_FOLLOW), which names
                    # the unnamed file behind the /proc link.
                    os.link(f"/proc/self/fd/{fd}", self.path.name, dst_dir_fd=dfd)
                except FileExistsError:
                    os.unlink(owner)
                    os.close(fd)
                    return False
            except BaseException:
                if owner is not None:
                    with contextlib.suppress(OSError):
                        os.unlink(owner)
                os.close(fd)
                raise
            self._fd, self._owner = fd, owner
            return True
        finally:
            os.close(dfd)

    def _try_create_named(self, data: bytes) -> bool:
        # Filesystems without O_TMPFILE: a crash between these calls leaves an
        # anonymous lock, exactly like a crashed git.
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        try:
            fd = os.open(self.path, flags, 0o666)
        except FileExistsError:
            return False
        try:
            _write_all(fd, data)
            self._owner = self._register(os.fstat(fd), data)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(self.path)
            raise
        self._fd = fd
        return True

    def _register(self, st: os.stat_result, data: bytes) -> Path:
        owner = self._owners / _registration(st, data)
        try:
            os.link(_Marker.for_dir(self._owners).path, owner)
        except FileNotFoundError:
            # Someone removed our marker (by hand?): make a new one.
            os.link(_Marker.for_dir(self._owners, renew=True).path, owner)
        return owner

    def commit(self) -> None:
        """Install the lock's content as the target (git's commit_lock_file)."""
        self._finish(lambda: os.rename(self.path, self.target))

    def release(self) -> None:
        """Drop the lock without installing anything."""
        self._finish(lambda: os.unlink(self.path))

    def _finish(self, action: Callable[[], None]) -> None:
        if self._owner is None:
            return
        # Lock first, registration second: a registration outliving its lock is inert.
        try:
            action()
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(self.path)
            raise
        finally:
            with contextlib.suppress(OSError):
                os.unlink(self._owner)
            os.close(self._fd)
            self._fd, self._owner = -1, None

    def break_if_stale(self) -> bool:
        """Remove the lock if a dead jpfs process left it; True if it is gone now."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return True
        try:
            st = os.fstat(fd)
            sample = os.read(fd, _LOCK_SAMPLE)
        finally:
            os.close(fd)
        owner = self._owners / _registration(st, sample)
        try:
            ofd = os.open(owner, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return False  # not ours (git's, say): wait, never break it
        try:
            try:
                fcntl.flock(ofd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False  # its creator is alive (or another breaker is here)
            try:
                if os.stat(owner).st_ino != os.fstat(ofd).st_ino:
                    return False
                now = os.stat(self.path)
            except FileNotFoundError:
                return False
            if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
                return False
            who = os.pread(ofd, 200, 0).decode(errors="replace").strip()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
            os.unlink(owner)
            log.info("removed %s left by a dead process (%s)", self.path, who)
            return True
        finally:
            os.close(ofd)


def _sweep_owner_file(owner: Path, live: set[str]) -> None:
    """Remove a dead process's marker, or a registration that outlived its lock.

    ``live`` holds the registration names of lock files that exist: those stay for
    ``break_if_stale`` when someone needs the lock.
    """
    try:
        ofd = os.open(owner, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        try:
            fcntl.flock(ofd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return  # a live process
        if os.stat(owner).st_ino != os.fstat(ofd).st_ino:
            return
        if owner.name.startswith("new-"):
            # Possibly between creation and flock in a live process: only when old.
            if os.fstat(ofd).st_mtime < time.time() - 3600:
                os.unlink(owner)
        elif owner.name.startswith("proc-") or owner.name not in live:
            os.unlink(owner)  # registrations keep a dead marker's inode for breakers
    except OSError:
        pass
    finally:
        os.close(ofd)


def _lock_registrations(gitdir: Path, commondir: Path) -> set[str]:
    """Registration names of the lock files git and jpfs create in a repository."""
    paths: list[str] = []
    tops = {gitdir, commondir}
    with contextlib.suppress(OSError):
        tops.update(Path(e.path) for e in os.scandir(commondir / "worktrees") if e.is_dir())
    for top in tops:
        with contextlib.suppress(OSError):
            paths += [e.path for e in os.scandir(top) if e.name.endswith(".lock")]
    for root, _, files in os.walk(commondir / "refs"):
        paths += [os.path.join(root, f) for f in files if f.endswith(".lock")]
    names: set[str] = set()
    for path in paths:
        with contextlib.suppress(OSError):
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                names.add(_registration(os.fstat(fd), os.read(fd, _LOCK_SAMPLE)))
            finally:
                os.close(fd)
    return names


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _replace_file(target: Path, buffers: Sequence[bytes], tmp_dir: Path, fsync: bool) -> None:
    """Replace ``target`` atomically (temp file + rename) while its lock stays held."""
    tmp = tmp_dir / f"tmp-{os.getpid()}-{secrets.token_hex(6)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    try:
        try:
            _writev_all(fd, buffers)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _writev_all(fd: int, buffers: Sequence[bytes]) -> None:
    # Gathered writes spare joining a multi-megabyte index into one buffer first.
    for at in range(0, len(buffers), 512):
        group = buffers[at : at + 512]
        written = os.writev(fd, group)
        for buf in group:
            if written >= len(buf):
                written -= len(buf)
                continue
            _write_all(fd, buf[written:])  # short write (rare): finish one by one
            written = 0


# --------------------------------------------------------------------------- index codec


class _IndexUnsupported(Exception):
    """An index this codec must not rewrite (split, sparse, corrupt, unknown)."""


class _IndexVersion4(_IndexUnsupported):
    """Index version 4 (prefix-compressed paths): handled through libgit2."""


class _IndexFile:
    """The operations the committer needs on the user's index."""

    stamp: tuple[int, int, int, int] | None = None
    foreign = False  # last written by someone else (not by this committer)

    def get(self, path: bytes) -> tuple[bytes, int] | None:
        """(oid, mode) of the stage-0 entry, or None if absent or conflicted."""
        raise NotImplementedError

    def set(self, path: bytes, oid: bytes, mode: int, st: os.stat_result | None) -> None:
        raise NotImplementedError

    def remove(self, path: bytes) -> bool:
        raise NotImplementedError

    def save(
        self,
        index_path: Path,
        tmp_dir: Path,
        racy_modified: Callable[[bytes, bytes], bool],
        *,
        fsync: bool,
        skip_hash: bool,
    ) -> None:
        """Replace the index file (whose lock the caller holds) with this content."""
        raise NotImplementedError


class _CacheTree:
    """One node of the ``TREE`` extension, caching its own serialization."""

    __slots__ = ("cached", "children", "count", "name", "oid")

    def __init__(self, name: bytes, count: int, oid: bytes | None) -> None:
        self.name = name
        self.count = count
        self.oid = oid
        self.children: list[_CacheTree] = []
        self.cached: bytes | None = None

    @classmethod
    def parse(cls, data: bytes) -> _CacheTree:
        pos = 0

        def node() -> _CacheTree:
            nonlocal pos
            nul = data.index(b"\0", pos)
            space = data.index(b" ", nul)
            newline = data.index(b"\n", space)
            count = int(data[nul + 1 : space])
            subtrees = int(data[space + 1 : newline])
            name = data[pos:nul]
            pos = newline + 1
            oid = None
            if count >= 0:
                oid = data[pos : pos + 20]
                pos += 20
            result = cls(name, count, oid)
            result.children = [node() for _ in range(subtrees)]
            return result

        root = node()
        if pos != len(data):
            raise ValueError("trailing bytes in cache-tree")
        return root

    def invalidate(self, path: bytes) -> None:
        # git's do_invalidate_path: mark every tree along the path, drop a subtree that
        # is itself the changed path.
        node = self
        while True:
            node.count, node.oid, node.cached = -1, None, None
            head, sep, rest = path.partition(b"/")
            if not sep:
                node.children = [c for c in node.children if c.name != head]
                return
            for child in node.children:
                if child.name == head:
                    node, path = child, rest
                    break
            else:
                return

    def serialize(self) -> bytes:
        if self.cached is None:
            parts = [b"%s\0%d %d\n" % (self.name, self.count, len(self.children))]
            if self.oid is not None:
                parts.append(self.oid)
            parts.extend(child.serialize() for child in self.children)
            self.cached = b"".join(parts)
        return self.cached


class _Chunk:
    """A run of consecutive index entries and, while unchanged, their joined bytes."""

    __slots__ = ("joined", "keys", "raws")

    def __init__(self, keys: list[bytes], raws: list[bytes]) -> None:
        self.keys = keys
        self.raws = raws
        self.joined: bytes | None = None

    def data(self) -> bytes:
        if self.joined is None:
            self.joined = b"".join(self.raws)
        return self.joined


_CHUNK = 256


class _FastIndex(_IndexFile):
    """Index versions 2 and 3, entries kept as their on-disk bytes.

    Entries live in chunks (a rope) whose joined bytes are cached, so re-emitting a
    100k-entry index after a few changes copies bytes instead of re-joining 100k
    objects. ``keys`` are ``path + b"\\0" + stage``: bytewise order is git's (path,
    stage) order and one bisect range holds all stages of a path.
    """

    def __init__(self, version: int) -> None:
        self.version = version
        self.chunks: list[_Chunk] = []
        self.firsts: list[bytes] = []  # first key of each chunk, for bisect
        self.count = 0
        self.cache_tree: _CacheTree | None = None
        self.reuc: bytes | None = None
        self.mtime_sec = 0
        # Entries that are racily clean relative to the index they were read from or
        # written to; git re-checks those before writing a newer index, and so do we.
        self.racy: dict[bytes, int] = {}
        self.fresh: set[bytes] = set()
        self.stamp: tuple[int, int, int, int] | None = None

    @classmethod
    def empty(cls) -> _FastIndex:
        return cls(2)

    @classmethod
    def parse(cls, data: bytes, st: os.stat_result) -> _FastIndex:
        if len(data) < 32 or data[:4] != b"DIRC":
            raise _IndexUnsupported("not a git index file")
        version, count = struct.unpack_from(">II", data, 4)
        if version == 4:
            raise _IndexVersion4("index version 4")
        if version not in (2, 3):
            raise _IndexUnsupported(f"index version {version}")
        body, checksum = data[:-20], data[-20:]
        if checksum != b"\0" * 20 and hashlib.sha1(body).digest() != checksum:
            raise _IndexUnsupported("index checksum mismatch")
        index = cls(version)
        index.mtime_sec = int(st.st_mtime)
        index.stamp = _stamp(st)
        keys: list[bytes] = []
        raws: list[bytes] = []
        racy = index.racy
        unpack = struct.unpack_from
        find = body.find
        newer = index.mtime_sec
        stages = [b"\0\0", b"\0\1", b"\0\2", b"\0\3"]
        off = 12
        for _ in range(count):
            flags = (body[off + 60] << 8) | body[off + 61]
            start = off + (64 if flags & 0x4000 else 62)
            length = flags & 0xFFF
            end = find(b"\0", start) if length == 0xFFF else start + length
            size = (end - off + 8) & ~7
            path = body[start:end]
            keys.append(path + stages[(flags >> 12) & 3])
            raws.append(body[off : off + size])
            if unpack(">I", body, off + 8)[0] >= newer:
                racy[path] = unpack(">I", body, off + 8)[0]
            off += size
        for at in range(0, len(keys), _CHUNK):
            index.chunks.append(_Chunk(keys[at : at + _CHUNK], raws[at : at + _CHUNK]))
            index.firsts.append(keys[at])
        index.count = len(keys)
        while off + 8 <= len(body):
            sig = body[off : off + 4]
            (length,) = unpack(">I", body, off + 4)
            payload = body[off + 8 : off + 8 + length]
            off += 8 + length
            if sig == b"TREE":
                try:
                    index.cache_tree = _CacheTree.parse(payload)
                except (ValueError, IndexError):
                    index.cache_tree = None  # optional cache; dropping it is always valid
            elif sig == b"REUC":
                index.reuc = payload
            elif not b"A" <= sig[:1] <= b"Z":
                raise _IndexUnsupported(f"mandatory index extension {sig!r}")
        if off != len(body):
            raise _IndexUnsupported("truncated index")
        return index

    def _slices(self, lo: bytes, hi: bytes) -> list[tuple[_Chunk, int, int]]:
        """(chunk, i, j) runs of the entries with lo <= key < hi, in order."""
        found = []
        at = max(bisect.bisect_right(self.firsts, lo) - 1, 0)
        while at < len(self.chunks):
            chunk = self.chunks[at]
            i = bisect.bisect_left(chunk.keys, lo)
            j = bisect.bisect_left(chunk.keys, hi, i)
            if j > i:
                found.append((chunk, i, j))
            if j < len(chunk.keys):
                break
            at += 1
        return found

    def _delete(self, lo: bytes, hi: bytes) -> bool:
        slices = self._slices(lo, hi)
        for chunk, i, j in reversed(slices):
            for key in chunk.keys[i:j]:
                path = key[:-2]
                self.racy.pop(path, None)
                self.fresh.discard(path)
                if self.cache_tree is not None:
                    self.cache_tree.invalidate(path)
            del chunk.keys[i:j]
            del chunk.raws[i:j]
            chunk.joined = None
            self.count -= j - i
            at = self.chunks.index(chunk)
            if chunk.keys:
                self.firsts[at] = chunk.keys[0]
            else:
                del self.chunks[at]
                del self.firsts[at]
        return bool(slices)

    def _insert(self, key: bytes, raw: bytes) -> None:
        if not self.chunks:
            self.chunks.append(_Chunk([], []))
            self.firsts.append(key)
        at = max(bisect.bisect_right(self.firsts, key) - 1, 0)
        chunk = self.chunks[at]
        i = bisect.bisect_left(chunk.keys, key)
        chunk.keys.insert(i, key)
        chunk.raws.insert(i, raw)
        chunk.joined = None
        self.firsts[at] = chunk.keys[0]
        self.count += 1
        if len(chunk.keys) > 2 * _CHUNK:
            tail = _Chunk(chunk.keys[_CHUNK:], chunk.raws[_CHUNK:])
            del chunk.keys[_CHUNK:]
            del chunk.raws[_CHUNK:]
            self.chunks.insert(at + 1, tail)
            self.firsts.insert(at + 1, tail.keys[0])

    def get(self, path: bytes) -> tuple[bytes, int] | None:
        slices = self._slices(path + b"\0\0", path + b"\0\4")
        if len(slices) != 1:
            return None
        chunk, i, j = slices[0]
        if j - i != 1 or chunk.keys[i][-1] != 0:
            return None
        raw = chunk.raws[i]
        return raw[40:60], struct.unpack_from(">I", raw, 24)[0]

    def remove(self, path: bytes) -> bool:
        # Exactly this path: a directory of the same name is described by its files.
        return self._delete(path + b"\0\0", path + b"\0\4")

    def set(self, path: bytes, oid: bytes, mode: int, st: os.stat_result | None) -> None:
        self.remove(path)
        self._delete(path + b"/", path + b"0")  # a directory the file replaces
        # A file where a parent directory used to be a file: drop those entries (git's
        # add_index_entry_with_check does the same).
        parts = path.split(b"/")
        for depth in range(1, len(parts)):
            parent = b"/".join(parts[:depth])
            self._delete(parent + b"\0\0", parent + b"\0\4")
        if st is None:
            fields = (0,) * 6 + (mode,) + (0,) * 3
        else:
            fields = (
                st.st_ctime_ns // 1_000_000_000 & _MASK32,
                st.st_ctime_ns % 1_000_000_000,
                st.st_mtime_ns // 1_000_000_000 & _MASK32,
                st.st_mtime_ns % 1_000_000_000,
                st.st_dev & _MASK32,
                st.st_ino & _MASK32,
                mode,
                st.st_uid & _MASK32,
                st.st_gid & _MASK32,
                st.st_size & _MASK32,
            )
        head = struct.pack(">10I20sH", *fields, oid, min(len(path), 0xFFF))
        self._insert(path + b"\0\0", head + path + b"\0" * (8 - (62 + len(path)) % 8))
        self.fresh.add(path)
        if fields[2]:
            self.racy[path] = fields[2]
        if self.cache_tree is not None:
            self.cache_tree.invalidate(path)

    def _smudge_racy(self, racy_modified: Callable[[bytes, bytes], bool]) -> None:
        for path in list(self.racy):
            if path in self.fresh:
                continue  # just hashed by us; the next write re-checks it
            slices = self._slices(path + b"\0\0", path + b"\0\1")
            if not slices:
                continue
            chunk, i, _ = slices[0]
            raw = chunk.raws[i]
            if raw[36:40] != b"\0\0\0\0" and racy_modified(path, raw):
                chunk.raws[i] = raw[:36] + b"\0\0\0\0" + raw[40:]
                chunk.joined = None

    def save(
        self,
        index_path: Path,
        tmp_dir: Path,
        racy_modified: Callable[[bytes, bytes], bool],
        *,
        fsync: bool,
        skip_hash: bool,
    ) -> None:
        self._smudge_racy(racy_modified)
        parts = [b"DIRC" + struct.pack(">II", self.version, self.count)]
        parts.extend(chunk.data() for chunk in self.chunks)
        if self.cache_tree is not None:
            payload = self.cache_tree.serialize()
            parts += [b"TREE", struct.pack(">I", len(payload)), payload]
        if self.reuc is not None:
            parts += [b"REUC", struct.pack(">I", len(self.reuc)), self.reuc]
        if skip_hash:
            parts.append(b"\0" * 20)
        else:
            digest = hashlib.sha1()
            for part in parts:
                digest.update(part)
            parts.append(digest.digest())
        _replace_file(index_path, parts, tmp_dir, fsync)
        st = os.stat(index_path)
        self.stamp = _stamp(st)
        self.mtime_sec = int(st.st_mtime)
        self.racy = {p: m for p, m in self.racy.items() if m >= self.mtime_sec}
        self.fresh.clear()


class _Libgit2Index(_IndexFile):
    """Fallback for index version 4, through a pygit2 Index bound to a private path."""

    def __init__(self, index: pygit2.Index, tmp: Path) -> None:
        self._index = index
        self._tmp = tmp

    @classmethod
    def load(cls, index_path: Path, tmp_dir: Path, st: os.stat_result) -> _Libgit2Index:
        tmp = tmp_dir / f"tmp-index-{os.getpid()}-{secrets.token_hex(6)}"
        # A hard link lets libgit2 read the real index while writing elsewhere: we hold
        # index.lock, so libgit2 must not try to take it.
        os.link(index_path, tmp)
        try:
            index = pygit2.Index(str(tmp))
        except pygit2.GitError as exc:
            raise _IndexUnsupported(str(exc)) from exc
        finally:
            os.unlink(tmp)
        result = cls(index, tmp)
        result.stamp = _stamp(st)
        return result

    def get(self, path: bytes) -> tuple[bytes, int] | None:
        name = os.fsdecode(path)
        try:
            entry = self._index[name]  # stage 0 only: a conflicted path raises
        except KeyError:
            return None
        return entry.id.raw, int(entry.mode)

    def set(self, path: bytes, oid: bytes, mode: int, st: os.stat_result | None) -> None:
        name = os.fsdecode(path)
        self.remove(path)
        with contextlib.suppress(pygit2.GitError, OSError, KeyError):
            self._index.remove_directory(name)  # a directory the file replaces
        self._index.add(pygit2.IndexEntry(name, pygit2.Oid(raw=oid), pygit2.enums.FileMode(mode)))

    def remove(self, path: bytes) -> bool:
        name = os.fsdecode(path)
        found = False
        for stage in range(4):
            with contextlib.suppress(pygit2.GitError, OSError, KeyError):
                self._index.remove(name, stage)
                found = True
        return found

    def save(
        self,
        index_path: Path,
        tmp_dir: Path,
        racy_modified: Callable[[bytes, bytes], bool],
        *,
        fsync: bool,
        skip_hash: bool,
    ) -> None:
        self._index.write()
        os.rename(self._tmp, index_path)
        self.stamp = _stamp(os.stat(index_path))
