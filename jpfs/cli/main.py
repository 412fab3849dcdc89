"""``jpfs``: the command line. Parses, dispatches, and leaves the work to the core."""

from __future__ import annotations

import sys
from typing import Annotated

import click
import typer

from jpfs.cli import error_handler, options
from jpfs.cli.context import note, state
from jpfs.cli.lazygroup import Commands, LazyGroup

# What every command shares, and the alias, which help would not show otherwise.
EPILOG = (
    "Options most commands take: --format text|json (where they show data: text for"
    " people, json for programs) and --root-id ID (refuse every id outside ID's"
    " subtree). `jpfs c` is short for `jpfs conversation`. The options above go"
    " anywhere on the line: `jpfs -w DIR tree` and `jpfs tree -w DIR` alike."
)

# The commands and groups, in the order help lists them, each "module:attribute" under
# jpfs/cli/commands/: a run imports only the module of the command it invokes.
COMMANDS = Commands(
    help="Delegate work to LLM sub-agents through plain files in a git repository.",
    entries={
        "init": "init:init",
        "migrate": "migrate:migrate",
        "log": "history:log",
        "blame": "blame:blame",
        "gc": "history:gc",
        "cost": "cost:cost",
        "query": "query:query",
        "answer": "query:answer",
        "mcp": "mcp:mcp",
        "tools": "mcp:tools",
        "onboard": "onboard:onboard",
        "merge": "branches:merge",
        "discard": "branches:discard",
        "diff": "branches:diff",
        "tree": "tree:tree",
        "top": "tree:top",
        "fork": "lifecycle:fork",
        "kill": "lifecycle:kill",
        "capture": "lifecycle:capture",
        "retry": "lifecycle:retry",
        "trust": "trust:trust",
        "sync": "sync:sync",
        "scan": "scan:scan",
        "doctor": "doctor:doctor",
        "conversation": "conversation:COMMANDS",
        "c": "conversation:COMMANDS",
        "config": "config:COMMANDS",
        "daemon": "daemon:COMMANDS",
        "mail": "mail:COMMANDS",
    },
    hidden=frozenset({"c"}),
)


class Jpfs(LazyGroup):
    table = COMMANDS


def _print_version(value: bool) -> None:
    if value:
        # importlib.metadata costs every command ~30 ms of start-up; only this needs it.
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"jpfs {version('jpfs')}")
        except PackageNotFoundError:
            typer.echo("jpfs (not installed as a package)")
        raise typer.Exit()


app = typer.Typer(
    cls=Jpfs,
    name="jpfs",
    help=COMMANDS.help,
    epilog=EPILOG,
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


@app.callback()
def root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", is_eager=True, callback=_print_version, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """The options of every command (options.everywhere); the commands load on demand."""


def command() -> click.Group:
    """The ``jpfs`` command; a command's module loads when it is invoked."""
    group = typer.main.get_command(app)
    assert isinstance(group, click.Group)
    group.params[:0] = options.everywhere(hidden=False)
    group.params += options.handed_down()
    return group


def main(argv: list[str] | None = None) -> int:
    state.reset()
    jpfs = command()
    args = sys.argv[1:] if argv is None else argv
    code = error_handler.run(lambda: jpfs.main(args=args, prog_name="jpfs", standalone_mode=False))
    report_policy()
    return code if isinstance(code, int) else 0


def report_policy() -> None:
    """Say on stderr what of ``.jpfs/`` the last good copy stood in for (a branch
    without it, a broken or untrusted profile): the command ran, but not on the files
    the user sees."""
    for path, why in sorted(state.policy_notes().items()):
        note(f"jpfs: note: {path}: {why} (the last good copy stood in)")


if __name__ == "__main__":
    raise SystemExit(main())
