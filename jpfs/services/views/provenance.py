"""Provenance: from a line of a project file to the conversation, turn and tool call
that wrote it (``jpfs blame``, tool ``jp_blame``; protocol/provenance.md).

Three reads of git, whatever the size of the record:

1. ``git blame --porcelain``: each line's commit. git follows fast-forwards, merge
   commits, cherry-picks and rebases to the commit that wrote the line, and each of
   those keeps the writer's message, so its trailers.
2. one ``git log --no-walk --stdin`` for the distinct commits: their ``Jpfs-*`` lines
   (:mod:`jpfs.core.record` names them; ``Jpfs-Event-Path`` says which events).
3. just the record files those name, read in process (pygit2 tree lookups) from the
   record branch; a path it lacks is looked for in the commit ``Jpfs-Record`` names,
   then in a remote's copy of the record (a clone that fetched it).

The ``Jpfs-*`` lines are read from the whole message, not only its trailer block: a
squash merge's message quotes the squashed commits' messages indented, trailers and all.
"""

from __future__ import annotations

import importlib
import json
import re
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jpfs.core import frontmatter, ids, record
from jpfs.errors import ArgumentError, FormatError, GitError, IdError, ScopeError
from jpfs.infra import git

OUTSIDE = "(outside your scope)"
UNCOMMITTED = "0" * 40
_JPFS_LINE = re.compile(r"^[ \t]*(Jpfs-[A-Za-z-]+):[ \t]*(\S.*?)[ \t]*$", re.MULTILINE)
_EVENT_PATH = re.compile(r"^[a-z0-9][a-z0-9._/-]*/events/[0-9]+-[a-z]+\.md$")
_HEADER = re.compile(r"^([0-9a-f]{40}) [0-9]+ ([0-9]+)(?: [0-9]+)?$")


@dataclass(frozen=True)
class Link:
    """What one commit's message says about who wrote it."""

    commit: str
    conversations: tuple[str, ...] = ()
    agent: str | None = None
    model: str | None = None
    events: tuple[str, ...] = ()
    turn: str | None = None
    record: str | None = None
    merged: tuple[str, ...] = ()

    @property
    def conversation(self) -> str | None:
        """The writer; None for a human's commit or a squash of several conversations."""
        return self.conversations[0] if len(self.conversations) == 1 else None


@dataclass(slots=True)
class Line:
    """One blamed line; :func:`blame` fills in its writer in place (a copy per line of
    a 2,000-line file cost a tenth of ``git blame``'s time)."""

    line: int
    commit: str
    author: str
    time: int
    tz: str
    path: str  # the file's path in ``commit`` (git blame follows renames)
    text: str
    conversation: str | None = None
    agent: str | None = None
    model: str | None = None
    task: str | None = None
    event: str | None = None
    turn: str | None = None
    conversations: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        return {
            "line": self.line,
            "commit": self.commit,
            "conversation": self.conversation,
            "agent": self.agent,
            "model": self.model,
            "task": self.task,
            "event": self.event,
            "turn": self.turn,
            "conversations": list(self.conversations),
            "author": self.author,
            "time": self.time,
            "text": self.text,
        }


# -- git blame ------------------------------------------------------------------------


def blame_rows(
    cwd: Path, path: str, *, start: int | None, end: int | None, rev: str | None
) -> list[Line]:
    """``git blame --porcelain`` of ``path`` (in ``rev``, else the work tree), bare.

    The record's reader (:mod:`jpfs.infra.git.refs`: pygit2, ~40 ms to import, most of
    ``jpfs blame``'s start-up beyond the CLI's own) is imported while git blame works,
    which it does before it prints anything: the import then costs a command-line run
    nothing on a machine with a second core."""
    args = ["blame", "--porcelain"]
    if start is not None:
        args += ["-L", f"{start},{end if end is not None else ''}"]
    if rev:
        args.append(commit_of(cwd, rev))  # an id, never a word git could take for an option
    args += ["--", path]
    proc = git.start(cwd, args)
    try:
        importlib.import_module("jpfs.infra.git.refs")  # loaded now, used by read_record
        out, err = proc.communicate()
    finally:
        git.stop([proc])
    if proc.returncode != 0:
        raise GitError(f"git blame {path}: {git.complaint(err) or 'failed'}")
    commits: dict[str, dict[str, str]] = {}
    rows: list[Line] = []
    sha, number = "", 0
    headers: dict[str, str] = {}
    for raw in out.decode("utf-8", "surrogateescape").split("\n"):
        if raw.startswith("\t"):
            info = commits.setdefault(sha, headers)
            rows.append(
                Line(
                    line=number,
                    commit=sha,
                    author=info.get("author", ""),
                    time=int(info.get("author-time", "0") or 0),
                    tz=info.get("author-tz", "+0000"),
                    path=info.get("filename", path),
                    text=raw[1:],
                )
            )
            continue
        match = _HEADER.match(raw)
        if match:
            sha, number = match.group(1), int(match.group(2))
            headers = commits.get(sha, {})
            continue
        key, _, value = raw.partition(" ")
        if sha and key:
            headers[key] = value
            commits[sha] = headers
    return rows


# -- commit messages ------------------------------------------------------------------


def read_links(root: Path, shas: Iterable[str]) -> dict[str, Link]:
    """The :class:`Link` of each commit, with one ``git log`` for all of them."""
    wanted = [s for s in dict.fromkeys(shas) if s and s != UNCOMMITTED]
    if not wanted:
        return {}
    proc = git.run(
        root,
        ["log", "--no-walk=unsorted", "--stdin", "--format=%H%x00%B%x1e"],
        input="".join(f"{s}\n" for s in wanted),
    )
    out: dict[str, Link] = {}
    for chunk in proc.stdout.split("\x1e"):
        sha, sep, message = chunk.strip("\n").partition("\0")
        if sep:
            out[sha] = parse_link(sha, message)
    return out


def parse_link(sha: str, message: str) -> Link:
    found: dict[str, list[str]] = {}
    for key, value in _JPFS_LINE.findall(message):
        found.setdefault(key, [])
        if value not in found[key]:
            found[key].append(value)
    convs = tuple(c for c in found.get("Jpfs-Conversation", ()) if _valid_id(c))

    def own(path: str) -> bool:
        # Only the writer's own events: a message naming another conversation's record
        # must not make blame read (and show) it.
        return bool(_EVENT_PATH.match(path)) and any(
            path.startswith(f"{c}/events/") and ".." not in path.split("/") for c in convs
        )

    return Link(
        commit=sha,
        conversations=convs,
        agent=_only(found.get("Jpfs-Agent", ())),
        model=_only(found.get("Jpfs-Model", ())),
        events=tuple(p for p in found.get(record.EVENT_PATH, ()) if own(p)),
        turn=_only([p for p in found.get(record.TURN, ()) if own(p)]),
        record=_only([r for r in found.get(record.RECORD, ()) if re.fullmatch("[0-9a-f]{40}", r)]),
        merged=tuple(c for c in found.get(record.MERGED, ()) if _valid_id(c)),
    )


def _only(values: Sequence[str]) -> str | None:
    """The value when the message names one (a squash of several names none)."""
    return values[0] if len(values) == 1 else None


def _valid_id(value: str) -> bool:
    try:
        ids.validate(value)
    except IdError:
        return False
    return True


def in_scope(conv_id: str, within: str | None) -> bool:
    """Whether a caller scoped to ``within`` may see ``conv_id`` (itself or below)."""
    return not within or conv_id == within or ids.is_descendant(conv_id, within)


# -- the record -----------------------------------------------------------------------


def read_record(
    root: Path, branch: str, paths: Iterable[str], pinned: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The texts of record ``paths`` found: on the record branch, else in the commit
    ``pinned`` names for the path (its ``Jpfs-Record``), else in a remote's copy.

    In process (pygit2, :func:`jpfs.infra.git.refs.read_files`): a path each is a tree
    lookup, where ``git cat-file --batch`` spent 30 ms on 400 paths of a 1,000-conversation
    record, as long as the ``git blame`` it serves."""
    from jpfs.infra.git import refs

    wanted = list(dict.fromkeys(paths))
    found = refs.read_files(root, f"refs/heads/{branch}", wanted)
    missing = [p for p in wanted if p not in found]
    if missing:
        copies = git.run(
            root,
            ["for-each-ref", "--format=%(refname)", f"refs/remotes/*/{branch}", "refs/jpfs/sync/"],
        ).stdout.split()
        copies = [r for r in copies if r.startswith("refs/remotes/") or r.endswith("/record")]
        for at in dict.fromkeys((pinned or {}).get(p, "") for p in missing):
            if at:
                todo = [p for p in missing if (pinned or {}).get(p) == at and p not in found]
                found.update(refs.read_files(root, at, todo))
        for ref in copies:
            found.update(refs.read_files(root, ref, [p for p in missing if p not in found]))
    return {p: b.decode("utf-8", "replace") for p, b in found.items()}


def title_of(conv_id: str, texts: Mapping[str, str]) -> str | None:
    """The conversation's title, else the first line of its task."""
    toml = texts.get(f"{conv_id}/conversation.toml")
    if toml:
        try:
            # The keys before the first table: the [config] snapshot is most of the file.
            title = tomllib.loads(toml.split("\n[", 1)[0]).get("title")
        except tomllib.TOMLDecodeError:
            title = None
        if isinstance(title, str) and title.strip():
            return title.strip()
    for raw in (texts.get(f"{conv_id}/task.md") or "").splitlines():
        if raw.strip():
            return raw.strip().lstrip("#").strip()
    return None


def event_meta(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        return frontmatter.parse(text)[0]
    except FormatError:
        return {}


def pick_event(link: Link, path: str, texts: Mapping[str, str]) -> str | None:
    """Which of the commit's tool events wrote ``path``: the only one, else the one whose
    call (in the turn) names the path, else the first."""
    if len(link.events) <= 1 or link.turn is None:
        return link.events[0] if len(link.events) == 1 else None
    calls = event_meta(texts.get(link.turn)).get("tool_calls") or []
    by_id = {}
    for call in calls:
        if isinstance(call, dict):
            raw = call.get("input")
            try:
                args = raw if isinstance(raw, dict) else json.loads(str(raw))
            except ValueError:
                args = {}
            by_id[call.get("id")] = args if isinstance(args, dict) else {}
    for ev in link.events:
        args = by_id.get(event_meta(texts.get(ev)).get("tool_call_id"), {})
        if str(args.get("path", "")).strip("./") == path:
            return ev
    return link.events[0]


# -- blame ------------------------------------------------------------------------------


def blame(
    root: Path,
    branch: str,
    cwd: Path,
    path: str,
    *,
    start: int | None = None,
    end: int | None = None,
    rev: str | None = None,
    within: str | None = None,
) -> list[Line]:
    """Each line of ``path`` with the conversation, turn and tool event that wrote it.

    ``root``: the repository holding the record branch ``branch``; ``cwd``: the work tree
    blamed. ``within``: the caller's conversation (None: unscoped, a person at the CLI):
    a line written outside its subtree shows :data:`OUTSIDE` and nothing of its writer,
    and only commits the work tree's HEAD contains may be named as ``rev``.
    """
    if within is not None and rev:
        rev = _contained_rev(cwd, rev)
    rows = blame_rows(cwd, path, start=start, end=end, rev=rev)
    links = read_links(root, (r.commit for r in rows))
    visible = {
        s: lk
        for s, lk in links.items()
        if lk.conversation is None or in_scope(lk.conversation, within)
    }
    wanted: list[str] = []
    pinned: dict[str, str] = {}
    for lk in visible.values():
        for conv in lk.conversations:
            if in_scope(conv, within):
                wanted += [f"{conv}/conversation.toml", f"{conv}/task.md"]
        if len(lk.events) > 1 and lk.turn is not None:
            wanted += [lk.turn, *lk.events]
            if lk.record:
                pinned.update(dict.fromkeys([lk.turn, *lk.events], lk.record))
    texts = read_record(root, branch, wanted, pinned)
    titles = {c: title_of(c, texts) for lk in visible.values() for c in lk.conversations}
    picked: dict[tuple[str, str], str | None] = {}
    for row in rows:
        link = links.get(row.commit)
        if link is None or not link.conversations:
            continue
        if row.commit not in visible:
            row.conversation = OUTSIDE
            continue
        writer = link.conversation
        row.conversations = tuple(c if in_scope(c, within) else OUTSIDE for c in link.conversations)
        if writer is None:
            continue
        key = (row.commit, row.path)
        if key not in picked:
            picked[key] = pick_event(link, row.path, texts)
        row.conversation, row.agent, row.model = writer, link.agent, link.model
        row.task, row.event, row.turn = titles.get(writer), picked[key], link.turn
    return rows


def commit_of(cwd: Path, rev: str) -> str:
    """The commit ``rev`` names, as its id; a rev that starts with ``-`` is refused, so
    that no caller can hand git an option (``--output=FILE`` writes a file)."""
    if rev.startswith("-"):
        raise ArgumentError(f"rev {rev!r} may not start with '-'")
    proc = git.run(cwd, ["rev-parse", "--verify", "-q", f"{rev}^{{commit}}"], ok=(0, 1, 128))
    sha = proc.stdout.strip()
    if proc.returncode != 0 or not sha:
        raise GitError(f"no commit {rev!r}")
    return sha


def _contained_rev(cwd: Path, rev: str) -> str:
    """A scoped caller may blame only history its work tree holds: not the record's
    branch, nor another agent's unmerged branch."""
    from jpfs.infra.git import refs

    sha = commit_of(cwd, rev)
    head = git.run(cwd, ["rev-parse", "--verify", "-q", "HEAD"], ok=(0, 1, 128)).stdout.strip()
    if not head or not refs.is_ancestor(cwd, sha, head):
        raise ScopeError(f"rev {rev!r} is not in the history of your working tree")
    return sha
