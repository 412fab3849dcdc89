"""``jpfs log``: a subtree's history read back from commit trailers."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from jpfs import gitcli, ids

FIELD, RECORD = "\x1f", "\x1e"


@dataclass(frozen=True)
class Entry:
    commit: str
    date: str
    author: str
    conversation: str
    event: str
    trailers: dict[str, str] = field(default_factory=dict)

    def line(self) -> str:
        extra = " ".join(
            f"{k.removeprefix('Jpfs-').lower()}={v}"
            for k, v in self.trailers.items()
            if k in ("Jpfs-Agent", "Jpfs-Model", "Jpfs-Usage")
        )
        return (
            " ".join(
                p
                for p in (self.commit[:10], self.date, self.conversation or "-", self.event, extra)
                if p
            )
            + f" ({self.author})"
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


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


def log(
    ws_root: Path, branch: str, conv_id: str | None = None, *, limit: int | None = None
) -> list[Entry]:
    """The record's history (branch ``branch``), of ``conv_id``'s subtree or of all."""
    fmt = FIELD.join(["%H", "%aI", "%an", "%s", "%(trailers:only,unfold)"]) + RECORD
    args = ["log", f"--format={fmt}", "--no-color"]
    if limit:
        args.append(f"-n{limit}")
    # The record's tree root is the conversation root: an id is a path on the branch.
    pathspec = ["--", f":(literal){conv_id}"] if conv_id else []
    proc = gitcli.run(ws_root, [*args, f"refs/heads/{branch}", *pathspec], ok=(0, 128))
    if proc.returncode == 128:  # no commits yet
        return []
    out = []
    for record in proc.stdout.split(RECORD):
        record = record.strip("\n")
        if not record:
            continue
        sha, date, author, subject, trailers = (record.split(FIELD) + [""] * 5)[:5]
        groups = [
            g for g in parse_trailers(trailers) if "Jpfs-Conversation" in g or "Jpfs-Event" in g
        ]
        if not groups:
            out.append(Entry(sha, date, author, "", f"edit: {subject}"))
            continue
        for g in groups:
            cid = g.get("Jpfs-Conversation", "")
            if conv_id and cid and not ids.is_descendant(cid, conv_id, strict=False):
                continue
            out.append(Entry(sha, date, author, cid, g.get("Jpfs-Event", ""), g))
    return out
