"""What a new user meets first: init's hint, --help, and a mistyped command."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path

from tests.conftest import Result, git


def test_inits_hint_commits_jpfs_files_and_nothing_the_user_staged(
    repo: Path, cli: Callable[..., Result]
) -> None:
    (repo / "mine.txt").write_text("staged, not ready\n", encoding="utf-8")
    git(repo, "add", "mine.txt")
    done = cli("init")
    assert done.code == 0, done.stderr
    hint = re.search(r"when you like: (.*)$", done.stderr, re.M)
    assert hint, done.stderr
    ran = subprocess.run(["bash", "-c", hint[1]], cwd=repo, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    committed = git(repo, "show", "--name-only", "--format=", "HEAD").split()
    assert "mine.txt" not in committed and ".gitignore" in committed
    assert any(p.startswith(".jpfs/") for p in committed)
    assert git(repo, "diff", "--cached", "--name-only").split() == ["mine.txt"]  # still staged


def test_help_shows_the_shared_options_and_the_alias(cli: Callable[..., Result]) -> None:
    shown = cli("--help").stdout
    for words in ("--format text|json", "--root-id ID", "`jpfs c` is short for"):
        assert words in " ".join(shown.split()), words
    assert "alias: jpfs c" in cli("conversation", "--help").stdout


def test_an_unknown_command_gets_a_suggestion(cli: Callable[..., Result]) -> None:
    for typed, meant in (
        ("status", "'jpfs daemon status'"),
        ("statsu", "'jpfs daemon status'"),
        ("ls", "'jpfs conversation ls'"),
        ("trea", "'tree'"),
    ):
        refused = cli(typed)
        assert refused.code == 2, typed
        assert meant in refused.stderr and refused.stderr.count("\n") == 1, refused.stderr


def test_no_help_shows_raw_markup(cli: Callable[..., Result]) -> None:
    """Help is read in a terminal: no reST ``literals`` or **emphasis** in it."""
    import click

    from jpfs.cli import main

    def paths(command: click.Command, prefix: tuple[str, ...]) -> list[tuple[str, ...]]:
        found = [prefix]
        if isinstance(command, click.Group):
            ctx = click.Context(command)
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                assert sub is not None, name
                found += paths(sub, (*prefix, name))
        return found

    every = paths(main.command(), ())
    assert len(every) > 40
    for path in every:
        shown = cli(*path, "--help")
        assert shown.code == 0, path
        assert "``" not in shown.stdout and "**" not in shown.stdout, (path, shown.stdout)
