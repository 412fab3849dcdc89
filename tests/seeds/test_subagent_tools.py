"""Seed 002, "Sub-Agent Tools": fork, kill, mail_send|check|read|delete|filter, capture
mode, and a child's lifecycle with its idle status message.

Agents are real jpfs agents on the anthropic provider (the SDK against the local
Messages API server); every tool call is the seed's, as JSON. The seed's slash commands
(a human's) are jpfs's CLI commands.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jpfs import api
from jpfs.core import tree
from jpfs.core.conversation import Conversation
from jpfs.core.state import State
from jpfs.core.workspace import Workspace, open_workspace
from jpfs.services.conversations import mailfilter, reports
from jpfs.services.conversations.lifecycle import new_conversation
from jpfs.services.run import control
from jpfs.tools.registry import catalog
from tests.conftest import Result, no_thread_leak, rgit, write_profile
from tests.messages_server import (
    error_reply,
    last_user_text,
    text_reply,
    tool_results,
    tool_use_reply,
)
from tests.runners import query
from tests.seeds.helpers import (
    PLACEHOLDER,
    all_text,
    by_turn,
    conversation_of,
    last_result,
    result_json,
)

Cli = Callable[..., Result]
SEED_TOOLS = ["fork", "kill", "mail_send", "mail_check", "mail_read", "mail_delete", "mail_filter"]

AGENT = """
model = "claude-agent"
provider = "anthropic"
description = "An agent with seed 002's internal tools."
[system]
role = "You are an agent with sub-agent tools."
[tools]
allow = ["fork", "kill", "mail_send", "mail_check", "mail_read", "mail_delete", "mail_filter",
         "jp_await"]
"""

# The seed's capture-mode example: the text typed between /capture and /fork.
CAPTURED = """Enumerate all the *.md files,
count their words and build
a summary table."""


@pytest.fixture
def agent_ws(ws: Path, api_env: Any) -> Workspace:
    write_profile(ws, "agent", AGENT, allowed=True)
    w = open_workspace(ws)
    new_conversation(w, "lead", agent="agent")
    return w


def route(parent: Callable[[dict[str, Any]], Any], child: Callable[[dict[str, Any]], Any]) -> Any:
    return lambda req: (parent if conversation_of(req) == "lead" else child)(req)


def of(api_env: Any, conv_id: str) -> list[dict[str, Any]]:
    return [b for b in api_env.bodies if conversation_of(b) == conv_id]


def test_child_lifecycle(agent_ws: Workspace, api_env: Any) -> None:
    """The seed: "Child Lifecycle": 1. fork(prompt: "do X"); 2. the child works; 3. it sends its
    parent {"status": "idle", "success": ..., "summary": ...}; 4. it idles; 5. the parent
    mail_send(uuid, "do more") to continue it, or kill(uuid) to terminate it."""
    child: list[str] = []

    def await_it(req: dict[str, Any]) -> Any:
        child.append(result_json(req)["conversation_id"])
        return tool_use_reply(("jp_await", {"ids": child}))

    parent = by_turn(
        tool_use_reply(("fork", {"prompt": "do X"})),  # fork(prompt: "do X")
        await_it,
        lambda req: tool_use_reply(("mail_send", {"to": child[0], "body": "do more"})),
        lambda req: tool_use_reply(("jp_await", {"ids": child})),
        lambda req: tool_use_reply(("kill", {"id": child[0]})),  # kill(uuid)
        text_reply("done with the child"),
    )

    def worker(req: dict[str, Any]) -> Any:
        return text_reply("did more" if "do more" in last_user_text(req) else "did X")

    api_env.responder = route(parent, worker)
    with no_thread_leak():
        done = query(agent_ws, "Start.", conv_id="lead")
    assert done.state is State.IDLE, done.text
    (cid,) = child
    lead = of(api_env, "lead")

    # 1. The child starts at once, with the parent's context plus the prompt; it is the
    # parent's child (its id names the parent), and no UI is involved.
    assert json.loads(last_result(lead[1])) == {
        "conversation_id": cid,
        "status": "running",
        "note": "it mails you a status message when it stops; gather with jp_await",
    }
    assert tree.walk(agent_ws.conv_root, "lead").__next__() == cid
    first = of(api_env, cid)[0]
    texts = all_text(first)
    assert "Start." in texts[0] and texts[-1].strip() == "do X"
    # The fork turn had no text: the child is shown no placeholder turn for it.
    assert PLACEHOLDER not in texts
    assert [m["role"] for m in first["messages"]] == ["user"]

    # 3. The structured status message, in the parent's inbox and through jp_await.
    (report,) = json.loads(last_result(lead[2]))
    assert {k: report[k] for k in ("conversation_id", "status", "success", "summary")} == {
        "conversation_id": cid, "status": "idle", "success": True, "summary": "did X",
    }  # fmt: skip
    statuses = mailfilter.select(agent_ws, "lead", sender=cid, kind="status")
    bodies = sorted((json.loads(m.body) for m in statuses), key=lambda b: b["summary"])
    # The seed's three keys, and what each run cost (protocol/cost.md): one model call
    # each, at the server's default usage; claude-test has no price.
    assert [{k: b[k] for k in ("status", "success", "summary")} for b in bodies] == [
        {"status": "idle", "success": True, "summary": "did X"},
        {"status": "idle", "success": True, "summary": "did more"},
    ]
    assert [b["usage"] for b in bodies] == [
        {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 0,
         "cache_creation_input_tokens": 0, "cost_usd": None},
    ] * 2  # fmt: skip

    # 5. mail_send(uuid, "do more") continued the idle child, same id, full context.
    sent = json.loads(last_result(lead[3]))
    assert sent["conversation_id"] == cid and sent["continued"] is True
    (again,) = json.loads(last_result(lead[4]))
    assert again["summary"] == "did more" and again["conversation_id"] == cid
    continued = all_text(of(api_env, cid)[1])
    assert "did X" in [t.strip() for t in continued]
    # Open question 2, the "got mail" wording: the child's next input names the mail.
    assert continued[-1].startswith("Mail from lead (m-") and continued[-1].endswith("do more\n")

    # 5. kill(uuid): terminated, success reported to the parent, no UI side effects.
    assert json.loads(last_result(lead[5])) == {"conversation_id": cid, "killed": [cid]}
    assert tree.state_of(Conversation(agent_ws.conv_root, cid)) is State.KILLED
    assert rgit(agent_ws.root, "status", "--porcelain") == ""


def test_jp_await_after_mail_send_gathers_the_continued_run(
    agent_ws: Workspace, api_env: Any
) -> None:
    """Step 5 then 3 again: after mail_send(uuid, "do more") the parent's next jp_await
    returns the report of the run that mail starts, never the previous report again
    (until it is delivered, the mail is the child's pending input: not settled)."""
    api_env.responder = lambda req: text_reply(
        "did more" if "do more" in last_user_text(req) else "did X"
    )
    child = control.fork(agent_ws, "lead", "do X", start_run=False)
    assert api.runner(agent_ws).run(child) is State.IDLE
    control.send(agent_ws, child, "", "do more", sender="lead", start_run=False)
    (pending,) = reports.wait_settled(agent_ws, [child], by="lead", timeout=0.2)
    assert pending == {
        "conversation_id": child, "state": "idle", "status": "idle", "pending": True,
        "mail": {"delivered": [], "waiting": [pending["mail"]["waiting"][0]]},
    }  # fmt: skip
    assert api.runner(agent_ws).run(child) is State.IDLE
    (report,) = reports.wait_settled(agent_ws, [child], by="lead", timeout=5)
    assert report["summary"] == "did more" and report["success"] is True


def test_mail_tools(agent_ws: Workspace, api_env: Any, cli: Cli) -> None:
    """mail_send / mail_check / mail_read / mail_delete / mail_filter; "Behavioral
    difference is only rendering": the CLI shows the same mailbox."""
    seen: dict[str, Any] = {}

    def check(req: dict[str, Any]) -> Any:
        seen["child"] = json.loads(last_result(req))[0]["conversation_id"]
        return tool_use_reply(("mail_check", {}))

    def read(req: dict[str, Any]) -> Any:
        seen["filtered"] = result_json(req)
        return tool_use_reply(("mail_read", {"id": seen["check"]["messages"][0]["id"]}))

    def filter_status(req: dict[str, Any]) -> Any:
        seen["check"] = result_json(req)
        return tool_use_reply(("mail_filter", {"kind": "status"}))

    parent = by_turn(
        tool_use_reply(("fork", {"prompt": "Ask me which directory, then work."})),
        lambda req: tool_use_reply(("jp_await", {})),
        check,
        filter_status,
        read,
        lambda req: tool_use_reply(("mail_delete", {"id": seen["check"]["messages"][0]["id"]})),
        text_reply("read and tidied my inbox"),
    )

    def child(req: dict[str, Any]) -> Any:
        if tool_results(req):
            return text_reply("worked in src/")
        return tool_use_reply(
            ("mail_send", {"to": "parent", "subject": "question", "body": "Which directory?"})
        )

    api_env.responder = route(parent, child)
    with no_thread_leak():
        query(agent_ws, "Start.", conv_id="lead")
    lead = of(api_env, "lead")
    cid = seen["child"]
    # mail_check: the child's message, unread (its status report was read by jp_await).
    assert seen["check"]["unread"] == 1
    (header,) = seen["check"]["messages"]
    assert header["from"] == cid and header["subject"] == "question"
    assert header["kind"] == "message" and "body" not in header
    # mail_filter: the same headers the CLI's `mail filter --format json` lists.
    shown = json.loads(cli("mail", "filter", "lead", "--kind", "status", "--format", "json").stdout)
    assert [h["id"] for h in seen["filtered"]] == [h["id"] for h in shown]
    assert [h["kind"] for h in shown] == ["status"]
    # mail_read: the body, and it is marked read.
    opened = json.loads(last_result(lead[5]))
    assert opened["body"].strip() == "Which directory?" and opened["id"] == header["id"]
    # mail_delete: gone from the inbox, kept in git.
    assert json.loads(last_result(lead[6])) == {"deleted": header["id"]}
    assert mailfilter.select(agent_ws, "lead", sender=cid, kind="message") == []
    assert f"jpfs(lead): mail-delete {header['id']}" in rgit(agent_ws.root, "log", "--format=%s")


def test_fork_needs_a_prompt_and_kill_names_a_descendant(agent_ws: Workspace, api_env: Any) -> None:
    """The seed: "`prompt` is required. Agent must tell the child what to do."; the seed's open
    question "What happens if fork fails? If kill targets invalid UUID?": a one-line
    error result, nothing created."""
    new_conversation(agent_ws, "elsewhere", agent="agent")
    api_env.responder = by_turn(
        tool_use_reply(("fork", {})),
        tool_use_reply(("kill", {"id": "lead/c-nope"})),
        tool_use_reply(("kill", {"id": "elsewhere"})),
        text_reply("ok"),
    )
    query(agent_ws, "Start.", conv_id="lead")
    results = [tool_results(r)[-1] for r in of(api_env, "lead")[1:]]
    assert [r["is_error"] for r in results] == [True, True, True]
    assert [r["content"].strip() for r in results] == [
        "fork: missing required argument(s): prompt",
        "no conversation 'lead/c-nope'",
        "conversation 'elsewhere' is outside the allowed subtree 'lead' (only its descendants"
        " may be named)",
    ]
    assert list(tree.walk(agent_ws.conv_root, "lead")) == []


def test_a_failed_child_reports_success_false(agent_ws: Workspace, api_env: Any) -> None:
    """{"status": "idle", "success": true/false, ...}: a child whose run fails says so."""
    parent = by_turn(
        tool_use_reply(("fork", {"prompt": "do X"})),
        lambda req: tool_use_reply(("jp_await", {})),
        text_reply("noted"),
    )
    api_env.responder = route(parent, lambda req: error_reply(400, "context window exceeded"))
    with no_thread_leak():
        query(agent_ws, "Start.", conv_id="lead")
    (report,) = json.loads(last_result(of(api_env, "lead")[2]))
    assert report["status"] == "idle" and report["success"] is False
    assert "context window exceeded" in report["summary"]


def test_slash_fork_without_capture_creates_an_idle_child(
    agent_ws: Workspace, api_env: Any, cli: Cli
) -> None:
    """`/fork` without capture: "creates idle child"; no prompt argument; the human then
    switches to it and types (jpfs: `jpfs conversation use`, then `jpfs query`)."""
    api_env.responder = lambda req: text_reply(
        "continued in the child" if "next step" in last_user_text(req) else "hello"
    )
    query(agent_ws, "Start.", conv_id="lead")
    forked = cli("fork", "lead")
    assert forked.code == 0, forked.stderr
    cid = forked.stdout.strip()
    conv = Conversation(agent_ws.conv_root, cid)
    assert tree.state_of(conv) is State.IDLE
    assert [(e.role, e.body.strip()) for e in conv.events()] == [
        ("user", "Start."), ("assistant", "hello"),
    ]  # fmt: skip
    assert cli("conversation", "use", cid).code == 0
    typed = cli("query", "next step")
    assert typed.code == 0 and typed.stdout == "continued in the child\n"
    assert len(conv.events()) == 4 and len(Conversation(agent_ws.conv_root, "lead").events()) == 2


def test_capture_then_fork_and_cancel(
    agent_ws: Workspace, api_env: Any, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Capture mode: the text typed between `/capture` and `/fork` goes to the new child,
    never to the parent's model; `/cancel` ends capture without forking. (`jpfs capture`
    composes the text in $EDITOR, or reads it from stdin without one.)"""
    monkeypatch.delenv("VISUAL", raising=False)
    monkeypatch.delenv("EDITOR", raising=False)
    api_env.responder = lambda req: text_reply(
        "table of 3 files" if "summary table" in last_user_text(req) else "hello"
    )
    query(agent_ws, "Start.", conv_id="lead")
    lead = Conversation(agent_ws.conv_root, "lead")
    before = [e.path.read_text(encoding="utf-8") for e in lead.events()]

    captured = cli("capture", "lead", "--no-start", stdin=CAPTURED + "\n")
    assert captured.code == 0, captured.stderr
    cid = captured.stdout.strip()
    child = Conversation(agent_ws.conv_root, cid)
    assert child.read("task.md") == CAPTURED + "\n"
    assert child.events()[-1].role == "user" and child.events()[-1].body.strip() == CAPTURED
    assert api.runner(agent_ws).run(cid) is State.IDLE
    assert child.read("result.md") is not None and "table of 3 files" in str(
        child.read("result.md")
    )
    # The parent's model never saw the captured text; the parent's record is unchanged.
    assert not any(CAPTURED in t for b in of(api_env, "lead") for t in all_text(b))
    assert [e.path.read_text(encoding="utf-8") for e in lead.events()] == before
    assert CAPTURED in all_text(of(api_env, cid)[0])[-1]

    # /cancel: nothing is created.
    cancelled = cli("capture", "lead", stdin="")
    assert cancelled.code == 1 and "empty task: nothing created" in cancelled.stderr
    assert list(tree.walk(agent_ws.conv_root, "lead")) == [cid]

    # /kill (the human's): the target is killed, its id printed.
    killed = cli("kill", cid)
    assert killed.code == 0 and killed.stdout == f"{cid}\n"
    assert tree.state_of(child) is State.KILLED


def test_internal_tools_are_one_list_and_capture_is_not_a_tool(ws: Path, cli: Cli) -> None:
    """The seed: "Each tool gets its own registry entry with a precise schema. The LLM sees them in
    a single [...] list alongside external tools — no distinction." /capture and /cancel
    "never appear in the tool list"."""
    write_profile(ws, "toolbox", AGENT.replace(
        '"jp_await"]',
        '"jp_await"]\n[[tools.command]]\nname = "count_words"\ndescription = "Count words"\n'
        'program = "wc"\nargs = ["-w", "{path}"]\n[tools.command.parameters.path]\n'
        'type = "string"\n',
    ))  # fmt: skip
    listed = cli("tools", "--profile", "toolbox", "--format", "json")
    assert listed.code == 0, listed.stderr
    defs = {d["name"]: d for d in json.loads(listed.stdout)}
    assert [*SEED_TOOLS, "jp_await", "count_words"] == list(defs)
    for name in SEED_TOOLS:
        schema = defs[name]["input_schema"]
        assert schema["type"] == "object" and schema["additionalProperties"] is False
    assert defs["fork"]["input_schema"]["required"] == ["prompt"]
    assert defs["kill"]["input_schema"]["required"] == ["id"]
    assert defs["mail_send"]["input_schema"]["required"] == ["to", "body"]
    everything = catalog({"tools": {"agents": ["agent"]}}, ws / ".jpfs" / "agents")
    assert not {"capture", "cancel"} & set(everything)
    exported = json.loads(cli("tools", "--format", "json").stdout)
    assert not {"capture", "cancel"} & {d["name"] for d in exported}
