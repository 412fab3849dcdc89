"""Taking a peer's record into ours: fast-forward, or a merge that never loses a file.

Conversations are disjoint directories, so two machines' records almost always merge
without a conflict: git's own tree merge (``git merge-tree --write-tree``, in memory)
does it, and the record worktree is moved with ``git read-tree -m -u``, the two-tree
checkout that updates only files that changed and refuses to overwrite a file edited
and not yet committed here (we then try again after the daemon commits it). The branch
moves last, by compare-and-swap, so a commit landing meanwhile makes us start over.

A real conflict (two humans editing one file on two clones) keeps both: our version
stays at its path and theirs is written beside it as ``NAME.conflict-<machine>``; the
merge commit names each such file in a ``Jpfs-Conflict`` trailer.

A *forfeited* conversation is one whose lease another machine took over while we
worked on it: its directory is taken from the remote as it is, so our late turn is
never merged as a duplicate of the one the new holder runs (see protocol/sync.md).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from jpfs.core import recordbranch
from jpfs.errors import GitError
from jpfs.infra import git
from jpfs.infra.git import checkout
from jpfs.infra.git.refs import is_ancestor, resolve

log = logging.getLogger("jpfs.services.sync")

_ATTEMPTS = 5
_SAFE_TAG = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass
class Integration:
    """What one :func:`integrate` did."""

    kind: str  # "up-to-date", "fast-forward", "merge" or "busy" (try again later)
    before: str | None = None
    after: str | None = None
    conflicts: list[str] = field(default_factory=list)
    reason: str = ""


def integrate(
    worktree: Path,
    branch: str,
    theirs: str,
    *,
    remote: str,
    forfeit: Sequence[str] = (),
    aside: Path | None = None,
    writing: Callable[[str], None] = lambda new: None,
) -> Integration:
    """Bring commit ``theirs`` into ``branch``, checked out at ``worktree``.

    Files of a forfeited conversation not committed here (the cancelled run's, or an
    edit made meanwhile) would block the merge for ever: they are copied under
    ``aside`` and dropped, so the conversation becomes what the remote holds.
    ``writing(new)``: said before the worktree's files are moved to commit ``new``
    (they are there before the branch is, and stay if this ends "busy")."""
    ref = f"refs/heads/{branch}"
    moved = False  # an attempt lost with their files in the worktree already
    for _attempt in range(_ATTEMPTS):
        ours = resolve(worktree, ref)
        if ours is None:
            raise GitError(f"the record branch {branch} is missing; run `jpfs init`")
        if ours == theirs or (is_ancestor(worktree, theirs, ours) and not forfeit):
            return Integration("up-to-date", ours, ours)
        conflicts: list[str] = []
        if is_ancestor(worktree, ours, theirs):
            kind, new = "fast-forward", theirs
        else:
            kind = "merge"
            tree, conflicts = _merge_trees(worktree, ours, theirs, remote, forfeit)
            new = _merge_commit(worktree, tree, ours, theirs, remote, conflicts, forfeit)
        if forfeit and aside is not None:
            _clear(worktree, forfeit, aside)
        writing(new)
        busy = _checkout(worktree, ours, new, wait=moved)
        if busy:
            return Integration("busy", ours, ours, reason=busy)
        proc = git.run(
            worktree,
            ["update-ref", "-m", f"jpfs: sync with {remote}", ref, new, ours],
            check=False,
        )
        if proc.returncode == 0:
            return Integration(kind, ours, new, conflicts)
        # A commit landed meanwhile: the worktree already holds their files, and the
        # next merge takes the new tip (any file it committed is the same on both sides).
        # Their files must not stay there with the branch short of them: the daemon
        # would take them for a human's edit and commit them as one. So the next
        # attempts wait out the index lock (that commit's, most likely) to finish.
        moved = True
    return Integration("busy", reason=f"{branch} kept moving under {_ATTEMPTS} attempts")


def _clear(worktree: Path, prefixes: Sequence[str], aside: Path) -> None:
    """Save aside, then drop, what differs from the tip under ``prefixes``."""
    listed = git.run(
        worktree, ["status", "--porcelain", "-z", "--untracked-files=all", "--", *prefixes]
    ).stdout
    entries = [e for e in listed.split("\0") if len(e) > 3]
    if not entries:
        return
    saved = aside / time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    for entry in entries:
        path = worktree / entry[3:]
        if path.is_file() and not path.is_symlink():
            target = saved / entry[3:]
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
    log.warning(
        "sync: %d uncommitted file(s) of forfeited conversation(s) %s saved in %s",
        len(entries),
        ", ".join(prefixes),
        saved,
    )
    git.run(worktree, ["checkout", "-f", "HEAD", "--", *prefixes], check=False)
    for entry in entries:
        if entry.startswith("??"):
            with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                (worktree / entry[3:]).unlink()


def _checkout(worktree: Path, ours: str, new: str, *, wait: bool = False) -> str:
    """Move the worktree's files and index from ``ours`` to ``new``; "" or why not.
    ``wait``: a busy index lock is waited out (at most :data:`checkout.LOCK_WAIT`)
    rather than reported at once."""
    proc = checkout.switch(worktree, ours, new, lock_wait=checkout.LOCK_WAIT if wait else 0.0)
    if proc.returncode == 0:
        return ""
    # Its first line: read-tree's last ones are advice ("Aborting", "remove the file
    # manually to continue"), not the reason the engine reports.
    return git.complaint(proc.stderr or proc.stdout, first=True) or "read-tree"


def _merge_trees(
    repo: Path, ours: str, theirs: str, remote: str, forfeit: Sequence[str]
) -> tuple[str, list[str]]:
    args = ["merge-tree", "--write-tree", "--allow-unrelated-histories", "--name-only"]
    proc = git.run(repo, [*args, "--no-messages", "-z", ours, theirs], ok=(0, 1))
    tree, *rest = proc.stdout.split("\0")
    # A forfeited conversation becomes the remote's as a whole: no copy of ours beside.
    conflicted = sorted({p for p in rest if p and not p.startswith(tuple(forfeit))})
    if not conflicted and not forfeit:
        return tree, []
    with _scratch_index(repo) as env:
        git.run(repo, ["read-tree", tree], env=env)
        kept: list[str] = []
        lines: list[str] = []
        removals: list[str] = []
        for path in conflicted:
            tag = _author_machine(repo, theirs, path) or _SAFE_TAG.sub("-", remote) or "remote"
            mine, other = _blob(repo, ours, path), _blob(repo, theirs, path)
            removals.append(path)
            if mine is not None:
                lines.append(f"{mine[0]} {mine[1]}\t{path}")
            if other is not None:
                copy = f"{path}.conflict-{tag}" if mine is not None else path
                lines.append(f"{other[0]} {other[1]}\t{copy}")
                if copy != path:
                    kept.append(copy)
        for prefix in forfeit:
            # The conversation as the remote holds it, nothing of ours.
            listed = git.run(repo, ["ls-files", "-z", "--", prefix], env=env).stdout
            removals.extend(p for p in listed.split("\0") if p)
            remote_files = git.run(repo, ["ls-tree", "-r", "-z", theirs, "--", prefix]).stdout
            for entry in remote_files.split("\0"):
                if entry:
                    meta, _, path = entry.partition("\t")
                    mode, _, oid = meta.split(" ")
                    lines.append(f"{mode} {oid}\t{path}")
        if removals:
            git.run(
                repo,
                ["update-index", "-z", "--force-remove", "--stdin"],
                input="\0".join(removals) + "\0",
                env=env,
            )
        if lines:
            git.run(repo, ["update-index", "--index-info"], input="\n".join(lines) + "\n", env=env)
        merged = git.run(repo, ["write-tree"], env=env).stdout.strip()
    return merged, kept


def _author_machine(repo: Path, theirs: str, path: str) -> str:
    """The machine that made their last change of ``path`` (its ``Jpfs-Machine``; the
    first, as a group commit of several changes carries one per change)."""
    fmt = "--format=%(trailers:key=Jpfs-Machine,valueonly,separator=%x0A)"
    out = git.run(repo, ["log", "-1", fmt, theirs, "--", path], check=False).stdout
    return _SAFE_TAG.sub("-", next(iter(out.split()), ""))


def _blob(repo: Path, commit: str, path: str) -> tuple[str, str] | None:
    out = git.run(repo, ["ls-tree", "-z", commit, "--", path]).stdout
    meta, _, name = out.partition("\t")
    if not meta or name.rstrip("\0") != path:
        return None
    mode, kind, oid = meta.split(" ")
    return (mode, oid) if kind == "blob" else None


def _merge_commit(
    repo: Path,
    tree: str,
    ours: str,
    theirs: str,
    remote: str,
    conflicts: list[str],
    forfeit: Sequence[str],
) -> str:
    trailers = ["Jpfs-Event: sync"]
    trailers += [f"Jpfs-Conflict: {path}" for path in conflicts]
    trailers += [f"Jpfs-Forfeit: {prefix}" for prefix in forfeit]
    message = f"jpfs: sync with {remote}\n\n" + "\n".join(trailers) + "\n"
    args = ["commit-tree", tree, "-p", ours, "-p", theirs]
    return git.run(repo, args, input=message, env=recordbranch.identity_env(repo)).stdout.strip()


@contextlib.contextmanager
def _scratch_index(repo: Path) -> Iterator[dict[str, str]]:
    """A private index file, so the merge never touches the worktree's own index."""
    fd, name = tempfile.mkstemp(prefix="jpfs-merge-", suffix=".index")
    os.close(fd)
    os.unlink(name)  # git wants to create it
    try:
        yield {**os.environ, "GIT_INDEX_FILE": name}
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name)
