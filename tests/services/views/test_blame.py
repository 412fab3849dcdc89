"""Provenance end to end: scripted branch agents edit a file, ``jpfs merge`` brings it
in, and ``jpfs blame`` (text, JSON, ``--explain``), the ``jp_blame`` tool and the MCP
server name the writer of each line. What git does to the commits afterwards:
test_blame_survival.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from jpfs.errors import JpfsError
from jpfs.services.views import provenance
from tests.conftest import Result, git, write_profile
from tests.services.forks.test_branches import tool_call
from tests.services.views.blame_scenario import (
    add_project,
    assert_written_by,
    blame_json,
    child_of,
    run,
)

# Asks one onboarding question before it edits shared.txt.
ASKER = """
model = "script-asker"
provider = "script"
workspace = "branch"
[onboarding]
enabled = true
[tools]
allow = ["fs_modify_file"]
write = ["**"]
[[script.onboarding]]
questions = ["Which line of shared.txt?"]
assumptions = ["the file stays three lines"]
[[script.turns]]
text = "rewriting the line I was told"
tool_calls = [{ name = "fs_modify_file", input = { path = "shared.txt", old = "line2", new = "asked" } }]
[[script.turns]]
text = "done"
"""


@pytest.fixture
def project(ws: Path) -> Path:
    write_profile(ws, "asker", ASKER, allowed=True)
    return add_project(ws)


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


def test_explain_shows_the_onboarding_questions_and_answers(
    project: Path, cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(project)
    asked = cli("query", "--new", "--agent", "asker", "--non-interactive", "Fix a line")
    assert asked.code == 4, asked.stderr  # waiting for the answer
    conv = asked.stdout.split('conversation_id="')[1].split('"')[0]
    answered = cli("answer", conv, "Line 2, nothing else.", "--run")
    assert answered.code == 0, answered.stderr
    assert cli("merge", conv).code == 0

    data = json.loads(cli("blame", "shared.txt", "--explain", "2", "--format", "json").stdout)
    assert data["conversation"] == conv and data["text"] == "asked"
    assert data["task_text"].strip() == "Fix a line"
    assert "1. Which line of shared.txt?" in data["questions"]
    assert "the file stays three lines" in data["questions"]
    assert "Line 2, nothing else." in data["answers"]
    assert data["call"] == {
        "name": "fs_modify_file",
        "input": {"path": "shared.txt", "old": "line2", "new": "asked"},
    }
    text = cli("blame", "shared.txt", "--explain", "2").stdout
    questions = text.index("## questions\n\n")
    answers = text.index("## answers\n\n")
    assert text.index("## task\n\nFix a line") < questions < answers < text.index("## turn")
    assert "1. Which line of shared.txt?" in text[questions:answers]
    assert "Line 2, nothing else." in text[answers:]


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


# Start-up is most of what `jpfs blame` costs over `git blame` (bench/RESULTS.md): it
# reads trailer names and record files, and commits, prices and calls models never.
NOT_FOR_BLAME = (
    "jpfs.infra.committer", "jpfs.infra.providers", "jpfs.services.views.explanation",
    "jpfs.core.usage", "anthropic", "openai", "mcp",
)  # fmt: skip


def test_blame_imports_nothing_it_does_not_use(
    project: Path, cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(project)
    conv = run(cli, "impl", "alpha")
    assert cli("merge", conv).code == 0
    probe = (
        "import sys\nfrom jpfs.cli.main import main\n"
        "code = main(['blame', 'shared.txt', '--format', 'json'])\n"
        "print(code, *sorted(sys.modules), file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=project, capture_output=True, text=True, check=False
    )
    code, *loaded = done.stderr.split()
    assert code == "0" and json.loads(done.stdout)[1]["conversation"] == conv, done.stderr
    assert "jpfs.services.views.provenance" in loaded  # the probe sees what blame loads
    assert [m for m in loaded if m.startswith(NOT_FOR_BLAME)] == []


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
    from mcp import ClientSession, StdioServerParameters, stdio_client  # not at collection

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
