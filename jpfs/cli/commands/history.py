"""``jpfs log`` and ``jpfs gc``."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Annotated

import typer

from jpfs.cli.completion import complete_ids
from jpfs.cli.context import note, out, out_json, out_table, state
from jpfs.cli.options import Format, FullIds, RootId, scoped, shortener

if TYPE_CHECKING:
    from jpfs.services.views.history import Entry

AGENT_AUTHOR = " (jpfs agent)"  # jpfs.core.record.agent_identity


def log(
    conv_id: Annotated[
        str | None, typer.Argument(autocompletion=complete_ids, metavar="[ID]")
    ] = None,
    limit: Annotated[
        int | None, typer.Option("-n", "--limit", help="Only the last N events.")
    ] = None,
    fmt: Format = "text",
    root_id: RootId = None,
    full_ids: FullIds = False,
) -> None:
    """The history of a conversation subtree (the whole tree without ID), from git:
    one line per event, newest first (time, conversation, event, agent, author, note)."""
    from jpfs.services.views import history

    ws = state.ws()
    target = scoped(ws, conv_id, root_id) if conv_id or root_id is not None else None
    entries = history.log(ws.root, ws.record_branch, target, limit=limit)
    if fmt == "json":
        out_json([e.to_json() for e in entries])
        return
    short = shortener(ws, root_id, full_ids)
    out_table(
        ("time", "conversation", "event", "agent", "author", "note"),
        [
            (
                _time(e.date),
                short(e.conversation) if e.conversation else "-",
                e.event,
                e.agent or "-",
                _author(e),
                _note(e),
            )
            for e in entries
        ],
    )


def _time(iso: str) -> str:
    """The commit's time in the local time zone, to the second."""
    try:
        return dt.datetime.fromisoformat(iso).astimezone().strftime("%Y-%m-%d %H:%M:%S")
    except ValueError:
        return iso


def _author(e: Entry) -> str:
    return e.author.removesuffix(AGENT_AUTHOR)


def _note(e: Entry) -> str:
    """The subject's detail, then the model and the tokens of a model turn."""
    from jpfs.core.usage import dollars

    parts = [e.note, e.trailers.get("Jpfs-Model", "")]
    usage = e.usage
    if usage:
        tokens = f"{usage['input_tokens']}+{usage['output_tokens']} tokens"
        cached = usage["cache_read_input_tokens"], usage["cache_creation_input_tokens"]
        if any(cached):
            tokens += f" (cache read {cached[0]}, write {cached[1]})"
        parts.append(f"{tokens} {dollars(usage['cost_usd'])}")
    machine = e.trailers.get("Jpfs-Machine", "")
    if machine:
        parts.append(f"on {machine}")  # several machines share the record (sync.md)
    return " ".join(p for p in parts if p)


def gc() -> None:
    """Remove expired temporary conversations (never the active one) and the worktrees
    of killed, discarded or merged branch conversations."""
    from jpfs.services.conversations import lifecycle
    from jpfs.services.forks import worktrees

    removed, kept = lifecycle.gc(state.ws())
    for conv_id in removed:
        out(f"removed {conv_id}")
    for conv_id in kept:
        note(f"kept {conv_id} (expired but active)")
    report = worktrees.gc(state.ws())
    for what, why in report.removed:
        out(f"removed worktree {what} ({why})")
    for what, why in report.kept:
        note(f"kept worktree {what} ({why})")
