"""``jpfs trust``."""

from __future__ import annotations

from typing import Annotated

import typer

from jpfs.cli.context import note, out_json, out_table, state
from jpfs.cli.options import Format


def trust(
    names: Annotated[list[str] | None, typer.Argument(help="Profiles (default: all).")] = None,
    show: Annotated[
        bool, typer.Option("--list", help="Only show which profiles need trust.")
    ] = False,
    fmt: Format = "text",
) -> None:
    """Trust the profiles that run local programs, as they are now (review them first)."""
    from jpfs.services.workspace import trust as trust_mod

    ws = state.ws()
    if show and names:
        raise typer.BadParameter(
            "--list shows every profile; it takes no names", param_hint="--list"
        )
    if not show:
        done = trust_mod.trust(ws.agents_dir, ws.local_dir, names or None)
        note(f"trusted {len(done)} profile(s) as they are now: {', '.join(done)}")
    rows = trust_mod.standing(ws.agents_dir, ws.local_dir)
    if fmt == "json":
        out_json([r.to_json() for r in rows])
        return
    out_table(
        ("profile", "programs", "trusted"),
        [
            (
                r.name,
                "yes" if r.runs_programs else "no",
                "yes" if r.trusted else ("changed: run `jpfs trust`" if r.changed else "no"),
            )
            for r in rows
        ],
    )
