"""The agent runtime end to end: the real anthropic SDK against the local Messages API."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from jpfs import api
from jpfs.core.conversation import Conversation
from jpfs.core.state import State
from jpfs.core.workspace import open_workspace
from jpfs.services.views.history import parse_trailers
from tests.conftest import jpfs_subprocess, rgit, write_profile
from tests.messages_server import (
    Router,
    last_user_text,
    text_reply,
    tool_results,
    tool_use_reply,
)
from tests.runners import query

MAIN = """
model = "claude-main"
provider = "anthropic"
[system]
role = "You are the MAIN agent."
[tools]
allow = ["jp_query", "jp_conversation_list"]
agents = ["child"]
"""
CHILD = """
model = "claude-child"
provider = "anthropic"
description = "reads files"
[system]
role = "You are a CHILD agent."
[tools]
allow = ["fs_read_file"]
"""


def trailer_lines(repo: Path) -> list[dict[str, str]]:
    out = []
    for sha in rgit(repo, "rev-list", "HEAD").split():
        msg = rgit(repo, "log", "-1", "--format=%B", sha)
        parsed = subprocess.run(
            ["git", "interpret-trailers", "--parse"], input=msg, text=True, capture_output=True,
            check=True,
        ).stdout  # fmt: skip
        # A folded (group) commit carries one trailer group per change.
        out.extend(parse_trailers(parsed))
    return out


def test_main_agent_runs_two_children_in_parallel(ws: Path, api_env) -> None:  # type: ignore[no-untyped-def]
    write_profile(ws, "main", MAIN, allowed=True)
    write_profile(ws, "child", CHILD)
    (ws / "notes.txt").write_text("the secret is 42\n")

    def child(request):  # type: ignore[no-untyped-def]
        results = tool_results(request)
        if not results:
            # Both children wait for each other here, so they must run concurrently (1.5 s:
            # room for the second to start on a loaded machine).
            return tool_use_reply(("fs_read_file", {"path": "notes.txt"}), delay=1.5)
        return text_reply(f"child says: {results[0]['content'].strip()}", model="claude-child")

    def main(request):  # type: ignore[no-untyped-def]
        results = tool_results(request)
        if not results:
            return tool_use_reply(
                ("jp_query", {"config": "child", "query": "read notes A"}),
                ("jp_query", {"config": "child", "query": "read notes B"}),
                model="claude-main",
                input_tokens=100,
                output_tokens=20,
            )
        joined = " | ".join(r["content"] for r in results)
        return text_reply(f"MAIN FINAL: {joined}", model="claude-main")

    api_env.responder = Router().on_system("CHILD", child).on_system("MAIN", main)
    w = open_workspace(ws)
    result = query(w, "do it", agent="main")
    assert result.state is State.IDLE
    assert result.text.startswith("MAIN FINAL: <response conversation_id=")
    assert result.text.count("child says: the secret is 42") == 2

    listed = json.loads(jpfs_subprocess("c", "ls", "--format", "json", cwd=ws).stdout)
    children = [c for c in listed if c["parent"] == result.conversation]
    assert len(children) == 2 and all(c["status"] == "idle" for c in children)
    # The two child runs overlapped: both first requests arrived before either second one.
    child_reqs = [r for r in api_env.requests if "CHILD" in json.dumps(r.json.get("system"))]
    firsts = [i for i, r in enumerate(child_reqs) if not tool_results(r.json)]
    assert firsts == [0, 1]
    # The main agent saw the tool specs its profile allows and nothing else.
    main_req = next(r for r in api_env.requests if "MAIN" in json.dumps(r.json.get("system")))
    assert sorted(t["name"] for t in main_req.json["tools"]) == [
        "jp_conversation_list", "jp_query",
    ]  # fmt: skip
    enum = next(t for t in main_req.json["tools"] if t["name"] == "jp_query")
    assert enum["input_schema"]["properties"]["config"]["enum"] == ["child"]

    # Every step is a commit with trailers.
    trailers = trailer_lines(ws)
    events = [(t.get("Jpfs-Conversation"), t.get("Jpfs-Event")) for t in trailers]
    main_id = result.conversation
    assert events.count((main_id, "tool")) == 2
    assert (main_id, "result") in events and (main_id, "task") in events
    for c in children:
        assert (c["id"], "result") in events and (c["id"], "tool") in events
    usage = [t["Jpfs-Usage"] for t in trailers if t.get("Jpfs-Model") == "claude-main"]
    # claude-main has no price: the trailer says what was used, and no cost.
    assert "input=100 output=20 cache_read=0 cache_creation=0" in usage
    assert rgit(ws, "status", "--porcelain", "--", ".") == ""
    conv = Conversation(w.conv_root, main_id)
    first_assistant = next(e for e in conv.events() if e.role == "assistant")
    assert first_assistant.meta["usage"] == {
        "input_tokens": 100, "output_tokens": 20,
        "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0,
    }  # fmt: skip
    assert first_assistant.meta["model"] == "claude-main"


def test_provider_failure_is_recorded_in_the_conversation(ws: Path, api_env) -> None:  # type: ignore[no-untyped-def]
    from tests.messages_server import error_reply

    write_profile(ws, "child", CHILD, allowed=True)
    api_env.responder = lambda req: error_reply(400, "bad request: model unknown")
    w = open_workspace(ws)
    result = query(w, "hello", agent="child")
    assert result.state is State.FAILED
    assert "model unknown" in result.text
    conv = Conversation(w.conv_root, result.conversation)
    assert conv.meta()["status"] == "failed"
    assert conv.events()[-1].role == "error"
    assert "jpfs(" + result.conversation + "): error" in rgit(ws, "log", "-1", "--format=%s")
    # New input retries the conversation.
    api_env.responder = lambda req: text_reply("recovered: " + last_user_text(req))
    again = query(w, "try again", conv_id=result.conversation)
    # The failed input and the retry reach the model together (errors are not sent).
    assert again.state is State.IDLE and again.text == "recovered: hello\n\ntry again\n"


def test_jp_query_refuses_out_of_scope_ids_overrides_and_profiles(ws: Path, api_env) -> None:  # type: ignore[no-untyped-def]
    write_profile(ws, "main", MAIN)
    write_profile(ws, "child", CHILD, allowed=True)
    w = open_workspace(ws)
    from jpfs.services.conversations.lifecycle import new_conversation

    new_conversation(w, "sibling", agent="child")
    calls = [
        ("jp_query", {"config": "child", "query": "x", "id": "sibling"}),
        ("jp_query", {"config": "child", "query": "x", "id": "../sibling"}),
        (
            "jp_query",
            {"config": "child", "query": "x", "overrides": ["tools.allow=['fs_write_file']"]},
        ),
        ("jp_query", {"config": "main", "query": "x"}),
        ("jp_query", {"config": "child", "query": "x", "id": "/etc"}),
        ("jp_conversation_print", {"id": "sibling"}),
    ]
    main = Router().on_system("MAIN", tool_use_reply(*calls), text_reply("MAIN done"))
    api_env.responder = main
    write_profile(
        ws,
        "main",
        MAIN.replace('"jp_conversation_list"]', '"jp_conversation_list", "jp_conversation_print"]'),
        allowed=True,
    )
    result = query(open_workspace(ws), "go", agent="main")
    assert result.state is State.IDLE
    conv = Conversation(w.conv_root, result.conversation)
    tool_events = [e for e in conv.events() if e.role == "tool"]
    assert len(tool_events) == len(calls)
    assert all(e.meta["is_error"] for e in tool_events)
    reasons = " ".join(e.body for e in tool_events)
    assert "outside the allowed subtree" in reasons
    assert "not allowed by profile" in reasons
    assert "'config' must be one of child" in reasons
    # Nothing was created under the main conversation, nothing else changed.
    assert [p.name for p in conv.path.iterdir() if p.is_dir()] == ["events"]
    assert Conversation(w.conv_root, "sibling").events() == []


def test_query_cli_prints_only_the_answer(ws: Path, api_env, cli) -> None:  # type: ignore[no-untyped-def]
    write_profile(ws, "child", CHILD, allowed=True)
    api_env.responder = lambda req: text_reply("the answer is 7")
    result = cli("query", "--agent", "child", "what is it?")
    assert result.code == 0, result.stderr
    assert result.stdout == "the answer is 7\n"
    conv_id = cli("c", "show").stdout.strip()
    api_env.responder = lambda req: text_reply("still 7: " + last_user_text(req))
    again = cli("query", "and now?")
    assert again.stdout == "still 7: and now?\n"
    events = Conversation(ws / "conversations", conv_id).events()
    assert [e.role for e in events] == ["user", "assistant", "user", "assistant"]
    empty = cli("query", stdin="")
    assert empty.code == 2


def test_runner_resumes_pending_tool_calls_without_repeating_model_turns(ws: Path) -> None:
    write_profile(
        ws,
        "s",
        """
model = "m"
provider = "script"
[tools]
allow = ["fs_list_files"]
[[script.turns]]
tool_calls = [{ name = "fs_list_files", input = {} }, { name = "fs_list_files", input = { path = "conversations" } }]
[[script.turns]]
text = "done"
""",
        allowed=True,
    )
    w = open_workspace(ws)
    from jpfs.services.conversations.lifecycle import new_conversation

    conv = new_conversation(w, "r", agent="s", task="list")
    runner = api.runner(w)
    # Simulate a crash after the model turn and one tool result were committed.
    runner.work_step(conv)  # first user event
    runner.work_step(conv)  # model turn with two tool calls
    events = conv.events()
    call = events[-1].tool_calls[0]
    conv.append_event(
        "tool",
        "partial",
        {"tool_call_id": call["id"], "tool_name": call["name"], "is_error": False},
    )
    state = api.runner(w).run("r")
    assert state is State.IDLE
    roles = [e.role for e in conv.events()]
    assert roles == ["user", "assistant", "tool", "tool", "assistant"]
    assert conv.events()[2].body == "partial\n"  # not re-run
