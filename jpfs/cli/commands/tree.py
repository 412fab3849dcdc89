"""``jpfs tree`` (once, or ``--watch``) and ``jpfs top`` (the live view)."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated

import typer

from jpfs.cli import keys
from jpfs.cli.completion import complete_ids
from jpfs.cli.context import note, out, out_json, state, table
from jpfs.cli.options import Format, FullIds, RootId, shortener, subtree

if TYPE_CHECKING:
    from jpfs.services.views.status_view import Row

Interval = Annotated[float, typer.Option("--interval", "-i", help="Seconds between refreshes.")]
Count = Annotated[
    int, typer.Option("--count", "-n", help="Stop after N refreshes (0: until Ctrl-C).")
]
All = Annotated[bool, typer.Option("--all", "-a", help="Include hidden conversations.")]


def tree(
    conv_id: Annotated[
        str | None,
        typer.Argument(autocompletion=complete_ids, metavar="[ID]", help="Show only below ID."),
    ] = None,
    fmt: Format = "text",
    watch: Annotated[bool, typer.Option("--watch", help="Refresh until Ctrl-C.")] = False,
    interval: Interval = 1.0,
    count: Count = 0,
    include_hidden: All = False,
    root_id: RootId = None,
    full_ids: FullIds = False,
) -> None:
    """The conversation tree: state, agent, model, time, tokens, cost (its own, and its
    subtree's on rows with sub-conversations), mail waiting and last line of each."""
    show(conv_id, root_id, fmt, watch or count > 1, interval, count, include_hidden, full_ids)


def top(
    conv_id: Annotated[
        str | None,
        typer.Argument(autocompletion=complete_ids, metavar="[ID]", help="Show only below ID."),
    ] = None,
    interval: Interval = 1.0,
    count: Count = 0,
    include_hidden: All = False,
    root_id: RootId = None,
    full_ids: FullIds = False,
) -> None:
    """A live view of the conversation tree, as jpfs tree --watch: press q (or Ctrl-C)
    to quit. Piped, it prints one frame and exits (--count N for more)."""
    show(conv_id, root_id, "text", True, interval, count, include_hidden, full_ids)


def show(
    conv_id: str | None,
    root_id: str | None,
    fmt: str,
    watch: bool,
    interval: float,
    count: int,
    include_hidden: bool,
    full_ids: bool = False,
) -> None:
    from jpfs.core.tree import left_out_note
    from jpfs.services.views.status_view import TreeView, daemon_line

    ws = state.ws()
    under = subtree(ws, conv_id, root_id)
    view = TreeView(ws)
    terminal = sys.stdout.isatty()
    if watch and not terminal and not count:
        count = 1  # piped: one frame, not one appended every second
    clear = watch and terminal
    width = shutil.get_terminal_size().columns if terminal else 0
    frames = 0
    with keys.keys() as wait_key:
        while True:
            rows = view.rows(under, include_hidden=include_hidden)
            if frames == 0:  # said once, not at every refresh
                for rel in view.left_out:
                    note(f"jpfs: note: {left_out_note(rel)}")
            if fmt == "json":
                out_json([r.to_json() for r in rows])
            else:
                header = daemon_line(ws) if watch else ""
                if clear:
                    header = (header + "  " if header else "") + "(q: quit)"
                # Listed again at each frame: a new sibling may lengthen a prefix.
                short = shortener(ws, root_id, full_ids, view.levels)
                frame = cut(render(rows, header=header, short=short), width)
                out(("\x1b[H\x1b[2J" if clear else "") + frame)
            sys.stdout.flush()
            frames += 1
            if not watch or (count and frames >= count):
                return
            if wait_key(interval) in ("q", "Q"):
                return
            if not clear and fmt == "text":
                out("")


def cut(text: str, width: int) -> str:
    """Each line at most ``width`` characters (0: as it is), cut with an ellipsis, so
    that a row never wraps on a terminal."""
    if width <= 0:
        return text
    return "\n".join(
        line if len(line) <= width else line[: width - 1] + "…" for line in text.split("\n")
    )


def render(rows: list[Row], header: str = "", short: Callable[[str], str] = str) -> str:
    """The tree as a table (ID indented by depth, as ``short`` shows it), under
    ``header`` if given."""
    from jpfs.core.usage import dollars
    from jpfs.services.views.status_view import duration, tokens_text

    parents = {r.id.rsplit("/", 1)[0] for r in rows if "/" in r.id}
    text = table(
        ("id", "state", "agent", "model", "time", "tokens", "cost", "subtree", "mail", "last"),
        [
            (
                "  " * row.depth + short(row.id).rsplit("/", 1)[-1],
                row.state,
                row.agent,
                row.model,
                duration(row.elapsed),
                tokens_text(row.tokens),
                dollars(row.cost_usd) if row.tokens else "-",
                # A subtree's total, on the rows that have sub-conversations shown.
                dollars(row.subtree_cost_usd) if row.id in parents else "",
                # Its caller's messages not delivered yet: at its next model call, or run.
                f"{row.mail_waiting} waiting" if row.mail_waiting else "",
                row.last,
            )
            for row in rows
        ],
    )
    if not rows:
        text += "(no conversations)\n"
    else:
        top = [r for r in rows if r.depth == 0]
        tokens = sum(r.subtree_tokens for r in top)
        costs = [r.subtree_cost_usd for r in top]
        cost = None if None in costs else sum(c for c in costs if c is not None)
        text += f"total: {tokens_text(tokens)} tokens, {dollars(cost)}\n"
    return (header + "\n" if header else "") + text
