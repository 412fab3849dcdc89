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
    from jpfs.services.workspace.bootstrap import init_workspace

    ws, written = init_workspace(state.workspace or Path.cwd(), git_init=git_init, cfg=state.cfg)
    if written:
        names = " ".join(sorted({ws.rel(p).split("/")[0] for p in written}))
        note(
            f"initialised jpfs workspace in {ws.root}; the record is on branch "
            f"{ws.record_branch} at {ws.rel(ws.conv_root)}/. Commit the project files "
            # The pathspec keeps whatever else the user staged out of this commit.
            f"when you like: git add {names} && git commit -m 'jpfs init' -- {names}"
        )
    else:
        note(f"{ws.root} is already set up (record: {ws.record_branch})")
    from jpfs.services.workspace import trust

    waiting = [r.name for r in trust.standing(ws.agents_dir, ws.local_dir) if not r.trusted]
    if waiting:
        note(
            f"profiles that run local programs wait for your trust: {', '.join(waiting)};"
            " review them in .jpfs/agents/, then run `jpfs trust`"
        )
    out(str(ws.root))
