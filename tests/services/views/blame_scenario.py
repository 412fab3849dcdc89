"""The provenance tests' scenario: a project whose ``shared.txt`` scripted branch agents
edit (``impl`` rewrites its line2 to its task), and the checks of what blame says about
the lines they wrote. Used by test_blame.py, test_blame_survival.py and test_docs.py
(protocol/provenance.md's examples)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jpfs.core.conversation import Conversation
from jpfs.core.workspace import open_workspace
from tests.conftest import Result, git, write_profile
from tests.services.forks.test_branches import OUTER, TOP  # a branch agent forking on its branch

IMPL = """
model = "script-impl"
provider = "script"
description = "edits shared.txt on its branch"
workspace = "branch"
[tools]
allow = ["fs_read_file", "fs_write_file", "fs_modify_file"]
write = ["**"]
[[script.turns]]
text = "editing"
tool_calls = [
  { name = "fs_write_file", input = { path = "notes.txt", content = "note of {task}\\n" } },
  { name = "fs_modify_file", input = { path = "shared.txt", old = "line2", new = "{task}" } },
]
[[script.turns]]
text = "changed shared.txt to {task}"
"""

LEAD = """
model = "script"
provider = "script"
[tools]
allow = ["jp_query", "merge", "jp_blame"]
agents = ["impl"]
[[script.turns]]
text = "one implementer"
tool_calls = [{ name = "jp_query", input = { config = "impl", query = "alpha" } }]
[[script.turns]]
text = "done"
"""


def add_project(ws: Path) -> Path:
    """``shared.txt`` committed by the user, and the scenario's profiles."""
    (ws / "shared.txt").write_text("line1\nline2\nline3\n", encoding="utf-8")
    git(ws, "add", "shared.txt")
    git(ws, "commit", "-q", "-m", "add shared.txt")
    for name, text in {"impl": IMPL, "lead": LEAD, "outer": OUTER, "top": TOP}.items():
        write_profile(ws, name, text, allowed=True)
    return ws


def conversation_in(stderr: str) -> str:
    """The conversation a non-interactive ``jpfs query`` ran (its last line names it)."""
    return stderr.split("conversation ")[-1].split()[0]


def run(cli: Callable[..., Result], agent: str, task: str) -> str:
    result = cli("query", "--new", "--agent", agent, "--non-interactive", task)
    assert result.code == 0, result.stderr
    return conversation_in(result.stderr)


def blame_json(cli: Callable[..., Result], *args: str) -> list[dict[str, Any]]:
    result = cli("blame", *args, "--format", "json")
    assert result.code == 0, result.stderr
    rows: list[dict[str, Any]] = json.loads(result.stdout)
    return rows


def assert_written_by(
    rows: list[dict[str, Any]], conv_id: str, project: Path, word: str = "alpha"
) -> None:
    assert [r["text"] for r in rows] == ["line1", word, "line3"]
    human, agent = rows[0], rows[1]
    assert human["conversation"] is None and human["event"] is None
    assert agent["conversation"] == conv_id
    assert agent["agent"] == "impl" and agent["model"] == "script-impl"
    assert agent["task"] == word
    # The tool call that wrote shared.txt, not the one that wrote notes.txt.
    assert (agent["event"], agent["turn"]) == event_that_wrote(project, conv_id, "shared.txt")


def event_that_wrote(project: Path, conv_id: str, path: str) -> tuple[str, str]:
    """The record paths of the tool event whose call wrote ``path`` and of its turn (the
    calls of one turn run concurrently: their events are numbered as they finish)."""
    ws = open_workspace(project)
    events = Conversation(ws.conv_root, conv_id).events()
    turn = next(e for e in events if e.role == "assistant" and e.tool_calls)
    call = next(c for c in turn.tool_calls if c["input"]["path"] == path)
    tool = next(e for e in events if e.meta.get("tool_call_id") == call["id"])
    return f"{conv_id}/events/{tool.path.name}", f"{conv_id}/events/{turn.path.name}"


def child_of(project: Path, parent: str) -> str:
    ws = open_workspace(project)
    (name,) = [p.name for p in (ws.conv_root / parent).iterdir() if (p / "task.md").is_file()]
    return f"{parent}/{name}"
