"""Provenance survives what users do with the agents' commits: a fast-forward, a
cherry-pick, a rebase (after a fast-forward and after a jpfs merge commit), a squash of
one conversation or of several, a clone that fetched the record, and nested forks
merged in turn (protocol/provenance.md, "What survives")."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from jpfs.services.views import provenance
from tests.conftest import Result, git, write_profile
from tests.services.forks.test_branches import tool_call
from tests.services.views.blame_scenario import (
    IMPL,
    add_project,
    assert_written_by,
    blame_json,
    child_of,
    run,
)


@pytest.fixture
def project(ws: Path) -> Path:
    return add_project(ws)


def upstream(project: Path, base: str) -> None:
    """Work the user's branch is later rebased onto: a commit on ``upstream`` from
    ``base``; ``main`` checked out again."""
    git(project, "checkout", "-q", "-b", "upstream", base)
    (project / "other.txt").write_text("upstream work\n", encoding="utf-8")
    git(project, "add", "other.txt")
    git(project, "commit", "-q", "-m", "upstream")
    git(project, "checkout", "-q", "main")


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
    upstream(project, base)
    git(project, "rebase", "-q", "upstream")
    assert git(project, "rev-parse", "HEAD").strip() != git(project, "rev-parse", branch).strip()
    assert_written_by(blame_json(cli, "shared.txt"), conv, project)

    # A squash merge: git quotes the squashed messages, trailers included.
    git(project, "checkout", "-q", "-b", "squashed", base)
    git(project, "merge", "-q", "--squash", branch)
    git(project, "commit", "-q", "--no-edit")
    assert_written_by(blame_json(cli, "shared.txt"), conv, project)


def test_blame_survives_a_rebase_after_a_jpfs_merge_commit(
    project: Path, cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(project)
    conv = run(cli, "impl", "alpha")
    base = git(project, "rev-parse", "HEAD").strip()
    assert cli("merge", conv).code == 0
    merged = git(project, "rev-parse", "HEAD").strip()
    assert git(project, "rev-list", "--parents", "-1", merged).split()[1:] == [
        base, git(project, "rev-parse", f"jpfs/{conv}/_").strip(),
    ]  # fmt: skip
    upstream(project, base)

    # A plain rebase drops the merge commit and replays the agent's edit commits.
    git(project, "rebase", "-q", "upstream")
    assert git(project, "log", "--merges", "--format=%H", "upstream..HEAD") == ""
    assert_written_by(blame_json(cli, "shared.txt"), conv, project)

    # --rebase-merges makes the merge again, with its message and Jpfs-Merged.
    git(project, "reset", "-q", "--hard", merged)
    git(project, "rebase", "-q", "--rebase-merges", "upstream")
    (remade,) = git(project, "log", "--merges", "--format=%H", "upstream..HEAD").split()
    assert remade != merged
    assert f"Jpfs-Merged: {conv}" in git(project, "log", "-1", "--format=%B", remade)
    assert_written_by(blame_json(cli, "shared.txt"), conv, project)


def test_a_squash_of_two_conversations_names_both_and_no_writer(
    project: Path, cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A second implementer that edits line4 (and its own notes): both branches squash
    # together without a conflict (git's merge takes adjacent lines for one change).
    (project / "shared.txt").write_text("line1\nline2\nline3\nline4\n", encoding="utf-8")
    git(project, "commit", "-q", "-am", "a fourth line")
    write_profile(
        project,
        "impl4",
        IMPL.replace('"line2"', '"line4"').replace("notes", "notes4"),
        allowed=True,
    )
    monkeypatch.chdir(project)
    alpha, beta = run(cli, "impl", "alpha"), run(cli, "impl4", "beta")
    git(project, "merge", "-q", "--squash", f"jpfs/{alpha}/_", f"jpfs/{beta}/_")
    git(project, "commit", "-q", "--no-edit")
    message = git(project, "log", "-1", "--format=%B")
    assert message.startswith("Squashed commit of the following:")

    rows = blame_json(cli, "shared.txt")
    assert [r["text"] for r in rows] == ["line1", "alpha", "line3", "beta"]
    squashed = git(project, "rev-parse", "HEAD").strip()
    for row in (rows[1], rows[3]):
        # protocol/provenance.md, "What survives": no single writer, both named.
        assert row["commit"] == squashed and row["conversation"] is None
        assert sorted(row["conversations"]) == sorted([alpha, beta])
        assert row["agent"] is None and row["task"] is None and row["event"] is None
    assert rows[0]["conversations"] == [] and rows[2]["conversation"] is None

    explained = cli("blame", "shared.txt", "--explain", "4")
    assert explained.code == 0, explained.stderr
    said = explained.stdout
    assert "not written by a jpfs agent" not in said
    assert f"written by a squash of conversations {', '.join(rows[3]['conversations'])}" in said
    assert '"What survives" in protocol/provenance.md' in said
    data = json.loads(cli("blame", "shared.txt", "--explain", "4", "--format", "json").stdout)
    assert data["conversation"] is None and sorted(data["conversations"]) == sorted([alpha, beta])
    assert data["task_text"] is None and data["call"] is None


def test_blame_in_a_clone_that_fetched_the_record(
    project: Path, cli: Callable[..., Result], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(project)
    conv = run(cli, "impl", "alpha")
    assert cli("merge", conv).code == 0
    # The project shares its jpfs configuration, as a team's repository does.
    git(project, "add", ".jpfs/config.toml", ".gitignore")
    git(project, "commit", "-q", "-m", "jpfs configuration")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(project), str(clone))
    assert git(clone, "branch", "--list", "jpfs-record") == ""
    assert git(clone, "rev-parse", "origin/jpfs-record").strip()
    assert not (clone / "conversations").exists()  # never `jpfs init`-ed: no record here
    rows = [r.to_json() for r in provenance.blame(clone, "jpfs-record", clone, "shared.txt")]
    assert_written_by(rows, conv, project)
    # The user in the clone: the command finds the events in origin/jpfs-record.
    in_clone = cli("blame", "shared.txt", "--format", "json", cwd=clone)
    assert in_clone.code == 0, in_clone.stderr
    assert_written_by(json.loads(in_clone.stdout), conv, project)
    explained = cli("blame", "shared.txt", "--explain", "2", cwd=clone)
    assert explained.code == 0, explained.stderr
    assert f"conversation {conv} (impl)" in explained.stdout
    assert "## task\n\nalpha" in explained.stdout and '"name": "fs_modify_file"' in explained.stdout


def merged_trailers(project: Path, commit: str) -> list[str]:
    return git(
        project, "log", "-1", "--format=%(trailers:key=Jpfs-Merged,valueonly)", commit
    ).split()


def test_a_nested_merge_names_every_conversation_and_blame_the_inner_writer(
    project: Path, cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(project)
    top = run(cli, "top", "go")
    outer = child_of(project, top)
    inner = child_of(project, outer)
    # The outer agent merges its child into its own branch, then the user merges it.
    assert tool_call(project, outer, "merge", {"id": inner}).startswith(f"merged {inner} ")
    assert merged_trailers(project, f"jpfs/{outer}/_") == [inner]
    assert cli("merge", outer).code == 0
    assert merged_trailers(project, "HEAD") == sorted([inner, outer])  # one each, once

    assert_written_by(blame_json(cli, "shared.txt"), inner, project, word="gamma")
    (own,) = blame_json(cli, "outer.txt")
    assert own["conversation"] == outer and own["agent"] == "outer"
    assert own["model"] == "script-outer" and own["task"] == "outer work"
    assert own["event"].startswith(f"{outer}/events/") and own["event"].endswith("-tool.md")
