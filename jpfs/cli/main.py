"""``jpfs``: the command line. Parses, dispatches, and leaves the work to the core."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated

import typer

from jpfs.cli import error_handler, startup
from jpfs.cli.argv import hoist_global_options
from jpfs.cli.context import note, state

# The command modules (jpfs/cli/commands/), in the order help lists them, and the groups
# and commands each registers. A run imports only the module it invokes: all of them
# cost every command ~12 ms of start-up. tests/adapters/test_cli_startup.py holds the
# table to what the modules register.
MODULES: dict[str, tuple[str, ...]] = {
    "init": ("init",),
    "migrate": ("migrate",),
    "conversation": ("conversation", "c"),
    "config": ("config",),
    "history": ("log", "gc"),
    "cost": ("cost",),
    "query": ("query", "answer"),
    "mcp": ("mcp", "tools"),
    "onboard": ("onboard",),
    "branches": ("merge", "discard", "diff"),
    "daemon": ("daemon",),
    "tree": ("tree", "top"),
    "mail": ("mail",),
    "lifecycle": ("fork", "kill", "capture", "retry"),
    "trust": ("trust",),
    "sync": ("sync",),
    "scan": ("scan",),
    "doctor": ("doctor",),
}
_OWNER = {name: module for module, names in MODULES.items() for name in names}


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"jpfs {version('jpfs')}")
        except PackageNotFoundError:
            typer.echo("jpfs (not installed as a package)")
        raise typer.Exit()


def root(
    workspace: Annotated[
        Path | None,
        typer.Option("-w", "--workspace", help="Workspace directory (default: search upward)."),
    ] = None,
    cfg: Annotated[
        list[str] | None,
        typer.Option(
            "--cfg",
            metavar="SPEC",
            help="KEY=VALUE, FILE.toml or NONE; repeatable, applied in order.",
        ),
    ] = None,
    version: Annotated[
        bool,
        typer.Option(
            "--version", is_eager=True, callback=_print_version, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    state.workspace = workspace
    state.cfg = list(cfg or [])
    state._ws = None


# What every command shares, and the alias, which help would not show otherwise.
EPILOG = (
    "Options most commands take: --format text|json (where they show data: text for"
    " people, json for programs) and --root-id ID (refuse every id outside ID's"
    " subtree). `jpfs c` is short for `jpfs conversation`. The options above go"
    " anywhere on the line: `jpfs -w DIR tree` and `jpfs tree -w DIR` alike."
)


def build(modules: Iterable[str] = MODULES) -> typer.Typer:
    """The ``jpfs`` app with the commands of ``modules`` (all by default)."""
    app = typer.Typer(
        name="jpfs",
        help="Delegate work to LLM sub-agents through plain files in a git repository.",
        epilog=EPILOG,
        no_args_is_help=True,
        add_completion=True,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
    )
    app.callback()(root)
    wanted = set(modules)
    for module in MODULES:
        if module in wanted:
            importlib.import_module(f"jpfs.cli.commands.{module}").register(app)
    return app


def main(argv: list[str] | None = None) -> int:
    args = hoist_global_options(sys.argv[1:] if argv is None else argv)
    # Only the module of the command invoked (all of them for help, completion or an
    # unknown name); startup.only then hands typer only that command to build.
    name, _ = startup.invoked(build(()), args)
    app = build([_OWNER[name]] if name in _OWNER else MODULES)
    code = error_handler.run(
        lambda: startup.only(app, args)(args=args, prog_name="jpfs", standalone_mode=False)
    )
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
