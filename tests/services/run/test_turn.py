"""A sub-agent that reads more than its model's window holds: the requests are fitted to
the window (the oldest results sent as notes), a refusal for length teaches the real
window, and the record keeps every file in full. Real SDKs against the local servers,
which refuse a prompt over the model's window as the APIs do."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jpfs.core.conversation import Conversation
from tests.api_chat_rules import chat_prompt_tokens
from tests.api_rules import ModelRules, prompt_tokens
from tests.chat_server import ChatServer, call, chat_text, chat_tool_calls
from tests.conftest import Result, write_profile
from tests.messages_server import (
    Answer,
    JsonDict,
    MessagesServer,
    text_reply,
    tool_results,
    tool_use_reply,
)

FILES = 12
WINDOW = 8192
BODY = "".join(f"line {n:04d} of a file the researcher reads in full.\n" for n in range(120))
# A reader's profile, its model and provider given in front.
READER = """
context_window = {window}
max_tokens = 1024
[system]
role = "You read files."
[tools]
allow = ["fs_read_file"]
[limits]
max_turns = 30
"""
LOCAL = 'model = "local-8k"\nprovider = "openai"\nbase_url = "{url}"' + READER


def make_files(ws: Path) -> None:
    (ws / "docs").mkdir()
    for n in range(FILES):
        (ws / "docs" / f"{n}.txt").write_text(f"file {n}\n{BODY}", encoding="utf-8")


def chat_reader(request: JsonDict) -> Answer:
    """Read the files one a call, then answer."""
    done = sum(1 for m in request["messages"] if m.get("role") == "tool")
    if done < FILES:
        return chat_tool_calls(call("fs_read_file", {"path": f"docs/{done}.txt"}))
    return chat_text(f"read {FILES} files")


def chat_server_for(window: int = WINDOW) -> ChatServer:
    server = ChatServer()
    server.windows["local-8k"] = window
    server.count_usage.add("local-8k")
    server.responder = chat_reader
    return server


def only_conversation(ws: Path) -> Conversation:
    (conv_id,) = [p.name for p in (ws / "conversations").iterdir() if p.name.startswith("c-")]
    return Conversation(ws / "conversations", conv_id)


def check_record(conv: Conversation) -> None:
    """The record holds every file read, in full, whatever the requests held."""
    results = [ev.body for ev in conv.events() if ev.role == "tool"]
    assert len(results) == FILES
    for n, body in enumerate(results):
        assert body.rstrip("\n").endswith(BODY.rstrip("\n")) and body.startswith(f"file {n}")


def test_a_12_file_read_on_an_8k_local_model_fits_every_request(
    ws: Path, cli: Callable[..., Result]
) -> None:
    make_files(ws)
    with chat_server_for() as server:
        write_profile(ws, "local", LOCAL.format(url=server.url, window=WINDOW), allowed=True)
        done = cli("query", "--new", "--agent", "local", "Read every file in docs/.")
        requests = [r.body for r in server.requests]
    assert done.code == 0, done.stderr
    assert done.stdout.strip() == f"read {FILES} files"
    sizes = [chat_prompt_tokens(b) + int(b.get("max_tokens") or 0) for b in requests]
    assert len(requests) == FILES + 1 and max(sizes) <= WINDOW  # none refused, none over
    notes = [m["content"] for m in requests[-1]["messages"] if m["role"] == "tool"]
    assert any(n.startswith("[jpfs: this tool result") for n in notes)
    assert notes[-1].startswith("file 11")  # the newest result is whole
    conv = only_conversation(ws)
    check_record(conv)
    # The read that would have passed the window without the notes.
    whole = len(json.dumps(BODY)) * FILES // 4
    assert whole > WINDOW
    last = [ev for ev in conv.events() if ev.role == "assistant"][-1]
    assert last.meta["context"]["cut"] > 0 and last.meta["context"]["window"] == WINDOW


def test_a_profile_that_overstates_the_window_completes_after_the_refusal(
    ws: Path, cli: Callable[..., Result]
) -> None:
    make_files(ws)
    with chat_server_for() as server:
        write_profile(ws, "local", LOCAL.format(url=server.url, window=32_768), allowed=True)
        done = cli("query", "--new", "--agent", "local", "Read every file in docs/.")
        requests = [r.body for r in server.requests]
    assert done.code == 0, done.stderr
    assert done.stdout.strip() == f"read {FILES} files"
    over = [b for b in requests if chat_prompt_tokens(b) + int(b["max_tokens"]) > WINDOW]
    assert len(over) >= 1  # the server refused (it answers nothing over its window) ...
    assert len(requests) <= FILES + 1 + len(over)  # ... and each refusal was retried once
    conv = only_conversation(ws)
    check_record(conv)
    windows = [ev.meta["context"].get("window") for ev in conv.events() if ev.role == "assistant"]
    assert windows[0] == 32_768 and windows[-1] == WINDOW  # learned, then kept


ANTHROPIC = 'model = "claude-small"\nprovider = "anthropic"' + READER


def messages_reader(request: JsonDict) -> Answer:
    done = len(tool_results(request))
    if done < FILES:
        return tool_use_reply(("fs_read_file", {"path": f"docs/{done}.txt"}))
    return text_reply(f"read {FILES} files")


@pytest.mark.parametrize("window", [WINDOW, 65_536])
def test_the_messages_api_refuses_a_long_prompt_and_the_run_fits_it(
    ws: Path, api_env: MessagesServer, cli: Callable[..., Result], window: int
) -> None:
    """Right window or overstated: every request the server answered fits it."""
    make_files(ws)
    api_env.models["claude-small"] = ModelRules(context_window=WINDOW, count_usage=True)
    api_env.responder = messages_reader
    write_profile(ws, "small", ANTHROPIC.format(window=window), allowed=True)
    done = cli("query", "--new", "--agent", "small", "Read every file in docs/.")
    assert done.code == 0, done.stderr
    rules = api_env.models["claude-small"]
    fitted = [b for b in api_env.bodies if prompt_tokens(b, rules) + int(b["max_tokens"]) <= WINDOW]
    assert len(fitted) == FILES + 1
    assert len(api_env.bodies) - len(fitted) == (0 if window == WINDOW else 1)
    check_record(only_conversation(ws))


def test_when_nothing_more_can_go_the_run_fails_saying_what_is_too_large(
    ws: Path, cli: Callable[..., Result]
) -> None:
    (ws / "docs").mkdir()
    (ws / "docs" / "0.txt").write_text(BODY * 20, encoding="utf-8")  # ~30,000 tokens
    with chat_server_for() as server:
        write_profile(ws, "local", LOCAL.format(url=server.url, window=WINDOW), allowed=True)
        server.responder = lambda request: (
            chat_tool_calls(call("fs_read_file", {"path": "docs/0.txt", "limit": 5000}))
            if not any(m.get("role") == "tool" for m in request["messages"])
            else chat_text("unreachable")
        )
        done = cli("query", "--new", "--agent", "local", "Read docs/0.txt.")
        sent: list[Any] = [r.body for r in server.requests]
    assert done.code == 1
    assert "does not fit the model's context window (8,192 tokens" in done.stderr
    assert "-tool.md ~" in done.stderr  # the part too large, named
    assert len(sent) == 1  # nothing over the window was sent


def test_a_tool_loop_keeps_the_thinking_it_began_with(tmp_path: Path) -> None:
    """One thinking configuration per assistant turn: a loop's first reply's, until the
    next input; a profile changed mid-loop takes effect at the next turn."""
    from jpfs.core.conversation import create
    from jpfs.services.run.turn import loop_thinking

    conv = create(tmp_path, "c", agent="a")
    conv.append_event("user", "task")
    assert loop_thinking(conv.events()) is None
    call = {"id": "t", "name": "fs_read_file", "input": {}}
    conv.append_event("assistant", "", {"tool_calls": [call], "context": {"thinking": 2048}})
    conv.append_event("tool", "x", {"tool_call_id": "t"})
    conv.append_event("assistant", "", {"tool_calls": [call], "context": {"thinking": "off"}})
    conv.append_event("tool", "x", {"tool_call_id": "t"})
    assert loop_thinking(conv.events()) == 2048
    conv.append_event("assistant", "done", {"context": {"thinking": 2048}})
    conv.append_event("user", "next task")
    assert loop_thinking(conv.events()) is None
