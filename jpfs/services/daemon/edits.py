"""Human edits: which files under the conversation root differ from the record, and committing them.

The daemon never trusts an event to say who wrote a file. It compares the file's git
blob id with HEAD's: equal means the write is already committed (the daemon's own
writes, a duplicate event, a ``jpfs query`` that committed), different means someone
wrote it and nobody committed it yet, i.e. a human. Such files are committed with the
user's git identity (the committer's default author), one commit per conversation,
before the agent reacts to them.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from jpfs.core import ids, record
from jpfs.core.conversation import ANSWERS
from jpfs.core.scope import TASK
from jpfs.core.workspace import Workspace
from jpfs.errors import GitError, IdError, JpfsError
from jpfs.infra import git
from jpfs.infra.committer import Change
from jpfs.infra.git.objects import Tip, blob_id

log = logging.getLogger("jpfs.services.daemon")

# Files jpfs's own writers produce outside the conversation's run lock (mail from a
# child, a CLI command): the writer commits them right away, so the daemon commits
# them only after they settled, as crash recovery, never racing the writer.
AGENT_WRITTEN_DIRS = frozenset({"events", "inbox"})
AGENT_WRITTEN_FILES = frozenset({"questions.md", "result.md"})


def conv_of(rel: str) -> tuple[str, str]:
    """Split a path under the conversation root into (conversation id, path inside it).

    The id is the longest prefix of valid, non-reserved segments that still leaves a
    name inside it: ``a/b/events/0001-user.md`` -> ``("a/b", "events/0001-user.md")``;
    a file at the root belongs to the root, id ``""``.
    """
    parts = rel.split("/")
    n = 0
    while n < len(parts) - 1:
        seg = parts[n]
        if seg in ids.RESERVED or ".." in seg or not ids.SEGMENT_RE.fullmatch(seg):
            break
        n += 1
    return "/".join(parts[:n]), "/".join(parts[n:])


def conv_dir_of(rel: str) -> str:
    """The id a directory path names, for directory events (``a/b`` -> ``a/b``)."""
    conv, inner = conv_of(rel + "/x")
    return conv if inner == "x" else conv_of(rel)[0]


def agent_written(inner: str) -> bool:
    first = inner.split("/", 1)[0]
    return first in AGENT_WRITTEN_DIRS or inner in AGENT_WRITTEN_FILES


def file_id(path: Path) -> tuple[str, int] | None:
    """(git blob id, mode) of a working-tree file; None when missing or not a file."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if stat.S_ISLNK(st.st_mode):
        return blob_id(os.fsencode(os.readlink(path))), 0o120000
    if not stat.S_ISREG(st.st_mode):
        return None
    try:
        data = path.read_bytes()
    except (FileNotFoundError, IsADirectoryError):
        return None
    mode = 0o100755 if st.st_mode & stat.S_IXUSR else 0o100644
    return blob_id(data), mode


@dataclass
class Dirty:
    """Repo-relative paths of one conversation that differ from HEAD."""

    conv_id: str
    paths: list[str]


def differs(ws: Workspace, head: Tip, rel: str) -> bool:
    """Whether conversation-root-relative file ``rel`` differs from the record's tip
    (untracked counts)."""
    now = file_id(ws.conv_root / rel)
    old = head.entry(rel)
    if now is None:
        return old is not None
    if old is None:
        return not head.ignored(rel)
    return now != old


def expand(ws: Workspace, head: Tip, rel: str) -> list[str]:
    """``rel`` itself, or for a directory every file in it or in HEAD under it."""
    full = ws.conv_root / rel
    if not full.is_dir() or full.is_symlink():
        tracked = head.files_under(rel) if not full.exists() else []
        return tracked or [rel]
    out: set[str] = set()
    for top, dirs, files in os.walk(full):
        dirs[:] = [d for d in dirs if d != ".git"]
        base = Path(top).relative_to(ws.conv_root).as_posix()
        # The record worktree's own `.git` file is git's, never a conversation file.
        out.update(f"{base}/{name}" if base != "." else name for name in files if name != ".git")
    out.update(head.files_under(rel))
    return sorted(out)


def event_for(inners: Iterable[str]) -> str:
    names = set(inners)
    if TASK in names:
        return "task"
    if ANSWERS in names:
        return "answers"
    return "edit"


def commit_edits(ws: Workspace, conv_id: str, rels: list[str]) -> str | None:
    """Commit files of one conversation (root-relative) as the user's edit."""
    inners = [rel[len(conv_id) + 1 :] if conv_id else rel for rel in rels]
    event = event_for(inners)
    paths = [f"{ws.conv_root_rel}/{rel}" for rel in sorted(rels)]
    shown = ", ".join(sorted(inners)[:3]) + (f" (+{len(inners) - 3})" if len(inners) > 3 else "")
    if not conv_id:
        return ws.commit(Change(tuple(paths), f"jpfs: edit {shown}", (("Jpfs-Event", "edit"),)))
    note = shown if event == "edit" else None
    return record.commit(ws, conv_id, event, paths=paths, note=note)


def dirty(
    ws: Workspace,
    head: Tip,
    paths: set[str],
    on_error: Callable[[str], None] = lambda _: None,
    merging: Tip | None = None,
) -> dict[str, list[str]]:
    """Files among ``paths`` (root-relative, directories expanded) that differ from
    HEAD, by conversation. A name that is not valid UTF-8 is left out and reported
    (:func:`unnamed`): it cannot be a path of the record, and must not hold up the files
    around it. ``merging``: the commit a sync is moving the worktree to, ahead of the
    branch: a file as it has it is the sync's, not an edit."""
    if not paths:
        return {}
    head.refresh()
    groups: dict[str, set[str]] = {}
    for path in paths:
        if unnamed(path, on_error):
            continue
        for rel in expand(ws, head, path):
            if unnamed(rel, on_error) or not differs(ws, head, rel):
                continue
            if merging is None or differs(ws, merging, rel):
                groups.setdefault(conv_of(rel)[0], set()).add(rel)
    return {conv_id: sorted(rels) for conv_id, rels in groups.items()}


def unnamed(rel: str, on_error: Callable[[str], None]) -> bool:
    """Whether ``rel`` (as ``os.fsdecode`` gave it) is not valid UTF-8; then reported."""
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        shown = rel.encode("utf-8", "backslashreplace").decode("ascii", "replace")
        message = (
            f"{shown} is not valid UTF-8: it is left out of the record (git paths are"
            " text here). Rename it"
        )
        log.warning("%s", message)
        on_error(message)
        return True
    return False


def commit_all(
    ws: Workspace,
    groups: list[tuple[str, list[str]]],
    on_error: Callable[[str], None],
    *,
    workers: int,
) -> set[str]:
    """Commit each conversation's edits (as the user), concurrently so that the
    committer's group commit lands a burst of saves in a few commits; returns the ids
    committed."""
    done: set[str] = set()

    def one(group: tuple[str, list[str]]) -> None:
        conv_id, rels = group
        if not conv_id:
            report_misnamed(rels, on_error)
        try:
            if commit_edits(ws, conv_id, rels):
                log.info("%s: committed the user's edit of %s", conv_id or "(root)",
                         ", ".join(rels))  # fmt: skip
            done.add(conv_id)
        except JpfsError as exc:
            log.error("%s: cannot commit the user's edit: %s", conv_id or "(root)", exc)
            on_error(f"{conv_id}: {exc}")

    if len(groups) <= 1:
        for group in groups:
            one(group)
    else:
        with ThreadPoolExecutor(min(len(groups), workers), "jpfs-commit") as fan:
            list(fan.map(one, groups))
    return done


def report_misnamed(rels: list[str], on_error: Callable[[str], None]) -> None:
    """Files under a directory whose name is no conversation id are still committed
    (nothing is lost), but never silently: the user is told what to rename."""
    for top in sorted({rel.split("/", 1)[0] for rel in rels if "/" in rel}):
        if not top.isprintable() or unnamed(top, lambda _: None):
            continue  # not UTF-8: said by unnamed(), and not to be printed as it is
        try:
            ids.validate(top)
        except IdError as exc:
            message = (
                f"{top}/ is not a conversation: {exc}; its files are kept as plain"
                " files of the record. Rename the directory to make it a conversation"
            )
            log.warning("%s", message)
            on_error(message)


def pending(ws: Workspace) -> list[str] | None:
    """Workspace-relative paths under the root that differ from the record's tip.

    git answers from the record index's stat data without reading unchanged files,
    which on a large tree is much cheaper than hashing every file; None if git cannot
    tell (no tip yet), and the caller then hashes everything.
    """
    where = ws.conv_root
    try:
        changed = git.run(
            where, ["--no-optional-locks", "diff", "HEAD", "--name-only", "--no-renames",
                    "-z", "--", "."],
        ).stdout  # fmt: skip
        untracked = git.run(
            where, ["--no-optional-locks", "ls-files", "--others", "--exclude-standard",
                    "-z", "--", "."],
        ).stdout  # fmt: skip
    except GitError:
        return None
    found = {p for p in (changed + untracked).split("\0") if p}
    return sorted(f"{ws.conv_root_rel}/{p}" for p in found)


def commit_found(
    ws: Workspace,
    subject: str,
    note_later: Callable[[str], None],
    on_error: Callable[[str], None],
    before_ns: int | None = None,
) -> None:
    """Commit whatever differs from HEAD under the root (a crash, lost file events).

    ``before_ns``: only files last changed before then (a file-system timestamp);
    later ones were written once the daemon was ready, and are the edits they are,
    not a recovery: each is passed to ``note_later`` (the watch, set up after that
    time, may have missed it), to be committed like its own event would.
    """
    trailers = (("Jpfs-Event", "recover"),)
    paths = pending(ws)
    if paths is not None:
        paths = [p for p in paths if not unnamed(p, on_error)]
    if paths is not None and before_ns is not None:
        later = {p for p in paths if not _changed_before(ws.root / p, before_ns)}
        for path in sorted(later):
            note_later(ws.record_path(path))
        paths = [p for p in paths if p not in later]
    if paths is None:
        sha = ws.committer.commit_pending(subject=subject, trailers=trailers)
    elif paths:
        # What recovery commits is reported like any edit: a misnamed directory
        # written while no daemon watched must not slip in silently.
        report_misnamed([ws.record_path(p) for p in paths], on_error)
        sha = ws.commit(Change(tuple(paths), subject, trailers))
    else:
        sha = None
    if sha:
        log.info("committed uncommitted files found under the conversation root (%s)", sha[:12])


def _changed_before(path: Path, when_ns: int) -> bool:
    try:
        return os.lstat(path).st_mtime_ns < when_ns
    except FileNotFoundError:
        return True  # deleted while no daemon watched: the deletion is recovered
