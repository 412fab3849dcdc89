"""Provenance end to end: scripted branch agents edit a file, real git moves the commits
around (jpfs merge, fast-forward, cherry-pick, rebase, squash, a clone), and
``jpfs blame``, the ``jp_blame`` tool and the MCP server name the writer of each line."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from jpfs.core.conversation import Conversation
from jpfs.core.workspace import open_workspace
from jpfs.errors import JpfsError
from jpfs.services.views import provenance
from tests.conftest import Result, git, write_profile
from tests.services.test_branches import tool_call

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


@pytest.fixture
def project(ws: Path) -> Path:
    (ws / "shared.txt").write_text("line1\nline2\nline3\n", encoding="utf-8")
    git(ws, "add", "shared.txt")
    git(ws, "commit", "-q", "-m", "add shared.txt")
    write_profile(ws, "impl", IMPL, allowed=True)
    write_profile(ws, "lead", LEAD, allowed=True)
    return ws


def run(cli: Callable[..., Result], agent: str, task: str) -> str:
    result = cli("query", "--new", "--agent", agent, "--non-interactive", task)
    assert result.code == 0, result.stderr
    return result.stderr.split("conversation ")[-1].split()[0]


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
    event = agent["event"]
    assert event.startswith(f"{conv_id}/events/") and event.endswith("-tool.md")
    ws = open_workspace(project)
    meta = Conversation(ws.conv_root, conv_id).events()
    turn = next(e for e in meta if e.role == "assistant" and e.tool_calls)
    call = next(c for c in turn.tool_calls if c["input"]["path"] == "shared.txt")
    tool_ev = next(e for e in meta if e.meta.get("tool_call_id") == call["id"])
    assert event == f"{conv_id}/events/{tool_ev.path.name}"
    assert agent["turn"] == f"{conv_id}/events/{turn.path.name}"


def test_blame_after_jpfs_merge_names_conversation_event_and_merge(
    project: Path, cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(project)
    conv = run(cli, "impl", "alpha")
    branch = f"jpfs/{conv}/_"
    body = git(project, "log", "-1", "--format=%B", branch)
    assert f"Jpfs-Event-Path: {conv}/events/" in body and "Jpfs-Record: " in body
    assert f"Jpfs-Turn: {conv}/events/" in body and "Jpfs-Model: script-impl" in body
    assert cli("merge", conv).code == 0
    assert f"Jpfs-Merged: {conv}" in git(project, "log", "-1", "--format=%B", "HEAD")

    assert_written_by(blame_json(cli, "shared.txt"), conv, project)
    text = cli("blame", "shared.txt").stdout.splitlines()
    assert f"({conv} " in text[1] and text[1].endswith(" 2) alpha")
    assert conv not in text[0]
    # -L and --rev, like git blame's.
    only = blame_json(cli, "shared.txt", "-L", "2,2")
    assert [r["line"] for r in only] == [2] and only[0]["conversation"] == conv
    before = blame_json(cli, "shared.txt", "--rev", "HEAD^1")
    assert all(r["conversation"] is None for r in before)

    # --explain: the task, the turn and its call, the model and the usage.
    explained = cli("blame", "shared.txt", "--explain", "2")
    assert explained.code == 0, explained.stderr
    out = explained.stdout
    assert f"conversation {conv} (impl)" in out and "model script-impl" in out
    assert "## task\n\nalpha" in out and "## turn\n\nediting" in out
    assert '"name": "fs_modify_file"' in out and "usage input " in out
    data = json.loads(cli("blame", "shared.txt", "--explain", "2", "--format", "json").stdout)
    assert data["call"]["input"]["path"] == "shared.txt" and data["task_text"].strip() == "alpha"
    assert data["usage"]["input_tokens"] >= 0
    human = cli("blame", "shared.txt", "--explain", "1").stdout
    assert "not written by a jpfs agent" in human


def test_blame_bad_input(
    project: Path, cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(project)
    missing = cli("blame", "nope.txt")
    assert missing.code == 1 and missing.stderr.strip().count("\n") == 0
    assert "nope.txt" in missing.stderr
    for bad in ("x", "3,1", "0,2", "1,y"):
        result = cli("blame", "shared.txt", "-L", bad)
        assert result.code == 2, (bad, result.stderr)
        assert "-L" in result.stderr


def test_blame_survives_fast_forward_cherry_pick_rebase_and_squash(
    project: Path, cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(project)
    conv = run(cli, "impl", "alpha")
    branch = f"jpfs/{conv}/_"
    base = git(project, "rev-parse", "HEAD").strip()

    git(project, "merge", "-q", "--ff-only", branch)  # a fast-forward, by the user
    assert_written_by(blame_json(cli, "shared.txt"), conv, project)

    git(project, "checkout", "-q", "-b", "picked", base)
    git(project, "cherry-pick", f"{branch}")  # trailers travel in the message
    assert_written_by(blame_json(cli, "shared.txt"), conv, project)

    # The user's branch is rebased after the merge: the commits are rewritten.
    git(project, "checkout", "-q", "-b", "upstream", base)
    (project / "other.txt").write_text("upstream work\n", encoding="utf-8")
    git(project, "add", "other.txt")
    git(project, "commit", "-q", "-m", "upstream")
    git(project, "checkout", "-q", "main")
    git(project, "rebase", "-q", "upstream")
    assert git(project, "rev-parse", "HEAD").strip() != git(project, "rev-parse", branch).strip()
    assert_written_by(blame_json(cli, "shared.txt"), conv, project)

    # A squash merge: git quotes the squashed messages, trailers included.
    git(project, "checkout", "-q", "-b", "squashed", base)
    git(project, "merge", "-q", "--squash", branch)
    git(project, "commit", "-q", "--no-edit")
    assert_written_by(blame_json(cli, "shared.txt"), conv, project)


def test_blame_in_a_clone_that_fetched_the_record(
    project: Path, cli: Callable[..., Result], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(project)
    conv = run(cli, "impl", "alpha")
    assert cli("merge", conv).code == 0
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(project), str(clone))
    assert git(clone, "branch", "--list", "jpfs-record") == ""
    assert git(clone, "rev-parse", "origin/jpfs-record").strip()
    rows = [r.to_json() for r in provenance.blame(clone, "jpfs-record", clone, "shared.txt")]
    assert_written_by(rows, conv, project)


def child_of(project: Path, parent: str) -> str:
    ws = open_workspace(project)
    (name,) = [p.name for p in (ws.conv_root / parent).iterdir() if (p / "task.md").is_file()]
    return f"{parent}/{name}"


def test_jp_blame_tool_is_scoped(
    project: Path, cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(project)
    lead = run(cli, "lead", "go")
    child = child_of(project, lead)
    assert cli("merge", child).code == 0
    # A top-level writer outside lead's subtree rewrites notes.txt (its edit of line2
    # finds no "line2" any more and fails; the write stands).
    other = run(cli, "impl", "beta")
    assert cli("merge", other).code == 0

    def blame(**args: Any) -> list[dict[str, Any]]:
        text = tool_call(project, lead, "jp_blame", args)
        return [json.loads(line) for line in text.splitlines()]

    (outside,) = blame(path="notes.txt")
    assert outside["conversation"] == provenance.OUTSIDE and outside["text"] == "note of beta"
    assert outside["agent"] is None and outside["task"] is None and outside["event"] is None
    mine = blame(path="shared.txt")[1]
    assert mine["conversation"] == child and mine["task"] == "alpha"
    assert mine["event"].startswith(f"{child}/events/")
    (earlier,) = blame(path="notes.txt", rev="HEAD^1")
    assert earlier["conversation"] == child and earlier["text"] == "note of alpha"
    # The person at the CLI sees everyone.
    assert blame_json(cli, "notes.txt")[0]["conversation"] == other
    for bad, why in (
        ({"path": "../x"}, r"'\.\.'"),
        ({"path": "conversations/x/task.md"}, "conversation record"),
        ({"path": "shared.txt", "rev": "jpfs-record"}, "not in the history"),
        ({"path": "shared.txt", "rev": "--output=/tmp/x"}, "may not start"),
    ):
        with pytest.raises(JpfsError, match=why):
            blame(**bad)


def test_jp_blame_through_mcp(
    project: Path, cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(project)
    lead = run(cli, "lead", "go")
    child = child_of(project, lead)
    assert cli("merge", child).code == 0
    other = run(cli, "impl", "beta")
    assert cli("merge", other).code == 0
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "jpfs", "-w", str(project), "mcp", "--root-id", lead, "--agent", "impl"],
        cwd=project,
        env=dict(os.environ),
    )

    async def scenario() -> tuple[list[str], str, bool]:
        with (tmp_path / "server.err").open("w", encoding="utf-8") as err:
            async with (
                stdio_client(params, errlog=err) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                names = [t.name for t in (await session.list_tools()).tools]
                result = await session.call_tool("jp_blame", {"path": "shared.txt"})
                text = "".join(getattr(c, "text", "") for c in result.content)
                bad = await session.call_tool("jp_blame", {"path": "nope.txt"})
                return names, text, bool(result.is_error) or not bad.is_error

    names, text, failed = anyio.run(scenario)
    assert "jp_blame" in names and not failed
    rows = [json.loads(line) for line in text.splitlines()]
    assert rows[1]["conversation"] == child and rows[1]["agent"] == "impl"
    assert rows[0]["conversation"] is None
    notes = tool_call(project, lead, "jp_blame", {"path": "notes.txt"})
    assert other not in notes
