"""A tool loop on a model that always thinks, through every way a run happens: the CLI, a
daemon SIGKILLed between a tool call and the next model call, a caller's ``jp_query``,
and a fork. The local Messages API server refuses what the API refuses: a thinking block
not sent back verbatim and first, one whose prefix changed on a model that binds it."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jpfs import api
from jpfs.core.conversation import Conversation
from jpfs.core.workspace import open_workspace
from tests.conftest import Result, rgit, wait_until, write_profile
from tests.messages_server import (
    Answer,
    JsonDict,
    MessagesServer,
    Response,
    conversation_of,
    error_reply,
    text_reply,
    thinking_block,
    tool_results,
    tool_use_reply,
)
from tests.services.daemon.test_daemon_helpers import (
    DaemonProc,
    daemon_proc_fixture,
    write_in_place,
)

READS = 10
THINKER = """
model = "{model}"
provider = "anthropic"
effort = "medium"
[system]
role = "You read files."
[tools]
allow = ["fs_read_file"]
[limits]
max_turns = 20
"""


def thought(conversation: str, n: int) -> str:
    return f"PRIVATE THOUGHT {n} of {conversation}: read the next file."


def with_thinking(response: Response, text: str) -> Response:
    """``response`` with a thinking block first (signed by the server as it sends it)."""
    body = dict(response.body)
    body["content"] = [thinking_block(text), *body["content"]]
    return Response(body=body, delay=response.delay)


class Reader:
    """A model that reads ``READS`` files, one a call, thinking before each, then answers.
    ``hold``: the call (by tool results seen) whose answer waits until ``release``."""

    def __init__(self, hold: int | None = None) -> None:
        self.hold = hold
        self.release = threading.Event()

    def __call__(self, request: JsonDict) -> Answer:
        conv = conversation_of(request)
        done = len(tool_results(request))
        if done == self.hold and not self.release.is_set():
            self.release.wait(30)  # the daemon is killed while this call is in flight
            return text_reply("never seen")
        if done < READS:
            reply = tool_use_reply(("fs_read_file", {"path": f"notes/{done}.txt"}))
        else:
            reply = text_reply(f"read {READS} files")
        return with_thinking(reply, thought(conv, done))


def query_thinker(
    ws: Path, api_env: MessagesServer, cli: Callable[..., Result], model: str, model_of: Any
) -> Result:
    """``jpfs query`` of a new conversation of the thinker on ``model``, answered by
    ``model_of`` (a responder)."""
    write_profile(ws, "thinker", THINKER.format(model=model), allowed=True)
    make_files(ws)
    api_env.responder = model_of
    return cli("query", "--new", "--agent", "thinker", "Read the notes.")


def make_files(ws: Path) -> None:
    (ws / "notes").mkdir()
    for n in range(READS):
        (ws / "notes" / f"{n}.txt").write_text(f"note {n}\n", encoding="utf-8")


def assistant_events(conv: Conversation) -> list[Any]:
    return [ev for ev in conv.events() if ev.role == "assistant"]


def check_loop(server: MessagesServer, conv: Conversation) -> list[JsonDict]:
    """The loop's requests: each after the first sent the previous replies back with their
    thinking first, verbatim, as the record keeps it; none went to anyone else."""
    mine = [b for b in server.bodies if conversation_of(b) == conv.id]
    assert len(mine) >= READS + 1
    recorded = [ev.meta["thinking"] for ev in assistant_events(conv)]
    assert [blocks[0]["thinking"] for blocks in recorded] == [
        thought(conv.id, n) for n in range(READS + 1)
    ]
    last = mine[-1]["messages"]
    sent = [m["content"][: len(recorded[0])] for m in last if m["role"] == "assistant"]
    assert sent == recorded[:READS]  # byte for byte, signature included, and first
    result = (conv.path / "result.md").read_text(encoding="utf-8")
    assert f"read {READS} files" in result and "PRIVATE THOUGHT" not in result
    return mine


@pytest.mark.parametrize("model", ["claude-fable-5", "claude-fable-5-1"])
def test_a_ten_call_tool_loop_on_an_adaptive_only_model_completes_through_the_cli(
    ws: Path, api_env: MessagesServer, cli: Callable[..., Result], model: str
) -> None:
    done = query_thinker(ws, api_env, cli, model, Reader())
    assert done.code == 0, done.stderr
    assert done.stdout.strip() == f"read {READS} files"
    (conv_id,) = [p.name for p in (ws / "conversations").iterdir() if p.name.startswith("c-")]
    mine = check_loop(api_env, Conversation(ws / "conversations", conv_id))
    # Adaptive, as the profile's model only takes, at the profile's effort.
    assert {json.dumps(b["thinking"]) for b in mine} == {'{"type": "adaptive"}'}
    assert {b["output_config"]["effort"] for b in mine} == {"medium"}
    print_out = cli("conversation", "print", conv_id)
    assert "thinking folded: 1 block" in print_out.stdout
    assert "PRIVATE THOUGHT" not in print_out.stdout
    grep = cli("conversation", "grep", "PRIVATE THOUGHT")
    assert grep.code == 1 and grep.stdout == ""  # a search never shows thinking


CALLER = """
model = "claude-test"
provider = "anthropic"
[system]
role = "You are the CALLER."
[tools]
allow = ["jp_query"]
agents = ["{agent}"]
"""


def test_a_callers_requests_never_hold_its_sub_agents_thinking(
    ws: Path, api_env: MessagesServer, cli: Callable[..., Result]
) -> None:
    write_profile(ws, "caller", CALLER.format(agent="thinker"), allowed=True)
    write_profile(ws, "thinker", THINKER.format(model="claude-fable-5-1"))
    make_files(ws)
    reader = Reader()

    def answer(request: JsonDict) -> Answer:
        if "CALLER" not in str(request.get("system")):
            return reader(request)
        if not tool_results(request):
            return tool_use_reply(("jp_query", {"config": "thinker", "query": "Read notes."}))
        return text_reply("the caller is done")

    api_env.responder = answer
    done = cli("query", "--new", "--agent", "caller", "Delegate the reading.")
    assert done.code == 0, done.stderr
    (top,) = [p for p in (ws / "conversations").iterdir() if p.name.startswith("c-")]
    (child,) = [p for p in top.iterdir() if p.name.startswith("c-")]
    check_loop(api_env, Conversation(ws / "conversations", f"{top.name}/{child.name}"))
    callers = [b for b in api_env.bodies if conversation_of(b) == top.name]
    assert len(callers) == 2
    assert f"read {READS} files" in json.dumps(callers[-1])  # the child's answer reached it
    assert "PRIVATE THOUGHT" not in json.dumps(callers)
    mail = "".join(p.read_text() for p in (top / "inbox").glob("*.md"))
    assert f"read {READS} files" in mail and "PRIVATE THOUGHT" not in mail


@pytest.fixture
def daemon_proc(ws: Path) -> Any:
    yield from daemon_proc_fixture(ws)


def test_a_daemon_killed_between_a_tool_call_and_the_next_model_call_sends_it_again(
    ws: Path, api_env: MessagesServer, daemon_proc: DaemonProc
) -> None:
    from jpfs.core.config import set_in_file

    write_profile(ws, "thinker", THINKER.format(model="claude-fable-5-1"), allowed=True)
    set_in_file(ws / ".jpfs" / "config.toml", "conversations.default_agent", '"thinker"')
    make_files(ws)
    reader = Reader(hold=5)
    api_env.responder = reader
    daemon_proc.start()
    write_in_place(ws / "conversations" / "t" / "task.md", "Read the notes.\n")
    held = api_env.wait_for_requests(6, timeout=60)[-1].body
    assert len(tool_results(held)) == 5
    daemon_proc.kill()  # SIGKILL while the call after the fifth read is in flight
    reader.release.set()
    conv = Conversation(ws / "conversations", "t")
    assert [ev.role for ev in conv.events()][-1] == "tool"  # nothing of that call recorded
    daemon_proc.start()
    wait_until(
        (conv.path / "result.md").exists, timeout=60, message="the loop to finish after the restart"
    )
    mine = check_loop(api_env, conv)
    redone = next(b for b in mine[6:] if len(tool_results(b)) == 5)
    assert redone["messages"] == held["messages"]  # what the live run would have sent
    # result.md is written, then committed: the record settles clean.
    wait_until(lambda: not rgit(ws, "status", "--porcelain"), message="a clean record")


def test_a_fork_of_a_thinking_conversation_sends_its_source_thinking_back(
    ws: Path, api_env: MessagesServer, cli: Callable[..., Result]
) -> None:
    done = query_thinker(ws, api_env, cli, "claude-fable-5-1", Reader())
    assert done.code == 0, done.stderr
    (source,) = [p.name for p in (ws / "conversations").iterdir() if p.name.startswith("c-")]
    before = len(api_env.bodies)

    def fork_reads(request: JsonDict) -> Answer:
        results = tool_results(request)
        if len(results) == READS:  # the fork's own turn: one more read, then the answer
            return with_thinking(
                tool_use_reply(("fs_read_file", {"path": "notes/0.txt"})), "fork thinks"
            )
        return with_thinking(text_reply("fork done"), "fork concludes")

    api_env.responder = fork_reads
    forked = cli("fork", source, "--no-start", "--prompt", "Now read the first note again.")
    assert forked.code == 0, forked.stderr
    child_id = forked.stdout.strip()
    api.runner(open_workspace(ws)).run(child_id)  # as a daemon would
    child = Conversation(ws / "conversations", child_id)
    assert "fork done" in str(child.read("result.md"))
    sent = api_env.bodies[before:]
    assert len(sent) == 2 and all(conversation_of(b) == child_id for b in sent)
    source_thinking = [
        ev.meta["thinking"]
        for ev in Conversation(ws / "conversations", source).events()
        if ev.role == "assistant"
    ]
    echoed = [m["content"][0] for m in sent[0]["messages"] if m["role"] == "assistant"]
    assert echoed == [blocks[0] for blocks in source_thinking]


class FailsOnce(Reader):
    """A Reader whose call after the fifth read fails once, for good (a 400)."""

    def __init__(self) -> None:
        super().__init__()
        self.failed = False

    def __call__(self, request: JsonDict) -> Answer:
        if len(tool_results(request)) == 5 and not self.failed:
            self.failed = True
            return error_reply(400, "this call fails once")
        return super().__call__(request)


def test_retry_between_a_tool_call_and_the_next_model_call_sends_the_thinking_back(
    ws: Path, api_env: MessagesServer, cli: Callable[..., Result]
) -> None:
    done = query_thinker(ws, api_env, cli, "claude-fable-5", FailsOnce())
    assert done.code == 1 and "this call fails once" in done.stderr
    conv = only_conversation(ws)
    retried = cli("retry", conv.id)
    assert retried.code == 0, retried.stderr
    wait_until(lambda: conv.read("result.md") is not None, timeout=60, message="the retry's run")
    check_loop(api_env, conv)


def test_thinking_is_output_tokens_priced_as_output(
    ws: Path, api_env: MessagesServer, cli: Callable[..., Result]
) -> None:
    from jpfs.core import prices
    from jpfs.infra.providers.base import Usage

    def unscripted(request: JsonDict) -> Answer:  # the server thinks, as the model does
        done = len(tool_results(request))
        if done < READS:
            return tool_use_reply(
                ("fs_read_file", {"path": f"notes/{done}.txt"}), model="claude-fable-5"
            )
        return text_reply("done", model="claude-fable-5")

    assert query_thinker(ws, api_env, cli, "claude-fable-5", unscripted).code == 0
    conv = only_conversation(ws)
    sent = [r for r in api_env.requests if conversation_of(r.body) == conv.id]
    assert len(sent) == READS + 1
    for ev in assistant_events(conv):
        usage = ev.meta["usage"]
        # 5 tokens of text or tool call, plus the thinking block's tokens (the server
        # counts them as output, as the API does).
        assert usage["output_tokens"] > 5
        counts = Usage(**{k: usage[k] for k in Usage().counts()})
        assert usage["cost_usd"] == prices.cost_of(counts, "claude-fable-5", prices.PRICES)


def only_conversation(ws: Path) -> Conversation:
    (conv_id,) = [p.name for p in (ws / "conversations").iterdir() if p.name.startswith("c-")]
    return Conversation(ws / "conversations", conv_id)
