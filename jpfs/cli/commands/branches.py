"""``jpfs merge``, ``jpfs discard``, ``jpfs diff``: the edits of branch conversations."""

from __future__ import annotations

from typing import Annotated

import typer

from jpfs.cli.completion import complete_ids
from jpfs.cli.context import note, out, state
from jpfs.cli.options import RootId, scoped

Id = Annotated[
    str,
    typer.Argument(
        autocompletion=complete_ids, metavar="ID", help="A conversation with a branch workspace."
    ),
]


def merge(conv_id: Id, root_id: RootId = None) -> None:
    """Merge ID's branch into its caller's workspace (the checked-out branch at the top).

    Prints the merge commit. A conflict, or a merge that would overwrite uncommitted
    changes, changes nothing and names the files.
    """
    from jpfs.services.forks import merge as merging

    ws = state.ws()
    result = merging.merge(ws, scoped(ws, conv_id, root_id))
    out(result.commit)
    note(result.summary())


def discard(conv_id: Id, root_id: RootId = None) -> None:
    """Remove ID's worktree and branch (and its branch sub-conversations'); keeps the record."""
    from jpfs.services.forks import worktrees

    ws = state.ws()
    for done in worktrees.discard(ws, scoped(ws, conv_id, root_id)):
        out(done)


def diff(
    conv_id: Id,
    stat: Annotated[bool, typer.Option("--stat", help="Per-file summary only.")] = False,
    root_id: RootId = None,
) -> None:
    """Show ID's committed changes: what merging its branch would bring."""
    from jpfs.services.forks import diffs

    ws = state.ws()
    out(diffs.diff(ws, scoped(ws, conv_id, root_id), stat=stat))
