"""``jpfs scan``: secrets already in the record's history."""

from __future__ import annotations

import typer

from jpfs.cli.context import note, out, out_json, state
from jpfs.cli.options import Format


def scan(fmt: Format = "text") -> None:
    """Report every recognised secret in the record's history (one line each: path,
    line, kind, commit) and how to rewrite it; exit 1 when there is any."""
    from jpfs.infra.git import refs
    from jpfs.services.sync import leaks

    ws = state.ws()
    ws.ensure_record()
    tip = refs.resolve(ws.root, f"refs/heads/{ws.record_branch}")
    found = leaks.find(ws.root, None, tip) if tip else []
    if fmt == "json":
        out_json(
            [
                {"conversation": leak.conversation, "path": leak.path, "line": leak.line,
                 "kind": leak.kind, "commit": leak.commit}
                for leak in found
            ]
        )  # fmt: skip
    else:
        for leak in found:
            out(leak.text())
        if found:
            note(leaks.REWRITE.format(branch=ws.record_branch))
        else:
            note(f"no recognised secret in the history of {ws.record_branch}")
    if found:
        raise typer.Exit(1)
