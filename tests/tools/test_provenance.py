"""``jp_blame`` (jpfs.tools.provenance) on a real workspace: its arguments, what it
refuses, and the lines it shows a model. Blame itself is tested in
tests/services/views/test_blame.py; agents' lines and the scope of a caller's subtree
in its ``test_jp_blame_tool_is_scoped``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from jpfs.core.tool import ToolContext, call_tool, check_arguments
from jpfs.core.workspace import open_workspace
from jpfs.errors import JpfsError, ScopeError, ToolError
from jpfs.tools.provenance import MAX_LINES, TOOLS
from tests.conftest import git

BLAME = TOOLS["jp_blame"]


@pytest.fixture
def project(ws: Path) -> Path:
    """A work tree whose files a person committed: five lines, 450 lines, an empty file."""
    (ws / "notes.txt").write_text("".join(f"note {n}\n" for n in range(1, 6)), encoding="utf-8")
    (ws / "long.txt").write_text("".join(f"{n}\n" for n in range(1, 451)), encoding="utf-8")
    (ws / "empty.txt").write_text("", encoding="utf-8")
    git(ws, "add", "notes.txt", "long.txt", "empty.txt")
    git(ws, "commit", "-q", "-m", "files by a person")
    return ws


def ctx_of(root: Path) -> ToolContext:
    return ToolContext(root, "", root, workspace=open_workspace(root))


def blame(root: Path, **args: Any) -> str:
    return BLAME.run(ctx_of(root), check_arguments(BLAME, args))


def rows(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if not line.startswith("[")]


def test_a_persons_lines_name_no_conversation_and_no_time(project: Path) -> None:
    found = rows(blame(project, path="notes.txt"))
    assert [r["line"] for r in found] == [1, 2, 3, 4, 5]
    assert [r["text"] for r in found] == [f"note {n}" for n in range(1, 6)]
    for row in found:
        assert row["conversation"] is None and row["agent"] is None and row["event"] is None
        assert row["author"] == "Test User"
        assert "time" not in row  # a model has no use for it; it costs tokens


def test_start_and_end_pick_lines(project: Path) -> None:
    assert [r["line"] for r in rows(blame(project, path="notes.txt", start=2, end=3))] == [2, 3]
    # end alone starts at the first line
    assert [r["line"] for r in rows(blame(project, path="notes.txt", end=2))] == [1, 2]


def test_a_long_file_is_cut_at_max_lines_and_says_how_to_read_the_rest(project: Path) -> None:
    text = blame(project, path="long.txt")
    assert len(rows(text)) == MAX_LINES
    assert text.splitlines()[-1] == f"[truncated: {MAX_LINES} of 450 lines; pass start and end]"
    tail = rows(blame(project, path="long.txt", start=441))
    assert [r["text"] for r in tail] == [str(n) for n in range(441, 451)]


def test_an_empty_file_says_so(project: Path) -> None:
    assert blame(project, path="empty.txt") == "(empty file)"


def test_the_conversation_record_is_refused_with_the_tool_to_use(project: Path) -> None:
    record = open_workspace(project).conv_root_rel.strip("/")
    for path in (record, f"{record}/README.md"):
        with pytest.raises(ScopeError, match="jp_conversation_print"):
            blame(project, path=path)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ({}, "path"),
        ({"path": "notes.txt", "start": 0}, "start"),
        ({"path": "notes.txt", "rev": ""}, "rev"),
        ({"path": "notes.txt", "since": "x"}, "since"),
    ],
)
def test_arguments_are_checked_against_the_schema(args: dict[str, Any], said: str) -> None:
    with pytest.raises(ToolError, match=said):
        check_arguments(BLAME, args)


def test_paths_outside_the_work_tree_are_one_line_errors(project: Path) -> None:
    for path, said in (("../x", "'..'"), (".git/config", ".git"), ("missing.txt", "missing.txt")):
        text, is_error = call_tool(
            TOOLS, ctx_of(project), {"name": "jp_blame", "input": {"path": path}}
        )
        assert is_error and "\n" not in text and said in text, text
    with pytest.raises(JpfsError):
        blame(project, path="/etc/passwd")
