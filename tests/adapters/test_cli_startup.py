"""Start-up: ``jpfs.cli.main`` imports only the module of the command invoked, and
``jpfs.cli.startup.only`` hands typer only that command; both must then say and do
exactly what the whole app would."""

from __future__ import annotations

import pytest
import typer
from typer.main import get_command
from typer.testing import CliRunner

from jpfs.cli import main, startup
from jpfs.cli.argv import hoist_global_options

app = main.build()


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
def test_the_pruned_app_says_what_the_whole_app_says(argv: tuple[str, ...]) -> None:
    args = hoist_global_options(list(argv))
    runner = CliRunner()
    whole = runner.invoke(app, args, prog_name="jpfs")
    pruned = runner.invoke(startup.only(app, args), args, prog_name="jpfs")
    assert whole.output  # help, or click's error and suggestion
    assert (pruned.exit_code, pruned.output) == (whole.exit_code, whole.output)


def test_within_a_group_only_the_command_invoked_is_built() -> None:
    pruned = get_command(startup.only(app, ["conversation", "grep", "x"]))
    group = pruned.commands["conversation"]  # type: ignore[attr-defined]
    assert list(group.commands) == ["grep"]
    everything = get_command(startup.only(app, ["conversation", "--help"]))
    assert "ls" in everything.commands["conversation"].commands  # type: ignore[attr-defined]


def names(app: typer.Typer) -> list[str]:
    groups = [g.name for g in app.registered_groups]
    return [*groups, *(c.name for c in app.registered_commands)]


@pytest.mark.parametrize("module", list(main.MODULES))
def test_the_table_names_what_each_module_registers(module: str) -> None:
    assert sorted(names(main.build([module]))) == sorted(main.MODULES[module])


def test_every_command_module_is_in_the_table() -> None:
    from pathlib import Path

    import jpfs.cli.commands as package

    modules = {p.stem for p in Path(package.__file__).parent.glob("*.py")} - {"__init__"}
    assert modules == set(main.MODULES)


def test_a_command_imports_only_its_module() -> None:
    import subprocess
    import sys

    probe = (
        "import sys\nfrom jpfs.cli.main import main\nmain(['conversation', '--help'])\n"
        "print(sorted(m for m in sys.modules if m.startswith('jpfs.cli.commands.')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    assert out.splitlines()[-1] == "['jpfs.cli.commands.conversation']"
