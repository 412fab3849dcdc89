"""The conversation tree: walking it, and what ``ls`` / ``tree`` show of each node.

Listing reads only names, ``conversation.toml`` and at most one event file per
conversation, never git: ``jpfs conversation ls`` must stay about as fast as Python
starting up.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterator
from dataclasses import asdict, astuple, dataclass, fields, replace
from pathlib import Path
from typing import Any

from jpfs.core import failures, frontmatter, ids
from jpfs.core.conversation import ANSWERS, QUESTIONS, RESULT, Conversation
from jpfs.core.scope import CONVERSATION_TOML, TASK
from jpfs.core.state import Snapshot, State, derive
from jpfs.core.summaries import Summaries, holds_conversation
from jpfs.errors import FormatError

SKIP = ids.RESERVED


def walk(
    conv_root: Path, under: str | None = None, *, left_out: list[str] | None = None
) -> Iterator[str]:
    """Ids of every conversation below ``under`` (exclusive), depth first, sorted.

    Symlinked directories are never followed: they could lead out of the tree. Nor is
    a directory deeper than an id may be (:data:`ids.MAX_DEPTH`): one holding a
    conversation is added to ``left_out`` (:func:`left_out_note` says it), so one odd
    directory never stops a listing of the others.
    """
    start = conv_root.joinpath(*under.split("/")) if under else conv_root
    prefix = f"{under}/" if under else ""
    stack: list[tuple[str, str]] = [(str(start), prefix)]
    marks = (CONVERSATION_TOML, TASK)
    segment = ids.SEGMENT_RE.fullmatch
    while stack:
        path, pre = stack.pop()
        if pre.count("/") > ids.MAX_DEPTH:
            if left_out is not None and holds_conversation(path):
                left_out.append(pre.rstrip("/"))
            continue
        children: list[tuple[str, str]] = []
        is_conv = False
        try:
            with os.scandir(path) as it:
                for entry in it:
                    name = entry.name
                    if name in marks:
                        is_conv = True
                    elif (
                        name not in SKIP
                        and entry.is_dir(follow_symlinks=False)
                        and segment(name)
                        and ".." not in name
                    ):
                        children.append((entry.path, f"{pre}{name}/"))
        except (FileNotFoundError, NotADirectoryError):
            continue
        children.sort(key=lambda child: child[1], reverse=True)
        stack.extend(children)
        # Yield after pushing so the order is parent first, then children.
        if pre != prefix and is_conv:
            yield pre.rstrip("/")


def left_out_note(rel: str) -> str:
    """What a listing says of a directory :func:`walk` left out."""
    return (
        f"{rel}: left out: deeper than {ids.MAX_DEPTH} levels, so no conversation id"
        " (move it up to make it a conversation)"
    )


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
        result_event = rmeta.get("event", 0)
        if type(result_event) is not int:
            kind = type(result_event).__name__
            raise FormatError(f"{result_path}: event must be an event's number, not a {kind}")
    cfg = meta.get("config", {})
    table = cfg.get("onboarding", {}) if isinstance(cfg, dict) else {}
    if not isinstance(table, dict):
        raise FormatError(f"{conv.toml_path}: [config] onboarding must be a table")
    onboarding = bool(table.get("enabled", False))
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


# Not frozen: a frozen dataclass sets each field through object.__setattr__, 13 ms of
# building 10,000 rows from the cache.
@dataclass(slots=True)
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
    conv_root: Path,
    under: str | None = None,
    *,
    include_hidden: bool = False,
    cache_dir: Path | None = None,
    left_out: list[str] | None = None,
    levels: dict[str, list[str]] | None = None,
) -> list[Info]:
    """Every conversation below ``under``; with ``cache_dir`` (``.jpfs/local``), each
    read again only if its files changed since the last listing (:mod:`summaries`).
    ``left_out`` gets the directories too deep to be listed (:func:`left_out_note`);
    ``levels`` the child names of each directory walked (:attr:`Summaries.levels`,
    for :class:`jpfs.core.shortids.Shortener`)."""
    cache = Summaries(cache_dir)
    out = []
    hidden_prefixes: list[str] = []
    # Failed, though their files could not say so (jpfs.core.failures): not cached.
    kept = failures.every(cache_dir, conv_root) if cache_dir is not None else {}
    for conv_id, sig, known in cache.walk(conv_root, under):
        if hidden_prefixes and any(ids.is_descendant(conv_id, h) for h in hidden_prefixes):
            continue
        if isinstance(known, tuple) and len(known) == _FIELDS:
            item = Info(conv_id, *known)
        else:
            item = info(Conversation(conv_root, conv_id))
            cache.put(conv_id, sig, astuple(item)[1:])
        if item.hidden and not include_hidden:
            hidden_prefixes.append(conv_id)
            continue
        out.append(replace(item, status="failed") if conv_id in kept else item)
    cache.save()
    if left_out is not None:
        left_out += cache.left_out
    if levels is not None:
        levels.update(cache.levels)
    return out


_FIELDS = len(fields(Info)) - 1  # what the cache keeps: all but the id, its key
