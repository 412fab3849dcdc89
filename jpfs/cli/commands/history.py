"""``jpfs log`` and ``jpfs gc``."""

from __future__ import annotations

from typing import Annotated

import typer

from jpfs.cli.commands.conversation import RootId, scoped
from jpfs.cli.context import note, out, out_json, state


def log(
    conv_id: Annotated[str | None, typer.Argument(metavar="[ID]")] = None,
    limit: Annotated[int | None, typer.Option("-n", "--limit")] = None,
    fmt: Annotated[str, typer.Option("--format", help="text or json")] = "text",
    root_id: RootId = None,
) -> None:
    """The history of a conversation subtree (the whole tree without ID), from git."""
    from jpfs import history

    ws = state.ws()
    target = scoped(ws, conv_id, root_id) if conv_id or root_id else None
    entries = history.log(ws.root, ws.record_branch, target, limit=limit)
    if fmt == "json":
        out_json([e.to_json() for e in entries])
        return
    for e in entries:
        out(e.line())


def gc() -> None:
    """Remove expired temporary conversations (never the active one) and the worktrees
    of killed, discarded or merged branch conversations."""
    from jpfs import lifecycle, worktrees

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


def register(app: typer.Typer) -> None:
    app.command("log")(log)
    app.command("gc")(gc)
