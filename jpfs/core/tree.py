"""The conversation tree: walking it, and what ``ls`` / ``tree`` show of each node.

Listing reads only names, ``conversation.toml`` and at most one event file per
conversation, never git: ``jpfs conversation ls`` must stay about as fast as Python
starting up.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from jpfs.core import frontmatter, ids
from jpfs.core.conversation import ANSWERS, QUESTIONS, RESULT, Conversation
from jpfs.core.scope import CONVERSATION_TOML, TASK
from jpfs.core.state import Snapshot, State, derive
from jpfs.errors import FormatError

SKIP = frozenset({"events", "inbox", "files"})


def walk(conv_root: Path, under: str | None = None) -> Iterator[str]:
    """Ids of every conversation below ``under`` (exclusive), depth first, sorted.

    Symlinked directories are never followed: they could lead out of the tree.
    """
    start = conv_root.joinpath(*under.split("/")) if under else conv_root
    prefix = f"{under}/" if under else ""
    stack: list[tuple[Path, str]] = [(start, prefix)]
    while stack:
        path, pre = stack.pop()
        try:
            entries = sorted(os.scandir(path), key=lambda e: e.name, reverse=True)
        except (FileNotFoundError, NotADirectoryError):
            continue
        for entry in entries:
            name = entry.name
            if name in SKIP or not entry.is_dir(follow_symlinks=False):
                continue
            if not ids.SEGMENT_RE.fullmatch(name) or ".." in name:
                continue
            stack.append((Path(entry.path), f"{pre}{name}/"))
        # Yield after pushing so the order is parent first, then children.
        if pre != prefix and (
            os.path.lexists(os.path.join(path, CONVERSATION_TOML))
            or os.path.lexists(os.path.join(path, TASK))
        ):
            yield pre.rstrip("/")


def snapshot(conv: Conversation, meta: dict[str, Any] | None = None) -> Snapshot:
    meta = conv.meta() if meta is None else meta
    names = conv.event_names()
    last_role = names[-1][1] if names else None
    last_seq = names[-1][0] if names else 0
    has_calls = False
    if last_role == "assistant":
        ev_meta, _ = frontmatter.read(conv.events_dir / names[-1][2], conv.root)
        has_calls = bool(ev_meta.get("tool_calls"))
    result_event = 0
    result_path = conv.path / RESULT
    if result_path.is_file():
        rmeta, _ = frontmatter.read(result_path, conv.root)
        result_event = int(rmeta.get("event", 0))
    cfg = meta.get("config", {})
    onboarding = (
        bool(cfg.get("onboarding", {}).get("enabled", False)) if isinstance(cfg, dict) else False
    )
    return Snapshot(
        has_task=os.path.lexists(conv.path / TASK),
        onboarding=onboarding,
        status=str(meta.get("status", "active")),
        questions=conv.read(QUESTIONS),
        answers=conv.read(ANSWERS),
        last_role=last_role,
        last_seq=last_seq,
        last_has_tool_calls=has_calls,
        result_event=result_event,
        template=meta.get("mode") == "template",
    )


def state_of(conv: Conversation) -> State:
    return derive(snapshot(conv))


@dataclass(frozen=True)
class Info:
    id: str
    parent: str | None
    title: str
    agent: str
    status: str
    events_count: int
    created: str
    updated: str
    hidden: bool

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _iso(value: Any) -> str:
    if isinstance(value, dt.datetime):
        return value.isoformat().replace("+00:00", "Z")
    return str(value) if value else ""


def info(conv: Conversation) -> Info:
    try:
        meta = conv.summary()
        status = str(derive(snapshot(conv, meta)))
    except FormatError:
        meta, status = {}, "broken"
    names = conv.event_names()
    mtimes = [conv.toml_path, *(conv.events_dir / n for _, _, n in names[-1:])]
    updated = max((p.stat().st_mtime for p in mtimes if p.exists()), default=0.0)
    return Info(
        id=conv.id,
        parent=ids.parent(conv.id),
        title=str(meta.get("title", "")),
        agent=str(meta.get("agent", "")),
        status=status,
        events_count=len(names),
        created=_iso(meta.get("created")),
        updated=_iso(dt.datetime.fromtimestamp(updated, dt.UTC).replace(microsecond=0))
        if updated
        else "",
        hidden=bool(meta.get("hidden", False)),
    )


def listing(
    conv_root: Path, under: str | None = None, *, include_hidden: bool = False
) -> list[Info]:
    out = []
    hidden_prefixes: list[str] = []
    for conv_id in walk(conv_root, under):
        if any(ids.is_descendant(conv_id, h) for h in hidden_prefixes):
            continue
        item = info(Conversation(conv_root, conv_id))
        if item.hidden and not include_hidden:
            hidden_prefixes.append(conv_id)
            continue
        out.append(item)
    return out
