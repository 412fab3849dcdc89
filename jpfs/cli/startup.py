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


def command_name(app: typer.Typer, args: Sequence[str]) -> str | None:
    """The group or command ``args`` invoke, past the root options and their values."""
    root = get_command(_pruned(app, None))
    takes_value = {
        opt
        for p in root.params
        if isinstance(p, TyperOption) and not p.is_flag and not p.count
        for opt in p.opts
    }
    it = iter(args)
    for arg in it:
        if arg == "--":
            return next(it, None)
        if not arg.startswith("-") or arg == "-":
            return arg
        if arg in takes_value:  # "-w DIR"; "-wDIR" and "--workspace=DIR" are one token
            next(it, None)
    return None


def only(app: typer.Typer, args: Sequence[str]) -> typer.Typer:
    """``app`` with only the group or command ``args`` invoke; all of it for ``--help``,
    no command or an unknown one (so click's errors and suggestions stay the same)."""
    pruned = _pruned(app, command_name(app, args))
    return pruned if pruned.registered_groups or pruned.registered_commands else app
