"""``jpfs.cli.startup.only``: typer is handed only the command invoked, for start-up
speed, and must then say and do exactly what the whole app would."""

from __future__ import annotations

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from jpfs.cli import startup
from jpfs.cli.argv import hoist_global_options
from jpfs.cli.main import app


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
