"""Refs and commits read in process (libgit2 through pygit2): what a ref names, whether
one commit descends from another, how far two have diverged, the files of a commit.

In process because the sync loop and merges ask these on every pass: a ``git
merge-base --is-ancestor`` is a 2-3 ms process per question.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

import pygit2

from jpfs.errors import GitError


def resolve(repo: Path, ref: str) -> str | None:
    """The commit ``ref`` names, or None when there is no such ref (in process)."""
    try:
        reference = repository(repo).references.get(ref)
        return None if reference is None else str(reference.peel(pygit2.Commit).id)
    except (pygit2.GitError, KeyError, ValueError) as exc:
        raise GitError(f"cannot read {ref} in {repo}: {exc}") from exc


def is_ancestor(repo: Path, older: str, newer: str) -> bool:
    """Whether commit ``older`` is ``newer`` or one of its ancestors (in process)."""
    if older == newer:
        return True
    try:
        return bool(repository(repo).descendant_of(newer, older))
    except (pygit2.GitError, KeyError, ValueError) as exc:
        raise GitError(f"cannot compare {older[:12]} and {newer[:12]}: {exc}") from exc


def ahead_behind(repo: Path, local: str, upstream: str) -> tuple[int, int]:
    """Commits on ``local`` not on ``upstream``, and the reverse (0, 0 if either is
    missing)."""
    ours, theirs = resolve(repo, local), resolve(repo, upstream)
    if ours is None or theirs is None:
        return 0, 0
    try:
        ahead, behind = repository(repo).ahead_behind(ours, theirs)
    except (pygit2.GitError, KeyError, ValueError) as exc:
        raise GitError(f"cannot compare {local} and {upstream}: {exc}") from exc
    return int(ahead), int(behind)


def messages_under(repo: Path, prefix: str, *more: str) -> dict[str, tuple[str, str]]:
    """The refs whose names start with ``prefix`` (or one of ``more``): name -> (object
    id, commit message; "" for an object that is not a commit). In process, in one
    pass over the refs: the sync loop asks after every fetch."""
    out: dict[str, tuple[str, str]] = {}
    prefixes = (prefix, *more)
    try:
        handle = repository(repo)
        for reference in handle.references.iterator():
            if not reference.name.startswith(prefixes):
                continue
            found = handle.get(reference.resolve().target)
            message = found.message if isinstance(found, pygit2.Commit) else ""
            out[reference.name] = (str(found.id) if found is not None else "", message)
    except (pygit2.GitError, KeyError, ValueError) as exc:
        raise GitError(f"cannot list {'* '.join(prefixes)}* in {repo}: {exc}") from exc
    return out


def changed_since_fork(repo: Path, ours: str, theirs: str, path: str) -> bool:
    """Whether ``theirs`` holds a change under ``path`` that ``ours`` lacks: its tree
    there differs from the one at their merge base (in process; ``theirs`` contained in
    ``ours`` lacks nothing)."""
    if ours == theirs:
        return False
    try:
        handle = repository(repo)
        if handle.descendant_of(ours, theirs):
            return False
        base = handle.merge_base(ours, theirs)
        return _entry(handle, theirs, path) != (_entry(handle, base, path) if base else None)
    except (pygit2.GitError, KeyError, ValueError) as exc:
        raise GitError(f"cannot compare {ours[:12]} and {theirs[:12]}: {exc}") from exc


class Changed(NamedTuple):
    """A file that differs between two commits: as ``after`` has it (blob id and mode),
    or ``deleted``."""

    path: str
    deleted: bool
    blob: str
    mode: int


def changed_files(repo: Path, before: str, after: str) -> list[Changed]:
    """The files that differ between two commits (in process; unchanged subtrees are
    skipped by their id, so the cost follows the change, not the size of the tree)."""
    try:
        handle = repository(repo)
        old, new = (_commit(handle, rev).tree for rev in (before, after))
        deltas = old.diff_to_tree(new).deltas
        return [
            Changed(
                d.new_file.path,
                d.status == pygit2.enums.DeltaStatus.DELETED,
                str(d.new_file.id),
                d.new_file.mode,
            )
            for d in deltas
        ]
    except (pygit2.GitError, KeyError, ValueError) as exc:
        raise GitError(f"cannot compare {before[:12]} and {after[:12]}: {exc}") from exc


def _commit(handle: pygit2.Repository, commit: str | pygit2.Oid) -> pygit2.Commit:
    found = handle.get(commit)
    if not isinstance(found, pygit2.Commit):
        raise GitError(f"{commit} is not a commit")
    return found


def _entry(handle: pygit2.Repository, commit: str | pygit2.Oid, path: str) -> str | None:
    try:
        return str(_commit(handle, commit).tree[path].id)
    except KeyError:
        return None


# Handles kept per thread (pygit2 handles are not to be shared between threads) for at
# most HANDLE_TTL seconds. Opening one costs 70-170 us (config files, the worktree's
# gitdir and commondir), more than the question asked of it (a ref: 6 us), and a sync
# cycle asks a dozen. A kept handle still sees what other processes write: libgit2 reads
# loose refs from disk at each lookup, re-reads packed-refs when its stamp changes and
# rescans the packs when an object is missing; the bound keeps a replaced repository or
# a repacked one's old pack files from being held for long.
HANDLE_TTL = 1.0
_kept = threading.local()


def repository(repo: Path) -> pygit2.Repository:
    """A pygit2 handle on ``repo`` for this thread's immediate use (its errors are the
    caller's to translate); see HANDLE_TTL. Not to be kept: :func:`fresh` is."""
    now = time.monotonic()
    handles: dict[str, tuple[float, pygit2.Repository]] = _kept.__dict__.setdefault("handles", {})
    key = os.fspath(repo)
    found = handles.get(key)
    if found is not None and now - found[0] < HANDLE_TTL:
        return found[1]
    handle = fresh(repo)
    for stale in [k for k, (opened, _) in handles.items() if now - opened >= HANDLE_TTL]:
        del handles[stale]
    handles[key] = (now, handle)
    return handle


def forget() -> None:
    """Drop this thread's kept handles, for a thread that goes idle: a handle holds the
    pack files it read open (deleted ones too, after a repack) until it goes."""
    _kept.__dict__.pop("handles", None)


def fresh(repo: Path) -> pygit2.Repository:
    """A new pygit2 handle on ``repo``, for an object that keeps one."""
    return pygit2.Repository(os.fspath(repo))


def read_files(repo: Path, rev: str, paths: Iterable[str]) -> dict[str, bytes]:
    """The contents of those ``paths`` that are files in ``rev`` (a full ref name or a
    commit id), read in process: one tree lookup each, however large the tree."""
    try:
        handle = repository(repo)
        if rev.startswith("refs/"):
            reference = handle.references.get(rev)
            if reference is None:
                return {}
            commit = reference.peel(pygit2.Commit)
        else:
            found = handle.get(rev)
            if not isinstance(found, pygit2.Commit):
                return {}
            commit = found
        tree = commit.tree
        out: dict[str, bytes] = {}
        for path in paths:
            try:
                entry = tree[path]
            except (KeyError, ValueError):
                continue
            blob = handle.get(entry.id)
            if isinstance(blob, pygit2.Blob):
                out[path] = blob.data
        return out
    except (pygit2.GitError, ValueError) as exc:
        raise GitError(f"cannot read {rev} in {repo}: {exc}") from exc
