"""Fork, status reports, jp_await, mail that continues, and kill: end to end."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jpfs import api
from jpfs.core import locks, tree
from jpfs.core.conversation import Conversation
from jpfs.core.state import State
from jpfs.core.workspace import Workspace, open_workspace
from jpfs.errors import Cancelled, LimitError, NotFoundError, ScopeError
from jpfs.services.conversations import mailfilter, reports
from jpfs.services.conversations.lifecycle import new_conversation
from jpfs.services.run import background, control
from jpfs.services.views.history import parse_trailers
from tests.conftest import Result, no_thread_leak, rgit, wait_until, write_profile
from tests.messages_server import (
    conversation_of,
    last_user_text,
    text_reply,
    tool_results,
    tool_use_reply,
)
from tests.runners import query

LEAD = """
model = "claude-lead"
provider = "anthropic"
[system]
role = "You are the LEAD."
[tools]
allow = ["fork", "kill", "jp_await", "mail_send", "mail_check", "mail_read", "mail_filter"]
[limits]
max_children = 3
"""

SLOW = """
model = "m"
provider = "script"
[tools]
allow = ["fork", "kill", "jp_await", "mail_send", "wait"]
[[tools.command]]
name = "wait"
description = "Wait a long time."
program = "sh"
args = ["-c", "echo $$ > cmd.pid; exec sleep 30"]
timeout = 60
[[script.turns]]
when = "slow"
delay = 30
text = "never"
[[script.turns]]
when = "command"
tool_calls = [{ name = "wait", input = {} }]
[[script.turns]]
when = "command"
text = "never"
[[script.turns]]
text = "quick: {input}"
"""


def trailer_groups(repo: Path) -> list[dict[str, str]]:
    out = []
    for sha in rgit(repo, "rev-list", "HEAD").split():
        message = rgit(repo, "log", "-1", "--format=%B", sha)
        parsed = subprocess.run(
            ["git", "interpret-trailers", "--parse"], input=message, text=True,
            capture_output=True, check=True,
        ).stdout  # fmt: skip
        out.extend(parse_trailers(parsed))
    return out


def test_fork_three_gather_continue_one_kill_another(ws: Path, api_env) -> None:  # type: ignore[no-untyped-def]
    write_profile(ws, "lead", LEAD, allowed=True)
    w = open_workspace(ws)
    new_conversation(w, "lead", agent="lead")
    children: list[str] = []
    plan: list[str] = []

    def lead(request: dict[str, Any]) -> Any:
        results = tool_results(request)
        if not results:
            return tool_use_reply(
                *[("fork", {"prompt": f"task {n}"}) for n in "ABC"], text="Fanning out."
            )
        if len(results) == 3:
            children.extend(json.loads(r["content"])["conversation_id"] for r in results)
            return tool_use_reply(("jp_await", {"ids": children, "timeout": 30}))
        if len(results) == 4:
            gathered = json.loads(results[-1]["content"])
            a = next(g for g in gathered if g["summary"] == "did task A")
            b = next(g for g in gathered if g["summary"] == "did task B")
            plan.extend([a["conversation_id"], b["conversation_id"]])
            return tool_use_reply(
                ("mail_send", {"to": plan[0], "subject": "more", "body": "go on"})
            )
        if len(results) == 5:
            return tool_use_reply(("kill", {"id": plan[1]}))
        return text_reply("LEAD DONE")

    def child(request: dict[str, Any]) -> Any:
        # The child sees the parent's context: its task, its fork turn (text only).
        msgs = request["messages"]
        assert [m["role"] for m in msgs[:3]] == ["user", "assistant", "user"]
        assert "start" in json.dumps(msgs[0]) and "Fanning out." in json.dumps(msgs[1])
        assert "tool_use" not in json.dumps(msgs)
        text = last_user_text(request)
        return text_reply(
            "did " + (text if text.startswith("task") else "more: " + text.split()[-2])
        )

    api_env.responder = lambda req: (lead if conversation_of(req) == "lead" else child)(req)
    with no_thread_leak():
        result = query(w, "start", conv_id="lead")
        assert result.state is State.IDLE and result.text.strip() == "LEAD DONE"
        by_task = {Conversation(w.conv_root, c).read("task.md"): c for c in children}
        a, b, c = (by_task[f"task {n}\n"] for n in "ABC")
        conv_a = Conversation(w.conv_root, a)
        # A continues in the background with the mail as its next input.
        wait_until(lambda: len(conv_a.events()) == 6 and conv_a.read("result.md"), timeout=15)
        wait_until(lambda: len(mailfilter.select(w, "lead", sender=a, kind="status")) == 2)

    assert conv_a.events()[-1].body.strip() == "did more: go"
    assert Conversation(w.conv_root, b).meta()["status"] == "killed"
    assert Conversation(w.conv_root, c).meta()["status"] == "active"
    states = [str(tree.state_of(Conversation(w.conv_root, i))) for i in (a, b, c)]
    assert states == ["idle", "killed", "idle"]
    # jp_await read the three first reports; A's second one waits, unread.
    unread = mailfilter.select(w, "lead", kind="status", unread=True)
    assert [m.sender for m in unread] == [a]
    assert json.loads(unread[0].body)["summary"] == "did more: go"
    # The lead's tool results name every conversation as conversation_id.
    tools = [e for e in Conversation(w.conv_root, "lead").events() if e.role == "tool"]
    assert all(not e.meta["is_error"] for e in tools)
    assert {
        json.loads(t.body)["conversation_id"] for t in tools if t.meta["tool_name"] == "fork"
    } == {a, b, c}
    # Every step is a commit with the stepping conversation's trailers (a run commits
    # only its own files, so a parent's commits never swallow a child's steps).
    events = [(t.get("Jpfs-Conversation"), t.get("Jpfs-Event")) for t in trailer_groups(ws)]
    for cid in (a, b, c):
        assert (cid, "fork") in events and (cid, "assistant") in events
        assert (cid, "result") in events
    assert events.count(("lead", "status")) == 4 and events.count((a, "result")) == 2
    assert (a, "mail") in events and (a, "input") in events and (b, "kill") in events
    assert ("lead", "mail-read") in events and events.count(("lead", "tool")) == 6
    assert rgit(ws, "status", "--porcelain", "--", ".") == ""
    forked = Conversation(w.conv_root, a).meta()
    assert forked["forked_from"] == "lead@2" and forked["agent"] == "lead"


def slow_workspace(ws: Path, **cfg: Any) -> Workspace:
    from jpfs.cli.main import main

    write_profile(ws, "slow", SLOW, allowed=True)
    # It runs a local program (a command tool): trusted by the user, as `jpfs trust` does.
    assert main(["-w", str(ws), "trust", "slow"]) == 0
    w = open_workspace(ws, [f"{k}={v}" for k, v in cfg.items()])
    new_conversation(w, "p", agent="slow")
    return w


def test_kill_during_a_slow_provider_call_takes_effect_within_a_second(ws: Path) -> None:
    w = slow_workspace(ws)
    runner = api.runner(w)
    states: list[State | None] = []
    with no_thread_leak():
        child = control.fork(w, "p", "be slow", runner=runner, start_run=False)
        thread = threading.Thread(
            target=lambda: states.append(background.run_background(runner, child))
        )
        thread.start()
        wait_until(lambda: locks.is_locked(w.local_dir, child), message="the child to run")
        conv = Conversation(w.conv_root, child)
        # The first user event is committed; the next step is the (30 s) model turn.
        wait_until(lambda: [e.role for e in conv.events()] == ["user"])
        wait_until(lambda: f"jpfs({child}): input" in rgit(ws, "log", "-5", "--format=%s"))
        started = time.monotonic()
        assert control.kill(w, child) == [child]
        thread.join(5)
        elapsed = time.monotonic() - started
    assert elapsed < 3.0 and states == [State.KILLED]  # not the 30 s turn (room for load)
    assert Conversation(w.conv_root, child).meta()["status"] == "killed"
    assert not locks.is_locked(w.local_dir, child)
    last = trailer_groups(ws)[0]
    assert last["Jpfs-Conversation"] == child and last["Jpfs-Event"] == "kill"
    assert rgit(ws, "log", "-1", "--format=%s") == f"jpfs({child}): kill by human\n"
    # Killed stays killed: no resume by query, by mail or by a new run.
    from jpfs.errors import StateError

    with pytest.raises(StateError, match="killed"):
        query(w, "again", conv_id=child)
    assert control.send(w, child, "s", "again")[1] is False
    assert api.runner(w).run(child) is State.KILLED
    assert control.kill(w, child) == []  # already killed: nothing to do


def test_kill_from_another_process_and_of_a_running_command(
    ws: Path, cli: Callable[..., Result]
) -> None:
    w = slow_workspace(ws)
    # `jpfs fork` runs the child in a detached process; `jpfs kill` (this process) stops it.
    forked = cli("fork", "p", "--prompt", "run the command")
    assert forked.code == 0, forked.stderr
    child = forked.stdout.strip()
    pidfile = ws / "cmd.pid"
    wait_until(
        lambda: pidfile.exists() and pidfile.read_text().strip(), timeout=20, message="the command"
    )
    pid = int(pidfile.read_text())
    assert cli("kill", child).stdout == f"{child}\n"

    def gone() -> bool:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                return fh.read().split()[2] == "Z"
        except FileNotFoundError:
            return True

    wait_until(gone, timeout=5, message="the command's process to end")
    # Bounded by the deadlines above, not by a measured time: speed belongs in bench/.
    wait_until(lambda: not locks.is_locked(w.local_dir, child), timeout=5)
    conv = Conversation(w.conv_root, child)
    assert conv.meta()["status"] == "killed"
    tool = conv.events()[-1]
    assert tool.role == "tool" and tool.meta["is_error"] and "cancelled" in tool.body


def test_cascade_and_scope_of_kill(ws: Path, cli: Callable[..., Result]) -> None:
    w = slow_workspace(ws)
    for cid in ("p/a", "p/a/x", "p/b", "q"):
        new_conversation(w, cid, agent="slow")
    with pytest.raises(ScopeError):
        control.kill(w, "p/b", by="p/a")  # a sibling
    with pytest.raises(ScopeError):
        control.kill(w, "p", by="p/a")  # its parent
    with pytest.raises(ScopeError):
        control.kill(w, "p/a", by="p/a")  # itself
    with pytest.raises(NotFoundError):
        control.kill(w, "p/a/nope", by="p")
    unknown = cli("kill", "nope")
    assert unknown.code == 1 and unknown.stderr.startswith("jpfs: error: no conversation 'nope'")
    assert control.kill(w, "p/a", by="p", cascade=True) == ["p/a", "p/a/x"]
    statuses = {c: Conversation(w.conv_root, c).status for c in ("p", "p/a", "p/a/x", "p/b", "q")}
    assert statuses == {
        "p": "active",
        "p/a": "killed",
        "p/a/x": "killed",
        "p/b": "active",
        "q": "active",
    }


def test_limits_are_clear_errors_not_hangs(ws: Path) -> None:
    write_profile(
        ws,
        "slow",
        SLOW.replace("allow = [", 'allow = ["jp_await", ', 1)
        + "[limits]\nmax_children = 1\nmax_depth = 2\n",
        allowed=True,
    )
    w = open_workspace(ws)
    new_conversation(w, "p", agent="slow")
    first = control.fork(w, "p", None, by="p")
    with pytest.raises(LimitError, match="max_children reached"):
        control.fork(w, "p", "x", by="p")
    with pytest.raises(LimitError, match="max_depth reached"):
        control.fork(w, first, None, by=first)
    with pytest.raises(ScopeError, match="only itself"):
        control.fork(w, first, None, by="p")
    # max_agents: the workspace's limit on running agents, counted by their run locks.
    w1 = open_workspace(ws, ["daemon.max_agents=1"])
    new_conversation(w1, "r", agent="slow")
    with (
        locks.conversation_lock(w1.local_dir, "r"),
        pytest.raises(LimitError, match="max_agents reached: 1 agents are running"),
    ):
        control.fork(w1, "r", "go", by="r")
    # A human may exceed the profile's child limits; a fork without prompt starts nothing.
    assert control.fork(w, "p", None)


def test_tools_return_errors_as_one_line_tool_errors(ws: Path) -> None:
    write_profile(ws, "slow", SLOW + "[limits]\nmax_children = 0\n", allowed=True)
    w = open_workspace(ws)
    conv = new_conversation(w, "p", agent="slow", task="go")
    runner = api.runner(w)
    tools = runner.tools_for(conv)
    ctx = runner.tool_context(conv)
    for name, args, needle in [
        ("fork", {"prompt": "x"}, "max_children reached"),
        ("kill", {"id": "p"}, "outside the allowed subtree"),
        ("mail_send", {"to": "q", "subject": "s", "body": "b"}, "neither your parent"),
        ("jp_await", {"ids": ["p/none"]}, "no conversation 'p/none'"),
    ]:
        text, is_error = runner.call_tool(tools, ctx, {"id": "1", "name": name, "input": args})
        assert is_error and needle in text and "\n" not in text, (name, text)


def test_jp_await_times_out_and_is_cancelled_by_a_kill(ws: Path) -> None:
    w = slow_workspace(ws)
    runner = api.runner(w)
    with no_thread_leak():
        child = control.fork(w, "p", "be slow", by=None, runner=runner)
        (pending,) = reports.wait_settled(w, [child], by="p", timeout=0.1)
        assert pending["pending"] is True and pending["conversation_id"] == child
        cancel = threading.Event()
        cancel.set()
        with pytest.raises(Cancelled):
            reports.wait_settled(w, [child], by="p", timeout=10, cancel=cancel)
        control.kill(w, child)
        (killed,) = reports.wait_settled(w, [child], by="p", timeout=5)
        wait_until(lambda: not locks.is_locked(w.local_dir, child))
    assert killed["status"] == "killed"
    assert reports.wait_settled(w, [], by="p", timeout=0) == []  # killed children are skipped


def test_cli_fork_without_prompt_is_idle_and_capture_starts_a_child(
    ws: Path, cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    w = slow_workspace(ws)
    assert cli("query", "--id", "p", "hello").code == 0
    idle = cli("fork", "p").stdout.strip()
    conv = Conversation(w.conv_root, idle)
    assert tree.state_of(conv) is State.IDLE
    assert [e.body.strip() for e in conv.events()] == ["hello", "quick: hello"]
    assert not mailfilter.select(w, "p")  # never ran, never reported
    # capture: the editor composes the task; the parent's model never sees it.
    editor = tmp_path / "editor.sh"
    editor.write_text('#!/bin/sh\nprintf "compose this\\n" >> "$1"\n')
    editor.chmod(0o755)
    monkeypatch.setenv("EDITOR", str(editor))
    captured = cli("capture", "p")
    assert captured.code == 0, captured.stderr
    child = Conversation(w.conv_root, captured.stdout.strip())
    wait_until(lambda: child.read("result.md"), timeout=20, message="the captured child to run")
    assert child.events()[-1].body.strip() == "quick: compose this"
    assert "<!--" not in child.events()[-2].body
    assert len(Conversation(w.conv_root, "p").events()) == 2
    monkeypatch.delenv("EDITOR")
    empty = cli("capture", "p", stdin="  \n")
    assert empty.code == 1 and "nothing created" in empty.stderr
    piped = cli("capture", "p", "--no-start", stdin="from stdin")
    assert Conversation(w.conv_root, piped.stdout.strip()).events()[-1].body == "from stdin\n"


def test_daemon_stop_cancels_the_run_instead_of_killing_it(ws: Path) -> None:
    w = slow_workspace(ws)
    runner = api.runner(w)
    child = control.fork(w, "p", "be slow", runner=runner, start_run=False)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            runner.run(child)
        except Cancelled as exc:
            errors.append(exc)

    with no_thread_leak():
        thread = threading.Thread(target=run)
        thread.start()
        wait_until(lambda: locks.is_locked(w.local_dir, child))
        runner.cancel.set()
        thread.join(5)
    assert errors and Conversation(w.conv_root, child).status == "active"
