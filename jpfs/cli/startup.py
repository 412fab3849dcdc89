"""What keeps ``jpfs`` start-up cheap (measured in bench/bench_cli.py, see bench/RESULTS.md).

typer builds the click command of every registered command (signatures, type hints)
before parsing anything, a cost that grows with each command group. :func:`only` hands
it just the group or command being invoked, through typer's public attributes
(``registered_groups``, ``registered_commands``) and ``typer.main.get_command``.

typer is pinned below 0.25 (pyproject.toml): from 0.25 on it converts every parameter
through a pydantic ``TypeAdapter`` (about 70 ms more per command here) and no public
API turns that off; 0.24 parses with click, as jpfs needs.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import typer
from typer.core import TyperOption
from typer.main import get_command


def _pruned(app: typer.Typer, name: str | None) -> typer.Typer:
    out = copy.copy(app)
    out.registered_groups = [g for g in app.registered_groups if g.name == name]
    out.registered_commands = [
        c
        for c in app.registered_commands
        if (c.name or getattr(c.callback, "__name__", "").lower().replace("_", "-")) == name
    ]
    return out


def invoked(app: typer.Typer, args: Sequence[str]) -> tuple[str | None, list[str]]:
    """The group or command ``args`` invoke, past ``app``'s own options and their values,
    and the arguments after it."""
    takes_value: set[str] = set()
    if app.registered_callback is not None:  # a group without one has no options
        own = get_command(_pruned(app, None))
        takes_value = {
            opt
            for p in own.params
            if isinstance(p, TyperOption) and not p.is_flag and not p.count
            for opt in p.opts
        }
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        if arg == "--":
            return (rest[0], rest[1:]) if rest else (None, [])
        if not arg.startswith("-") or arg == "-":
            return arg, rest
        if arg in takes_value and rest:  # "-w DIR"; "-wDIR" and "--workspace=DIR" are one
            rest.pop(0)
    return None, []


def only(app: typer.Typer, args: Sequence[str]) -> typer.Typer:
    """``app`` with only the group or command ``args`` invoke, and within a group only
    the command invoked; all of a level for ``--help``, no command or an unknown one (so
    click's errors and suggestions stay the same)."""
    name, rest = invoked(app, args)
    pruned = _pruned(app, name)
    if not (pruned.registered_groups or pruned.registered_commands):
        return app
    if pruned.registered_groups:
        group = copy.copy(pruned.registered_groups[0])
        if group.typer_instance is not None:
            group.typer_instance = only(group.typer_instance, rest)
        pruned.registered_groups = [group]
    return pruned
