"""``jpfs init``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from jpfs.cli.context import note, out, state


def init(
    git_init: Annotated[
        bool, typer.Option("--git-init", help="Run `git init` first if not in a repository.")
    ] = False,
) -> None:
    """Make this git work tree a jpfs workspace (harmless to run twice)."""
    from jpfs.bootstrap import init_workspace

    ws, sha = init_workspace(state.workspace or Path.cwd(), git_init=git_init)
    note(f"initialised jpfs workspace in {ws.root}" if sha else f"{ws.root} is already set up")
    out(str(ws.root))


def register(app: typer.Typer) -> None:
    app.command("init")(init)
