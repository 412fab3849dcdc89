"""``jpfs cost``: what a subtree's model calls spent, by conversation or by model."""

from __future__ import annotations

from typing import Annotated

import typer

from jpfs.cli.completion import complete_ids
from jpfs.cli.context import note, out_json, out_table, state
from jpfs.cli.options import Format, FullIds, RootId, shortener, subtree


def cost(
    conv_id: Annotated[
        str | None,
        typer.Argument(
            autocompletion=complete_ids, metavar="[ID]", help="Only ID and its descendants."
        ),
    ] = None,
    by: Annotated[
        str, typer.Option("--by", help="Sum per 'conversation' or per 'model'.")
    ] = "conversation",
    since: Annotated[
        str | None,
        typer.Option("--since", help="Calls from this time: ISO date/time or a duration ago (2h)."),
    ] = None,
    until: Annotated[
        str | None,
        typer.Option("--until", help="Calls before this time (same forms as --since)."),
    ] = None,
    fmt: Format = "text",
    root_id: RootId = None,
    full_ids: FullIds = False,
) -> None:
    """Tokens and dollars spent by model calls (the whole record without ID): the four
    usage counts and cost_usd per conversation or per model, and their total."""
    from jpfs.core.tree import left_out_note
    from jpfs.core.usage import dollars
    from jpfs.services.views import costs

    ws = state.ws()
    result = costs.report(ws, subtree(ws, conv_id, root_id), by=by, since=since, until=until)
    if fmt == "json":
        out_json(result.to_json())
        return
    short = shortener(ws, root_id, full_ids) if by == "conversation" else str
    rows = [(short(key), spend) for key, spend in result.rows]
    out_table(
        (by, "calls", "input", "output", "cache-read", "cache-write", "cost"),
        [
            (
                key,
                str(s.calls),
                str(s.input_tokens),
                str(s.output_tokens),
                str(s.cache_read_input_tokens),
                str(s.cache_creation_input_tokens),
                dollars(s.cost),
            )
            for key, s in [*rows, ("total", result.total)]
        ],
    )
    if result.total.unpriced_models:
        note(result.total.to_json()["cost_note"])
    if result.skipped:
        note(f"{len(result.skipped)} call(s) without a time left out of the range")
    for rel in result.left_out:
        note(f"jpfs: note: {left_out_note(rel)}")
