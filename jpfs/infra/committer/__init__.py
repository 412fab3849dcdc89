"""The one committer: every jpfs state change becomes a git commit through here.

``Committer.commit(Change(paths, subject, trailers, author))`` snapshots the
working-tree state of the paths into one commit on the branch checked out in its work
tree (group commit, compare-and-swap on the branch ref, that worktree's index kept in
sync); ``commit_pending()`` commits anything owned that differs from HEAD (crash
recovery). jpfs opens it on the record worktree (``conversations/``, branch
``jpfs-record``; :mod:`jpfs.core.recordbranch`), never on the user's work tree.

Modules, one job each:

* :mod:`~jpfs.infra.committer.port`: the interface jpfs uses (``commit``, ``commit_pending``,
  ``close``).
* :mod:`~jpfs.infra.committer.core`: the :class:`Committer` (snapshots, landing commits).
* :mod:`~jpfs.infra.committer.settings`: what it takes from git's config (identity, index format).
* :mod:`~jpfs.infra.committer.reference`: the same contract on git's plumbing commands,
  slow and plain; the tests hold the fast one against it.
* :mod:`~jpfs.infra.committer.batch`: group commit of concurrent ``commit()`` calls.
* :mod:`~jpfs.infra.committer.plan`: the commits a batch of snapshots becomes.
* :mod:`~jpfs.infra.committer.worktree`: path checks and working-tree snapshots.
* :mod:`~jpfs.infra.committer.trees`: cached trees: lookups, and trees with changes spliced in.
* :mod:`~jpfs.infra.committer.objects`: object serialisation, loose objects and packfiles.
* :mod:`~jpfs.infra.committer.refs`: reading refs, moving a ref by compare-and-swap, reflogs.
* :mod:`~jpfs.infra.committer.lockfile`: git lock files that a crash never leaves blocking.
* :mod:`~jpfs.infra.committer.userindex`: keeping the worktree's index in step (and healing it).
* :mod:`~jpfs.infra.committer.indexport`: the index as it is kept in step (two codecs).
* :mod:`~jpfs.infra.committer.indexfile`: the index file codec.
* :mod:`~jpfs.infra.committer.cachetree`: the index's cache-tree extension.
* :mod:`~jpfs.infra.committer.maintenance`: background ``git gc``/repack and debris sweeps.

Crash safety and durability
===========================
Objects are written before the ref; refs and the index are replaced by ``rename``;
reflog lines are single ``O_APPEND`` writes. A SIGKILL at any point leaves ``git fsck``
clean (at worst dangling objects) and no lock that blocks forever (see
:mod:`~jpfs.infra.committer.lockfile`); a crash between writing a file and committing it is
repaired by ``commit_pending()``. Like git's defaults (``core.fsync`` leaves out refs, the
index and loose objects), nothing is fsynced unless ``fsync=True``, which also turns on
libgit2's gitdir fsync process-wide.

Worktrees: per-worktree files (``HEAD``, ``index``, their locks, ``logs/HEAD``) live in the
worktree's gitdir (``repo.path``); branches, ``packed-refs``, objects and lock markers in
the common dir (``<gitdir>/commondir``). POSIX only (``flock``); reftable and SHA-256
repositories are not supported. Create committers after forking.
"""

from __future__ import annotations

from jpfs.infra.committer.change import Change, Identity
from jpfs.infra.committer.core import Committer

__all__ = ["Change", "Committer", "Identity"]
