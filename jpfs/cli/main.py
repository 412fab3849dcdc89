"""``jpfs``: the command line. Parses, dispatches, and leaves the work to the core."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from jpfs.cli import error_handler, startup
from jpfs.cli.argv import hoist_global_options
from jpfs.cli.commands import branches as branches_cmd
from jpfs.cli.commands import config as config_cmd
from jpfs.cli.commands import conversation as conversation_cmd
from jpfs.cli.commands import daemon as daemon_cmd
from jpfs.cli.commands import history as history_cmd
from jpfs.cli.commands import init as init_cmd
from jpfs.cli.commands import lifecycle as lifecycle_cmd
from jpfs.cli.commands import mail as mail_cmd
from jpfs.cli.commands import mcp as mcp_cmd
from jpfs.cli.commands import migrate as migrate_cmd
from jpfs.cli.commands import onboard as onboard_cmd
from jpfs.cli.commands import query as query_cmd
from jpfs.cli.commands import sync as sync_cmd
from jpfs.cli.commands import tree as tree_cmd
from jpfs.cli.commands import trust as trust_cmd
from jpfs.cli.context import state
from jpfs.tools import registry as _tools  # noqa: F401  (installs the runs' toolbox; cheap)

app = typer.Typer(
    name="jpfs",
    help="Delegate work to LLM sub-agents through plain files in a git repository.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"jpfs {version('jpfs')}")
        except PackageNotFoundError:
            typer.echo("jpfs (not installed as a package)")
        raise typer.Exit()


@app.callback()
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


init_cmd.register(app)
migrate_cmd.register(app)
conversation_cmd.register(app)
config_cmd.register(app)
history_cmd.register(app)
query_cmd.register(app)
mcp_cmd.register(app)
onboard_cmd.register(app)
branches_cmd.register(app)
daemon_cmd.register(app)
tree_cmd.register(app)
mail_cmd.register(app)
lifecycle_cmd.register(app)
trust_cmd.register(app)
sync_cmd.register(app)


def main(argv: list[str] | None = None) -> int:
    args = hoist_global_options(sys.argv[1:] if argv is None else argv)
    # startup.only: typer builds every command it is given; give it the invoked one.
    code = error_handler.run(
        lambda: startup.only(app, args)(args=args, prog_name="jpfs", standalone_mode=False)
    )
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    raise SystemExit(main())
