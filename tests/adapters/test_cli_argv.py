"""Global options on either side of the subcommand, as users write them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from jpfs.cli.argv import hoist_global_options
from tests.conftest import Result


@pytest.mark.parametrize(
    ("given", "parsed"),
    [
        (["mcp", "-w", "/r"], ["-w", "/r", "mcp"]),
        (["mcp", "--workspace=/r"], ["--workspace=/r", "mcp"]),
        (["c", "ls", "-w/r", "--cfg", "NONE"], ["-w/r", "--cfg", "NONE", "c", "ls"]),
        (["--format", "json", "tree"], ["tree", "--format", "json"]),
        (["--root-id=a", "c", "ls", "--tree"], ["c", "ls", "--tree", "--root-id=a"]),
        (["-w", "/r", "--format", "json", "mail", "send", "a", "--", "--format"],
         ["-w", "/r", "mail", "send", "a", "--format", "json", "--", "--format"]),
        # After the subcommand --format belongs to it: left where it is.
        (["tree", "--format", "json"], ["tree", "--format", "json"]),
        (["query", "--", "-w", "x"], ["query", "--", "-w", "x"]),
    ],
)  # fmt: skip
def test_global_options_are_moved_where_click_takes_them(
    given: list[str], parsed: list[str]
) -> None:
    assert hoist_global_options(given) == parsed


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
