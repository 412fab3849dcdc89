"""``jpfs tree`` and ``jpfs top``: what each conversation is doing, from files and locks."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from jpfs.core import locks
from jpfs.core.workspace import open_workspace
from jpfs.services import lifecycle
from tests.conftest import Result
from tests.services.test_daemon_helpers import setup_workspace


def make_tree(ws: Path, cli: Callable[..., Result]) -> dict[str, str]:
    setup_workspace(ws, default_agent="lead")
    waiting = cli("query", "--new", "--agent", "lead", "--non-interactive", "Review it.")
    assert waiting.code == 4, waiting.stderr
    done = cli("query", "--new", "--agent", "helper", "--no-activate", "Say hello.")
    assert done.code == 0, done.stderr
    space = open_workspace(ws)
    lifecycle.new_conversation(space, "pend", agent="helper", task="Not run yet.")
    lifecycle.new_conversation(space, "secret", agent="helper", hidden=True)
    broken = ws / "conversations" / "broken"
    broken.mkdir()
    (broken / "conversation.toml").write_text('agent = "x\n')
    (broken / "task.md").write_text("x\n")

    def id_of(result: Result) -> str:
        return result.stderr.split("conversation ")[-1].split()[0]

    return {"waiting": waiting.stdout.split('"')[1], "idle": id_of(done)}


def test_tree_shows_state_agent_model_tokens_and_last_line(
    ws: Path, cli: Callable[..., Result]
) -> None:
    ids = make_tree(ws, cli)
    result = cli("tree", "--format", "json")
    assert result.code == 0, result.stderr
    rows = {r["id"]: r for r in json.loads(result.stdout)}
    assert set(rows) == {ids["waiting"], ids["idle"], "pend", "broken"}  # hidden is hidden

    waiting = rows[ids["waiting"]]
    assert (waiting["state"], waiting["agent"], waiting["model"]) == (
        "waiting", "lead", "script-lead",
    )  # fmt: skip
    assert waiting["last"] == "1. Which part of the code matters?"
    idle = rows[ids["idle"]]
    assert idle["state"] == "idle" and idle["tokens"] > 0
    assert idle["last"] == "Helper says hello."
    assert rows["pend"]["state"] == "pending"  # the agent must act, nobody runs it
    assert rows["broken"]["state"] == "broken" and "malformed TOML" in rows["broken"]["last"]

    # A held run lock is a running agent, whoever holds it.
    with locks.conversation_lock(ws / ".jpfs" / "local", "pend"):
        running = {r["id"]: r for r in json.loads(cli("tree", "--format", "json").stdout)}
    assert running["pend"]["state"] == "running" and running["pend"]["elapsed"] < 60

    everything = json.loads(cli("tree", "--all", "--format", "json").stdout)
    assert "secret" in {r["id"] for r in everything}


def test_tree_text_and_top_frames(ws: Path, cli: Callable[..., Result]) -> None:
    ids = make_tree(ws, cli)
    text = cli("tree")
    assert text.code == 0
    lines = text.stdout.splitlines()
    assert lines[0].split() == [
        "ID", "STATE", "AGENT", "MODEL", "TIME", "TOKENS", "COST", "SUBTREE", "LAST",
    ]  # fmt: skip
    assert lines[-1].startswith("total: ")
    line = next(ln for ln in lines if ln.startswith(ids["idle"]))
    assert "idle" in line and "helper" in line and line.endswith("Helper says hello.")

    top = cli("top", "--count", "2", "--interval", "0.01")
    assert top.code == 0
    assert top.stdout.count("daemon: not running") == 2  # two frames, each with a header
    assert top.stdout.count(ids["waiting"]) == 2

    below = cli("tree", ids["waiting"])
    assert below.code == 0 and "(no conversations)" in below.stdout


def test_a_daemon_run_shows_what_it_is_doing_live(ws: Path) -> None:
    from tests.conftest import jpfs_subprocess, running_daemon, wait_until

    setup_workspace(ws, default_agent="helper", delay=3.0)
    with running_daemon(ws):
        conv = ws / "conversations" / "slow"
        conv.mkdir()
        (conv / "task.md").write_text("Take your time.\n", encoding="utf-8")

        def running_row() -> dict[str, object] | None:
            shown = jpfs_subprocess("tree", "--format", "json", cwd=ws)
            rows = [r for r in json.loads(shown.stdout) if r["id"] == "slow"]
            running = rows and rows[0]["state"] == "running" and rows[0]["last"]
            return rows[0] if running else None

        # The daemon publishes its runs' notes within a quarter second of a change.
        row = wait_until(running_row, timeout=20, message="the run's note in the tree")
        assert isinstance(row, dict) and row["last"] == "model turn (script-helper)"
        assert not (conv / "result.md").exists()  # shown while it ran, not after
        wait_until((conv / "result.md").exists, timeout=30, message="the result")
