"""The options several commands share, declared once, and how they cross the subcommand.

Users (and MCP client configurations such as the README's
``"args": ["mcp", "-w", "/path/to/repo"]``) write them on either side of the
subcommand, while click parses each level's options on its own level. So:

* ``-w/--workspace`` and ``--cfg`` (:func:`everywhere`) are the root's, and every group
  and command takes them too (hidden from its help): each occurrence lands in
  :data:`~jpfs.cli.context.state` as click parses it, in the order written;
* ``--format`` and ``--root-id`` (:data:`Format`, :data:`RootId`) are the options of
  the commands that take them; the root takes them too, hidden (:func:`handed_down`),
  and keeps what it was given in the context's ``meta``, which click shares with every
  context below it, where the command's own option picks it up (:func:`inherit`). A
  command without such an option refuses it as click does ("No such option",
  :func:`refuse_unknown`).

What ``--root-id`` does to the ids a command is given is here too, so that every
command reads it alike: :func:`root_scope`, :func:`scoped`, :func:`subtree` (each id
through :func:`resolve`: prefixes, ``@``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import click
import typer

from jpfs.cli.completion import complete_ids
from jpfs.cli.context import meta_key, state

if TYPE_CHECKING:
    from jpfs.core.workspace import Workspace


def _workspace(ctx: click.Context, param: click.Parameter, value: Path | None) -> None:
    if value is not None:
        state.workspace = value


def _cfg(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> None:
    state.cfg.extend(value)


def everywhere(hidden: bool) -> list[click.Parameter]:
    """``-w/--workspace`` and ``--cfg``, for the root (shown) or any level below it."""
    return [
        click.Option(
            ["-w", "--workspace"],
            type=click.Path(path_type=Path),
            help="Workspace directory (default: search upward).",
            hidden=hidden,
            expose_value=False,
            callback=_workspace,
        ),
        click.Option(
            ["--cfg"],
            metavar="SPEC",
            multiple=True,
            help="KEY=VALUE, FILE.toml or NONE; repeatable, applied in order.",
            hidden=hidden,
            expose_value=False,
            callback=_cfg,
        ),
    ]


_HANDED_DOWN = ("--format", "--root-id")


_key = meta_key


def _keep(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is not None and isinstance(param, click.Option):
        ctx.meta[_key(param.opts[0])] = value


def handed_down() -> list[click.Parameter]:
    """The root's hidden ``--format`` and ``--root-id``, for the command below."""
    return [
        click.Option([name], hidden=True, expose_value=False, callback=_keep)
        for name in _HANDED_DOWN
    ]


def inherit(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """The value the root was given for this option, if it was, else ``value``: written
    before the subcommand it counts, as it did when it was moved after it."""
    if isinstance(param, click.Option):
        for option in param.opts:
            if _key(option) in ctx.meta:
                return str(ctx.meta[_key(option)])
    return value


def refuse_unknown(ctx: click.Context, name: str, command: click.Command) -> None:
    """Refuse what the root was handed for a command (not a group) without that option."""
    if isinstance(command, click.Group):
        return
    taken = {opt for p in command.params if isinstance(p, click.Option) for opt in p.opts}
    for option in _HANDED_DOWN:
        if _key(option) in ctx.meta and option not in taken:
            raise click.NoSuchOption(option, ctx=click.Context(command, parent=ctx, info_name=name))


FORMATS = ("text", "json")
# Earlier spellings of "text", still taken: `ls --format table`, `print --format markdown`.
_FORMAT_ALIASES = {"table": "text", "markdown": "text"}


def _check_format(ctx: typer.Context, param: typer.CallbackParam, value: str) -> str:
    value = inherit(ctx, param, value) or value
    chosen = _FORMAT_ALIASES.get(value, value)
    if chosen not in FORMATS:
        raise typer.BadParameter(f"{value!r} is not one of: text, json", param_hint="--format")
    return chosen


Format = Annotated[
    str,
    typer.Option(
        "--format",
        metavar="text|json",
        callback=_check_format,
        autocompletion=lambda: list(FORMATS),
        help="text for people, json for programs (keys: see protocol/).",
    ),
]


def _root_id(ctx: typer.Context, param: typer.CallbackParam, value: str | None) -> str | None:
    return inherit(ctx, param, value)


RootId = Annotated[
    str | None,
    typer.Option(
        "--root-id",
        callback=_root_id,
        autocompletion=complete_ids,
        help="Refuse every id that is not a strict descendant of this one.",
    ),
]


# What --root-id means, resolved once for every command (the core checks each id
# against it: jpfs.core.scope.resolve). Given, even as "", it is an id to check.
# Every id a command is given is read by scope.resolve: prefixes of segments, and `@`
# for the active conversation (`jpfs c use`), which only a person at the CLI has.
def resolve(ws: Workspace, conv_id: str, within: str | None = None) -> str:
    """``conv_id`` as typed (prefixes, ``@``) made canonical, within ``within``."""
    from jpfs.core import scope
    from jpfs.services.conversations import lifecycle

    return scope.resolve(
        ws.conv_root, conv_id, within=within, active=lambda: lifecycle.get_active(ws)
    )


def root_scope(ws: Workspace, root_id: str | None) -> str | None:
    """The subtree --root-id confines a command to, checked; None without one."""
    return resolve(ws, root_id) if root_id is not None else None


def scoped(ws: Workspace, conv_id: str | None, root_id: str | None) -> str:
    """The id to act on (the active one if omitted), checked against --root-id."""
    within = root_scope(ws, root_id)
    if conv_id is None:
        from jpfs.services.conversations import lifecycle

        conv_id = lifecycle.require_active(ws)
    return resolve(ws, conv_id, within)


def subtree(ws: Workspace, conv_id: str | None, root_id: str | None) -> str | None:
    """The subtree a command shows: ID (within --root-id), --root-id, or all (None)."""
    within = root_scope(ws, root_id)
    if conv_id is None or (not conv_id and within is not None):
        return within
    return resolve(ws, conv_id, within)


FullIds = Annotated[
    bool,
    typer.Option(
        "--full-ids",
        help="Show ids whole (text shows each generated segment at its shortest unique"
        " prefix, 8 characters or more; json always shows them whole).",
    ),
]


def shortener(
    ws: Workspace,
    root_id: str | None,
    full: bool,
    known: Mapping[str, list[str]] | None = None,
) -> Callable[[str], str]:
    """What a text listing shows of each id (jpfs.core.shortids): as unique under
    --root-id as resolution reads it there, or whole with --full-ids; ``known``: the
    levels the listing's walk just read."""
    from jpfs.core import shortids

    within = root_scope(ws, root_id) if not full else None
    return shortids.shortener(ws.conv_root, within, full=full, known=known)


# A new conversation's budget: it and its descendants (jpfs.services.conversations.budgets).
BudgetTokens = Annotated[
    int | None,
    typer.Option(
        "--budget-tokens",
        help="Most tokens the new conversation and its sub-agents may spend.",
    ),
]
BudgetUsd = Annotated[
    float | None,
    typer.Option(
        "--budget-usd",
        help="Most USD the new conversation and its sub-agents may spend.",
    ),
]
