"""Groups whose commands load when invoked: click's "Lazily Loading Subcommands".

Building a command (typer reads its signature and type hints) and importing its module
are most of ``jpfs``'s start-up, so a :class:`LazyGroup` lists its commands from a
table (:class:`Commands`) and builds only the one invoked: one command module imported
(of the root's) and one command built (of a group's), measured in bench/bench_cli.py.
Help, completion and an unknown name build them all, to list them or suggest one.

A command is a function made a click command by typer's public
``typer.main.get_command``; every level takes the options of
:func:`jpfs.cli.options.everywhere`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import click
import typer
from typer.core import TyperGroup

from jpfs.cli import options

# A command's function, or "module:attribute" (under jpfs.cli.commands) of a function or
# of a group's Commands.
Entry = Callable[..., Any] | str


@dataclass(frozen=True)
class Commands:
    """A group's commands, in the order help lists them."""

    help: str
    entries: Mapping[str, Entry]
    # Commands whose help line is not their function's docstring's.
    helps: Mapping[str, str] = field(default_factory=dict)
    # Listed by nothing (aliases); they still run.
    hidden: frozenset[str] = frozenset()


class LazyGroup(TyperGroup):
    """A group that builds a command of :attr:`table` when it is invoked."""

    table: Commands  # a subclass's, or the one given

    def __init__(self, *, table: Commands | None = None, **attrs: Any) -> None:
        super().__init__(**attrs)
        if table is not None:
            self.table = table

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.table.entries)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.table.entries:
            self.add_command(self._build(cmd_name), cmd_name)
        return super().get_command(ctx, cmd_name)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        if args and args[0] not in self.table.entries:
            # typer suggests a close name among the commands built: build them all.
            for known in self.list_commands(ctx):
                self.get_command(ctx, known)
        name, command, rest = super().resolve_command(ctx, args)
        if name is not None and command is not None:
            options.refuse_unknown(ctx, name, command)
        return name, command, rest

    def _build(self, name: str) -> click.Command:
        entry = self.table.entries[name]
        if isinstance(entry, str):
            module, _, attribute = entry.partition(":")
            entry = getattr(importlib.import_module(f"jpfs.cli.commands.{module}"), attribute)
        command: click.Command
        if isinstance(entry, Commands):
            command = LazyGroup(
                name=name, help=entry.help, no_args_is_help=True, rich_markup_mode=None, table=entry
            )
        else:
            app = typer.Typer(add_completion=False, rich_markup_mode=None)
            app.command(name, help=self.table.helps.get(name))(entry)
            command = typer.main.get_command(app)
        command.hidden = name in self.table.hidden
        taken = {opt for p in command.params if isinstance(p, click.Option) for opt in p.opts}
        # A command's own option of the same name wins (query's --cfg, a layer of its own).
        command.params += [
            p for p in options.everywhere(hidden=True) if taken.isdisjoint(getattr(p, "opts", ()))
        ]
        return command
