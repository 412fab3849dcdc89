"""Keeping the committed worktree's index in step with jpfs's commits.

jpfs commits on the record worktree (``conversations/``), whose index nobody but jpfs
writes, except a human running git there by hand; the rules below are those of any
index shared with git.

After a commit, ``git status`` shows the committed paths clean: their index entries are
set to the committed state, nothing else is touched. This happens while we hold
``<gitdir>/index.lock`` (the lock ``git add``/``git commit`` take), and the index is
written *before* the ref moves. ``git commit`` reads HEAD and then the index before it
takes ``index.lock``, and its ref update is a compare-and-swap against the HEAD it read:
whoever sees our new HEAD therefore also sees our index, and a commit that saw the old
HEAD fails and changes nothing (writing the index after the ref would let it commit our
new HEAD with our files reverted). If ``index.lock`` stays busy for ``index_lock_timeout``
(2 s; ``git commit`` holds it while the editor is open) we commit without touching the
index, and the next commit that gets the lock syncs those paths (the :attr:`debt`).

git's own lost-update race remains: a plain ``git commit`` writes back the index it read
before locking (refreshed stat data, cache-tree) even when its ref update then fails. A
retry started within milliseconds would see our HEAD without our entries and revert our
files. We shrink that window: when we find the index rewritten by someone else, we
re-sync the paths committed in the last 10 s (up to 128), at the next commit and, for
10 s after a commit, within 10 ms from a watcher that polls the index's stat. The
working-tree files survive in any case, and ``commit_pending()`` recommits them.

The file itself goes through :mod:`jpfs.infra.committer.indexfile`, split from a shared
base when large or when git split it (:mod:`jpfs.infra.committer.splitindex`). Sparse
indexes, and split ones whose base is gone, are left alone: the commit lands and
``git status`` lists the paths until the user's next ``git add``/``git reset``.

Every index written here is named in :mod:`jpfs.infra.indexepoch`'s marker, so that a
reader can tell whether anyone else wrote the index since (what git tracks may then
have changed behind the files' backs).
"""

from __future__ import annotations

import logging
import os
import stat
import struct
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import pygit2

from jpfs.errors import JpfsError
from jpfs.infra import indexepoch
from jpfs.infra.committer.fileio import file_stamp
from jpfs.infra.committer.indexfile import (
    MASK32,
    FastIndex,
    IndexUnsupported,
    IndexVersion4,
)
from jpfs.infra.committer.indexport import IndexFile
from jpfs.infra.committer.libgit2index import Libgit2Index
from jpfs.infra.committer.lockfile import acquire
from jpfs.infra.committer.splitindex import SplitPolicy
from jpfs.infra.committer.trees import TreeView
from jpfs.infra.committer.worktree import Blob

log = logging.getLogger(__name__)

_RECENT_MAX = 128
_WATCH_SECONDS = 10.0
_WATCH_INTERVAL = 0.01
_HEAL_LOCK_TIMEOUT = 0.2
# Filesystem timestamps come from a coarse clock (jiffies); 50 ms is far beyond it.
_TIMESTAMP_SLACK_NS = 50_000_000


class UserIndex:
    """The work tree's index (``<gitdir>/index``; for jpfs the record's) as this
    committer reads and writes it.

    ``head_tree`` returns the tree HEAD holds now; ``request_heal`` asks the committer to
    call :meth:`heal` in its turn (from the watcher thread).
    """

    def __init__(
        self,
        root: Path,
        gitdir: Path,
        private: Path,
        owners: Path,
        *,
        fsync: bool,
        skip_hash: bool,
        split: SplitPolicy,
        head_tree: Callable[[], TreeView],
        request_heal: Callable[[], object],
    ) -> None:
        self._gitdir = gitdir
        self._private = private
        self._owners = owners
        self._fsync = fsync
        self._skip_hash = skip_hash
        self._split = split
        self._head_tree = head_tree
        self._request_heal = request_heal
        self._index_cache: IndexFile | None = None
        # Paths committed while index.lock was busy: synced at the next chance.
        self.debt: set[str] = set()
        # Paths we committed lately, re-checked in the index at every write and by the
        # watcher: `git commit` may write back an index it read before ours.
        self._recent: dict[str, float] = {}
        self._last_commit = 0.0
        self._watcher: threading.Thread | None = None
        self._stopping = threading.Event()
        self._verified: dict[bytes, tuple[tuple[int, int, int, int], bytes]] = {}
        self._root_bytes = os.fsencode(root)
        self._unsupported: tuple[int, int, int, int] | None = None  # its stamp, once said

    def close(self) -> None:
        """Stop the watcher and forget the cached index."""
        self._stopping.set()
        self._index_cache = None

    def _load(self) -> IndexFile | None:
        path = self._gitdir / "index"
        try:
            st = os.stat(path)
        except FileNotFoundError:
            self._index_cache = FastIndex.empty()
            return self._index_cache
        stamp = file_stamp(st)
        cached = self._index_cache
        if cached is not None and cached.stamp == stamp:
            return cached
        if stamp == self._unsupported:
            return None  # said once; read again when someone rewrites it
        # Freed before the new one is read: two copies at once were a peak the
        # process kept. The base it was split from is kept for the new one, if the same.
        known = cached.split if isinstance(cached, FastIndex) else None
        self._index_cache = cached = None
        try:
            data = path.read_bytes()
            loaded: IndexFile = FastIndex.parse(data, st, self._gitdir, known)
        except IndexVersion4:
            loaded = Libgit2Index.load(path, self._private, st)
        except IndexUnsupported as exc:
            self._unsupported = stamp
            log.warning(
                "%s is left as it is (%s): commits still land, but `git status` there"
                " lists them until the index is rebuilt: rm %s && git -C %s reset -q",
                path,
                exc,
                path,
                self._root_bytes.decode(errors="replace"),
            )
            return None
        loaded.foreign = True
        self._index_cache = loaded
        return loaded

    def sync(self, entries: dict[str, Blob | None], tree: TreeView) -> None:
        """Set the index entries of ``entries``' paths to ``tree`` (index.lock held)."""
        try:
            index = self._load()
            if index is None:
                return
            desired = self._desired(entries, tree, index)
            changed = False
            for path, blob in desired.items():
                key = os.fsencode(path)
                if blob is None:
                    changed |= index.remove(key)
                elif index.get(key) != (blob.oid.raw, blob.mode):
                    index.set(key, blob.oid.raw, blob.mode, blob.stat)
                    changed = True
            if changed:
                found = index.stamp
                index.save(
                    self._gitdir / "index",
                    self._private,
                    self._racy_modified,
                    fsync=self._fsync,
                    skip_hash=self._skip_hash,
                    split=self._split,
                )
                index.foreign = False
                if index.stamp is not None:
                    indexepoch.record(self._gitdir, found, index.stamp)
        except BaseException:
            # The in-memory copy may be half-updated; re-read it next time.
            self._index_cache = None
            raise

    def _desired(
        self, entries: dict[str, Blob | None], tree: TreeView, index: IndexFile
    ) -> dict[str, Blob | None]:
        """Index state wanted for ``entries``, owed paths and recent paths.

        Recent paths only matter in an index someone else wrote since our last write:
        that is how a `git commit` can have put back entries it read before ours.
        """
        desired: dict[str, Blob | None] = dict(entries)
        extra = self.debt | self._recent.keys() if index.foreign else self.debt
        for path in extra - desired.keys():
            found = tree.get(path)
            desired[path] = (
                None if found is None else Blob(pygit2.Oid(raw=found[1]), found[0], b"", None)
            )
        return desired

    def agrees(self, entries: dict[str, Blob | None], tree: TreeView) -> bool:
        """Whether the index already holds ``entries`` (an unlocked look)."""
        index = self._load()
        if index is None:
            return True  # an index we cannot rewrite: nothing to do either way
        return all(
            index.get(os.fsencode(path)) == (None if blob is None else (blob.oid.raw, blob.mode))
            for path, blob in self._desired(entries, tree, index).items()
        )

    def remember(self, paths: Iterable[str]) -> None:
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
                stamp = file_stamp(os.stat(path))
            except OSError:
                continue
            cache = self._index_cache
            if stamp == seen or cache is None or stamp == cache.stamp:
                continue
            seen = stamp
            try:
                self._request_heal()
            except JpfsError:
                return

    def heal(self) -> None:
        """Re-sync recent paths if an index written behind our back lost them."""
        if not self._recent and not self.debt:
            return
        tree = self._head_tree()
        if self.agrees({}, tree):
            return
        lock = acquire(self._gitdir / "index", self._owners, _HEAL_LOCK_TIMEOUT, required=False)
        if lock is None:
            return
        try:
            # A committer writes the index and moves the ref while holding index.lock, so
            # HEAD read before we got the lock may be older than the index: read it again.
            tree = self._head_tree()
            if self.agrees({}, tree):
                return
            self.sync({}, tree)
            self.debt.clear()
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
                int(st.st_mtime) & MASK32 != mtime
                or st.st_ino & MASK32 != ino
                or st.st_size & MASK32 != size
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
