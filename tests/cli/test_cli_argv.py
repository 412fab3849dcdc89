"""Global options on either side of the subcommand, as users write them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import Result


@pytest.mark.parametrize(
    ("given", "canonical"),
    [
        (["tools", "-w", "{ws}"], ["-w", "{ws}", "tools"]),
        (["tools", "--workspace={ws}"], ["--workspace={ws}", "tools"]),
        (["c", "ls", "-w{ws}", "--cfg", "NONE"], ["-w{ws}", "--cfg", "NONE", "c", "ls"]),
        (["c", "-w", "{ws}", "ls"], ["-w", "{ws}", "c", "ls"]),
        (["--format", "json", "tree"], ["tree", "--format", "json"]),
        (["--root-id=alpha", "c", "ls", "--tree"], ["c", "ls", "--tree", "--root-id=alpha"]),
        (["-w", "{ws}", "--format", "json", "c", "grep", "--", "--format"],
         ["-w", "{ws}", "c", "grep", "--format", "json", "--", "--format"]),
        (["--cfg", "daemon.max_agents=2", "config", "get", "daemon.max_agents", "--cfg",
          "daemon.max_agents=3"],
         ["--cfg", "daemon.max_agents=2", "--cfg", "daemon.max_agents=3", "config", "get",
          "daemon.max_agents"]),
    ],
)  # fmt: skip
def test_global_options_mean_the_same_on_either_side(
    ws: Path, cli: Callable[..., Result], given: list[str], canonical: list[str]
) -> None:
    assert cli("c", "new", "alpha", "--no-activate").code == 0
    assert cli("c", "new", "alpha/beta", "--no-activate").code == 0

    def run(args: list[str]) -> tuple[int, str]:
        # Run elsewhere when the line names the workspace, to see that it counts.
        elsewhere = any("{ws}" in a for a in args)
        done = cli(*(a.format(ws=ws) for a in args), cwd=ws.parent if elsewhere else ws)
        assert not done.stderr.startswith("jpfs: error"), done.stderr
        return done.code, comparable(done.stdout)

    assert run(given) == run(canonical)


def comparable(shown: str) -> object:
    """Output as two runs agree on it: a tree's clock-dependent column left out."""
    try:
        parsed = json.loads(shown)
    except ValueError:
        return shown
    if isinstance(parsed, list) and all(isinstance(row, dict) for row in parsed):
        return rows(shown)
    return shown


def test_nothing_after_a_double_dash_is_an_option(ws: Path, cli: Callable[..., Result]) -> None:
    searched = cli("c", "grep", "--", "-w")
    assert (searched.code, searched.stdout, searched.stderr) == (1, "", "")


def rows(shown: str) -> list[dict[str, object]]:
    """The tree's rows without their clock-dependent column."""
    return [{k: v for k, v in row.items() if k != "elapsed"} for row in json.loads(shown)]


def test_global_options_work_on_either_side(ws: Path, cli: Callable[..., Result]) -> None:
    created = cli("c", "new", "alpha", "--no-activate")
    assert created.code == 0, created.stderr
    assert cli("c", "new", "alpha/beta", "--no-activate").code == 0
    before = cli("--format", "json", "tree")
    after = cli("tree", "--format", "json")
    assert before.code == after.code == 0, before.stderr
    assert rows(before.stdout) == rows(after.stdout)
    ids = {row["id"] for row in json.loads(before.stdout)}
    assert {"alpha", "alpha/beta"} <= ids
    scoped = cli("--root-id", "alpha", "tree", "--format", "json")
    assert scoped.code == 0, scoped.stderr
    assert [row["id"] for row in json.loads(scoped.stdout)] == ["alpha/beta"]
    elsewhere = cli("tree", "--format", "json", "-w", str(ws), cwd=ws.parent)
    assert elsewhere.code == 0, elsewhere.stderr
    assert rows(elsewhere.stdout) == rows(after.stdout)
    layered = cli("tree", "--cfg", "daemon.max_agents=2")
    assert layered.code == 0, layered.stderr


def test_a_global_option_a_command_does_not_take_is_refused(
    ws: Path, cli: Callable[..., Result]
) -> None:
    refused = cli("--format", "json", "init")
    assert refused.code == 2
    assert "--format" in refused.stderr
