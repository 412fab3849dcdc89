"""``jpfs blame``: each line of a file with the conversation that wrote it."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from jpfs.cli.context import out, out_json, state
from jpfs.cli.options import Format, RootId

if TYPE_CHECKING:
    from jpfs.services.views.provenance import Line


def line_range(value: str | None) -> tuple[int, int | None] | None:
    """``-L START,END`` (``START,`` to the end, ``START`` alone one line), 1-based."""
    if value is None:
        return None
    first, sep, last = value.partition(",")
    try:
        start = int(first)
        end = int(last) if last.strip() else (None if sep else start)
    except ValueError:
        raise typer.BadParameter(
            f"{value!r} is not START,END (line numbers)", param_hint="-L"
        ) from None
    if start < 1 or (end is not None and end < start):
        raise typer.BadParameter(
            f"{value!r}: lines count from 1 and END is not before START", param_hint="-L"
        )
    return start, end


def blame(
    path: Annotated[str, typer.Argument(metavar="PATH")],
    lines: Annotated[
        str | None, typer.Option("-L", metavar="START,END", help="Only these lines.")
    ] = None,
    rev: Annotated[
        str | None, typer.Option("--rev", help="Blame the file as of this commit.")
    ] = None,
    explain: Annotated[
        int | None,
        typer.Option(
            "--explain",
            metavar="LINE",
            min=1,
            help="The task, Q&A, model turn, tool call and cost behind line LINE.",
        ),
    ] = None,
    fmt: Format = "text",
    root_id: RootId = None,
) -> None:
    """Each line of PATH with the commit and the conversation that wrote it (git blame's
    shape, the conversation in place of the author on lines an agent wrote)."""
    from jpfs.cli.options import root_scope
    from jpfs.errors import NotFoundError
    from jpfs.services.views import provenance

    span = line_range(lines)
    ws = state.ws()
    within = root_scope(ws, root_id)
    target = Path(os.path.abspath(path))
    if ".git" in target.parts:
        raise NotFoundError(f"{path}: inside .git, not a file of a work tree")
    if not target.parent.is_dir() or (rev is None and not target.is_file()):
        if target.is_dir():
            raise NotFoundError(f"{path}: a directory; blame takes a file")
        if target.exists():
            raise NotFoundError(f"{path}: not a regular file")
        raise NotFoundError(f"{path}: no such file")
    cwd, name = target.parent, target.name
    if explain is not None:
        # Only here: it loads the usage ledger's and the providers' modules.
        from jpfs.services.views import explanation

        found = explanation.explain(
            ws.root, ws.record_branch, cwd, name, explain, rev=rev, within=within, table=ws.prices
        )
        if fmt == "json":
            out_json(found.to_json())
        else:
            out(found.text().rstrip("\n"))
        return
    start, end = span if span else (None, None)
    rows = provenance.blame(
        ws.root, ws.record_branch, cwd, name, start=start, end=end, rev=rev, within=within
    )
    if fmt == "json":
        out_json([r.to_json() for r in rows])
        return
    out("\n".join(text_lines(rows)))


def text_lines(rows: list[Line]) -> list[str]:
    """git blame's default shape: ``sha (who date line) text``."""
    who = [r.conversation or r.author for r in rows]
    width = max((len(w) for w in who), default=0)
    digits = len(str(max((r.line for r in rows), default=0)))
    return [
        f"{r.commit[:8]} ({w:<{width}} {_date(r.time, r.tz)} {r.line:>{digits}}) {r.text}"
        for r, w in zip(rows, who, strict=True)
    ]


def _date(seconds: int, tz: str) -> str:
    try:
        sign = -1 if tz.startswith("-") else 1
        offset = dt.timedelta(hours=int(tz[1:3]), minutes=int(tz[3:5])) * sign
        when = dt.datetime.fromtimestamp(seconds, dt.timezone(offset))
    except (ValueError, IndexError, OverflowError):
        return str(seconds)
    return when.strftime("%Y-%m-%d %H:%M:%S ") + tz
