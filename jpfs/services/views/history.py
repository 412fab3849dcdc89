"""``jpfs log``: a subtree's history read back from commit trailers, one entry per event.

A commit usually records one event; a group commit (``jpfs: N changes``, see
protocol/layout.md) records several, one trailer group each, and yields one entry per
group. Each entry's ``note`` is what its subject says after ``jpfs(<id>): <event>``
(a tool's name, an answers round, a message id, an error's first line); the subjects
of a group commit are the bullets of its body.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jpfs.core import ids
from jpfs.infra import git

FIELD, RECORD = "\x1f", "\x1e"
# Jpfs-Usage's short names (jpfs.core.record.usage_trailer) -> the usage keys.
_TRAILER_KEYS = (
    ("input", "input_tokens"),
    ("output", "output_tokens"),
    ("cache_read", "cache_read_input_tokens"),
    ("cache_creation", "cache_creation_input_tokens"),
)


@dataclass(frozen=True)
class Entry:
    commit: str
    date: str
    author: str
    conversation: str
    event: str
    trailers: dict[str, str] = field(default_factory=dict)
    note: str = ""

    @property
    def agent(self) -> str:
        return self.trailers.get("Jpfs-Agent", "")

    @property
    def usage(self) -> dict[str, Any] | None:
        """The model call's usage from the ``Jpfs-Usage`` trailer (None: no call), with
        the keys of :mod:`jpfs.core.usage`; ``cost_usd`` None when it had no price."""
        raw = self.trailers.get("Jpfs-Usage", "")
        if not raw:
            return None
        items = dict(item.partition("=")[::2] for item in raw.split() if "=" in item)
        out: dict[str, Any] = {}
        for short, key in _TRAILER_KEYS:
            value = items.get(short, "0")
            out[key] = int(value) if value.isdigit() else 0
        try:
            out["cost_usd"] = float(items["cost_usd"])
        except (KeyError, ValueError):
            out["cost_usd"] = None
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "commit": self.commit,
            "date": self.date,
            "author": self.author,
            "conversation": self.conversation,
            "event": self.event,
            "agent": self.agent,
            "model": self.trailers.get("Jpfs-Model", ""),
            "usage": self.usage,
            "note": self.note,
            "trailers": dict(self.trailers),
        }


def parse_trailers(block: str) -> list[dict[str, str]]:
    """Split a trailer block into one dict per ``Jpfs-Conversation`` (folded commits)."""
    groups: list[dict[str, str]] = []
    for line in block.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if key == "Jpfs-Conversation" or not groups:
            groups.append({})
        groups[-1][key] = value
    return groups


def _subjects(subject: str, body: str, folded: bool) -> list[str]:
    """The subject of each change in a commit: its own, or the bullets of a group commit."""
    if not folded:
        return [subject]
    return [line[2:].strip() for line in body.splitlines() if line.startswith("- ")]


def _note(subjects: list[str], conv_id: str, event: str) -> str:
    """What the subject of the change (conversation, event) says after its prefix; the
    subject is used up, so two changes alike (two tool calls) each get their own."""
    prefix = f"jpfs({conv_id}): {event}" if conv_id else "jpfs:"
    for i, subject in enumerate(subjects):
        if conv_id and subject != prefix and not subject.startswith(prefix + " "):
            continue
        if not conv_id and subject.startswith("jpfs("):
            continue
        del subjects[i]
        return subject.removeprefix(prefix).strip()
    return ""


def log(
    ws_root: Path, branch: str, conv_id: str | None = None, *, limit: int | None = None
) -> list[Entry]:
    """The record's history (branch ``branch``), of ``conv_id``'s subtree or of all:
    one entry per event, newest first; ``limit`` caps the number of entries."""
    fmt = FIELD.join(["%H", "%aI", "%an", "%s", "%b", "%(trailers:only,unfold)"]) + RECORD
    args = ["log", f"--format={fmt}", "--no-color"]
    if limit:
        args.append(f"-n{limit}")  # every commit holds one event at least
    # The record's tree root is the conversation root: an id is a path on the branch.
    pathspec = ["--", f":(literal){conv_id}"] if conv_id else []
    proc = git.run(ws_root, [*args, f"refs/heads/{branch}", *pathspec], ok=(0, 128))
    if proc.returncode == 128:  # no commits yet
        return []
    out = []
    for record in proc.stdout.split(RECORD):
        record = record.strip("\n")
        if not record:
            continue
        sha, date, author, subject, body, trailers = (record.split(FIELD) + [""] * 6)[:6]
        groups = [
            g for g in parse_trailers(trailers) if "Jpfs-Conversation" in g or "Jpfs-Event" in g
        ]
        if not groups:
            out.append(Entry(sha, date, author, "", "edit", note=subject))
            continue
        subjects = _subjects(subject, body, len(groups) > 1)
        for g in groups:
            cid, event = g.get("Jpfs-Conversation", ""), g.get("Jpfs-Event", "")
            note = _note(subjects, cid, event)
            if conv_id and cid and not ids.is_descendant(cid, conv_id, strict=False):
                continue
            out.append(Entry(sha, date, author, cid, event, g, note))
    return out[:limit] if limit else out
