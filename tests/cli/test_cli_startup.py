"""Start-up: ``jpfs`` imports only the module of the command invoked and builds only
that command (jpfs.cli.lazygroup); it must then say and do exactly what it would with
every command built."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click
import pytest

from jpfs.cli import main


def built(command: click.Command) -> click.Command:
    """``command`` with every command of every level built, as help builds them."""
    if isinstance(command, click.Group):
        ctx = click.Context(command)
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            assert sub is not None, name
            built(sub)
    return command


@pytest.mark.parametrize(
    "argv",
    [
        ("--help",),
        ("conversation", "--help"),
        ("conversation", "grep", "--help"),
        ("c", "ls", "--help"),
        ("-w", ".", "conversation", "grep", "--help"),
        ("conversation", "--", "grep", "--help"),
        ("daemon", "start", "--help"),
        ("init", "--help"),
        ("conversation", "gerp", "x"),
        ("conversation",),
        ("nope",),
    ],
)
def test_the_lazy_command_says_what_the_whole_command_says(argv: tuple[str, ...]) -> None:
    def said(jpfs: click.Command) -> tuple[object, str]:
        from click.testing import CliRunner

        result = CliRunner().invoke(jpfs, list(argv), prog_name="jpfs")
        return result.exit_code, result.output

    whole, lazy = said(built(main.command())), said(main.command())
    assert whole[1]  # help, or click's error and suggestion
    assert lazy == whole


def test_within_a_group_only_the_command_invoked_is_built() -> None:
    jpfs = main.command()
    ctx = click.Context(jpfs)
    group = jpfs.get_command(ctx, "conversation")
    assert isinstance(group, click.Group)
    assert group.get_command(ctx, "grep") is not None
    assert list(group.commands) == ["grep"]
    assert list(jpfs.commands) == ["conversation"]
    assert "ls" in group.list_commands(ctx)


def test_every_command_module_is_in_the_table() -> None:
    import jpfs.cli.commands as package

    modules = {p.stem for p in Path(package.__file__).parent.glob("*.py")} - {"__init__"}
    named = {entry.partition(":")[0] for entry in main.COMMANDS.entries.values()}
    assert isinstance(next(iter(main.COMMANDS.entries.values())), str)
    assert modules == named


def test_a_command_imports_only_its_module() -> None:
    probe = (
        "import sys\nfrom jpfs.cli.main import main\nmain(['conversation', '--help'])\n"
        "print(sorted(m for m in sys.modules if m.startswith('jpfs.cli.commands.')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    assert out.splitlines()[-1] == "['jpfs.cli.commands.conversation']"
