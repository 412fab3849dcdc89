"""A key pasted into a task never reaches the record, whichever way the conversation is
made: every way in creates through one factory
(:mod:`jpfs.services.conversations.creation`), which redacts the task, the title and
what ``conversation.toml`` keeps of it (a batch's tasks).

One busy daemon serves the workspace while each way is walked with a key in its task:
the CLI (``query``, ``c new --title``, ``c fork --title``, batch ``onboard``), an
agent's tools (``jp_query``, ``fork``), an MCP client's ``jp_query``, and the library
(``onboard`` with tasks, ``reply``, ``call`` of a handle and of an agent, ``spawn``,
``fork_tasks``). Then no commit of the record branch and no file under
``conversations/`` holds the key, and each way left its marker.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path

import anyio

import jpfs
from jpfs import api
from jpfs.core.workspace import open_workspace
from tests.conftest import (
    Result,
    allow_agents,
    git,
    jpfs_subprocess,
    rgit,
    running_daemon,
    wait_until,
)
from tests.hostile.conftest import busy, start_conversation, status
from tests.mcp.test_mcp import call, serve
from tests.messages_server import (
    JsonDict,
    MessagesServer,
    Response,
    Router,
    last_user_text,
    text_reply,
    tool_results,
    tool_use_reply,
)

# A fake key in the published format, built here so that this file holds none verbatim.
KEY = "sk-ant-api03-" + "Zq8x" * 23 + "-AAAA"
MARK = "[redacted:anthropic-key]"

WORKER = """
model = "m"
provider = "script"
[onboarding]
enabled = false
[[script.turns]]
text = "WORKED ON: {input}"
"""
ASKER = """
model = "m"
provider = "script"
[onboarding]
enabled = true
max_rounds = 2
[[script.onboarding]]
questions = ["Which database?"]
[[script.turns]]
text = "WORKED ON: {input}"
"""
CALLER = """
model = "claude-caller"
provider = "anthropic"
[system]
role = "You are CALLER."
[onboarding]
enabled = false
[tools]
allow = ["jp_query", "fork"]
agents = ["worker"]
"""


def caller_model(request: JsonDict) -> Response:
    """The calling agent pastes the key into a sub-agent's task and a fork's prompt."""
    if tool_results(request) or "tool-fork" in last_user_text(request):
        return text_reply("done")
    return tool_use_reply(
        ("jp_query", {"config": "worker", "query": f"tool-query: {KEY}"}),
        ("fork", {"prompt": f"tool-fork: {KEY}"}),
    )


def settled(ws: Path) -> bool:
    """Nothing runs or waits in the daemon, and no conversation is still to act."""
    now = status(ws)
    if now["agents"] or now["queue"]:
        return False
    rows = json.loads(jpfs_subprocess("tree", "--all", "--format", "json", cwd=ws).stdout)
    return not [r for r in rows if r["state"] in ("running", "pending")]


def state_of(ws: Path, conv_id: str) -> str:
    rows = json.loads(jpfs_subprocess("tree", "--all", "--format", "json", cwd=ws).stdout)
    return next(str(r["state"]) for r in rows if r["id"] == conv_id)


def walk_the_cli(ws: Path, cli: Callable[..., Result], tmp_path: Path) -> None:
    done = cli("query", "--new", "--agent", "worker", "--non-interactive", f"cli-query: {KEY}")
    assert done.code == 0, done.stderr
    assert MARK in done.stdout and KEY not in done.stdout
    made = cli(
        "c", "new", "titled", "--no-activate", "--agent", "worker", "--title", f"cli-new: {KEY}"
    )
    assert made.code == 0, made.stderr
    forked = cli("c", "fork", "titled", "--title", f"cli-fork: {KEY}")
    assert forked.code == 0, forked.stderr
    tasks = tmp_path / "tasks.md"
    tasks.write_text(f"## cli-batch-1: {KEY}\n\n## cli-batch-2: {KEY}\n", encoding="utf-8")
    asked = cli("onboard", "asker", "--tasks", str(tasks))
    assert asked.code == 4, asked.stderr
    template = asked.stdout.split('"')[1]
    assert cli("answer", template, f"cli-answer: {KEY}").code == 0
    # The daemon takes the answers up (a second onboarding round): once it is ready,
    # `onboard --id` forks the children, as the user would after a look at `jpfs tree`.
    wait_until(lambda: state_of(ws, template) == "idle", timeout=30, message="ready")
    batch = cli("onboard", "--id", template)
    assert batch.code == 0, batch.stderr
    assert KEY not in batch.stdout


def walk_the_tools(cli: Callable[..., Result]) -> None:
    done = cli("query", "--new", "--agent", "caller", "--non-interactive", "delegate")
    assert done.code == 0, done.stderr


def walk_mcp(ws: Path, tmp_path: Path) -> None:
    async def scenario() -> None:
        async with serve(ws, tmp_path / "mcp.err", "--agent", "worker") as session:
            text, is_error = await call(
                session, "jp_query", config="worker", query=f"mcp-query: {KEY}"
            )
            assert not is_error, text
            assert KEY not in text

    anyio.run(scenario)


def walk_the_library(ws: Path) -> None:
    handle = jpfs.onboard(
        "asker",
        f"lib-onboard: {KEY}",
        workspace_dir=ws,
        tasks=[f"lib-batch-1: {KEY}", f"lib-batch-2: {KEY}"],
    )
    handle = jpfs.reply(handle, f"lib-reply: {KEY}", workspace_dir=ws)
    assert handle.ready
    assert KEY not in jpfs.call(handle, f"lib-call: {KEY}", workspace_dir=ws)
    assert KEY not in jpfs.call("worker", f"lib-agent: {KEY}", workspace_dir=ws)
    w = open_workspace(ws)
    api.spawn(w, handle.conversation, f"lib-spawn: {KEY}")
    outcomes = api.fork_tasks(w, handle.conversation, api.runner(w))
    assert len(outcomes) == 2 and all(KEY not in o.text for o in outcomes)


def test_no_way_of_creating_a_conversation_records_a_pasted_key(
    hostile_ws: Path,
    gate: threading.Event,
    api_env: MessagesServer,
    cli: Callable[..., Result],
    tmp_path: Path,
) -> None:
    ws = hostile_ws
    api_env.responder = Router(api_env.responder).on_system("You are CALLER", caller_model)
    for name, text in (("worker", WORKER), ("asker", ASKER), ("caller", CALLER)):
        (ws / ".jpfs" / "agents" / f"{name}.toml").write_text(text, encoding="utf-8")
    allow_agents(ws, "worker", "asker", "caller")
    # Room for the fork beside the busy runs and the caller's own (the tool counts them).
    assert cli("config", "set", "daemon.max_agents", "8").code == 0
    git(ws, "add", "-A")
    git(ws, "commit", "-q", "-m", "script agents")
    with running_daemon(ws):
        busy(ws)
        walk_the_cli(ws, cli, tmp_path)
        walk_the_tools(cli)
        walk_mcp(ws, tmp_path)
        walk_the_library(ws)
        gate.set()
        wait_until(lambda: settled(ws), timeout=60, message="every run to end")
    history = rgit(ws, "log", "-p", "--format=%B", "jpfs-record")
    assert KEY not in history
    files = [p for p in (ws / "conversations").rglob("*") if p.is_file() and ".git" not in p.parts]
    assert not [p for p in files if KEY.encode() in p.read_bytes()]
    titles = "\n".join(
        p.read_text(encoding="utf-8") for p in (ws / "conversations").rglob("conversation.toml")
    )
    tasks = "\n".join(
        p.read_text(encoding="utf-8") for p in (ws / "conversations").rglob("task.md")
    )
    for way in (
        "cli-query", "cli-new", "cli-fork", "cli-batch-1", "cli-batch-2", "tool-query",
        "tool-fork", "mcp-query", "lib-onboard", "lib-call", "lib-agent", "lib-spawn",
        "lib-batch-1", "lib-batch-2",
    ):  # fmt: skip
        assert f"{way}: {MARK}" in titles + tasks, way
    for way in ("cli-query", "cli-new", "cli-fork", "tool-query", "tool-fork", "mcp-query"):
        assert f'title = "{way}: {MARK}"' in titles, way


def test_a_hand_written_task_gets_a_redacted_title(
    hostile_ws: Path, gate: threading.Event, cli: Callable[..., Result]
) -> None:
    """A person's own task.md is theirs, committed as written (a push of it is refused:
    protocol/secrets.md); the title jpfs takes from it is jpfs's writing, redacted."""
    ws = hostile_ws
    with running_daemon(ws):
        conv = start_conversation(ws, "by-hand", f"Use {KEY} to log in.\n")
        wait_until(lambda: (conv / "result.md").exists(), timeout=30, message="its run")
        meta = (conv / "conversation.toml").read_text(encoding="utf-8")
        assert f'title = "Use {MARK} to log in."' in meta
        gate.set()
