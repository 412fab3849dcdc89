"""What the shells complete beyond commands and options: conversation ids, agent names,
configuration keys (typer's bash, zsh and fish scripts ask the program, through
click's completion protocol, for the word under the cursor).

Ids are completed one level at a time, as they are resolved (:mod:`jpfs.core.scope`):
the children at the level being typed, under the parent typed so far (itself a prefix
or whole), so a tree of 10,000 conversations costs one directory listing, not a walk.
Under ``--root-id R`` only R's descendants are offered. A completion never fails: no
workspace, a bad prefix, an unreadable directory all complete nothing.
"""

from __future__ import annotations

from pathlib import Path

import typer

from jpfs.cli.context import meta_key, state


def _root_id(ctx: typer.Context) -> str | None:
    given = ctx.params.get("root_id")
    if isinstance(given, str):
        return given
    kept = ctx.meta.get(meta_key("--root-id"))  # written before the subcommand
    return str(kept) if kept is not None else None


def complete_ids(ctx: typer.Context, incomplete: str) -> list[str]:
    """The ids that may follow ``incomplete`` at its level, inside ``--root-id``."""
    from jpfs.core import scope
    from jpfs.errors import JpfsError

    try:
        ws = state.ws()
        within = _root_id(ctx)
        if within is not None:
            within = scope.resolve(ws.conv_root, within)
        typed_parent, slash, last = incomplete.rpartition("/")
        if within is not None and not slash:
            # Nothing below the scope root typed yet: its path first, as ids start.
            return (
                [f"{within}/{n}" for n in _names(ws.conv_root, within, "")]
                if (f"{within}/".startswith(incomplete))
                else []
            )
        if slash:
            if typed_parent == within:
                parent = within
            else:
                parent = scope.resolve(ws.conv_root, typed_parent, within=within)
        else:
            parent = ""
        return [f"{typed_parent}{slash}{n}" for n in _names(ws.conv_root, parent, last)]
    except (JpfsError, OSError):
        return []


def _names(conv_root: Path, parent: str, start: str) -> list[str]:
    from jpfs.core import scope

    return sorted(n for n in scope.children(conv_root, parent) if n.startswith(start))


def complete_agents(incomplete: str) -> list[str]:
    """The workspace's agent profiles (``.jpfs/agents/NAME.toml``)."""
    from jpfs.core import profiles
    from jpfs.errors import JpfsError

    try:
        names = profiles.available(state.ws().agents_dir)
    except (JpfsError, OSError):
        return []
    return [n for n in names if n.startswith(incomplete)]


def complete_config_keys(incomplete: str) -> list[tuple[str, str]]:
    """Every configuration key, with what it means (zsh and fish show it)."""
    from jpfs.core.config import SCHEMA

    return [(k, key.help) for k, key in SCHEMA.items() if k.startswith(incomplete)]
