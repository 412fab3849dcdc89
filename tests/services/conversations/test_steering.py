"""Steering a running agent: mail reaches it at its next model call, exactly once, in
order, through every way in (the CLI while ``jpfs query`` runs it, a daemon, a caller's
``mail_send``); an interrupt cuts short the call in flight; jpfs's own wrap-up note
reaches a budgeted run once, and its caller gets the summary it wrote."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jpfs.core.conversation import Conversation
from tests.conftest import Result, wait_until, write_profile
from tests.messages_server import (
    Answer,
    JsonDict,
    MessagesServer,
    conversation_of,
    last_user_text,
    text_reply,
    tool_results,
    tool_use_reply,
)
from tests.services.daemon.test_daemon_helpers import (
    DaemonProc,
    daemon_proc_fixture,
    write_in_place,
)
from tests.services.run.test_thinking import CALLER

STEPS = 12
ORDER = "STOP AND REPORT what you read so far"
WORKER = """
model = "claude-test"
provider = "anthropic"
[system]
role = "You are the WORKER."
[tools]
allow = ["fs_read_file"]
[limits]
max_turns = 30
"""


class Worker:
    """A 12-step tool loop, ``delay`` seconds a call, that follows mail saying stop.
    ``hold``: the first request carrying the mail waits until ``release``."""

    def __init__(self, delay: float = 0.3, hold: bool = False) -> None:
        self.delay = delay
        self.hold = hold
        self.release = threading.Event()

    def __call__(self, request: JsonDict) -> Answer:
        if ORDER in json.dumps(request["messages"]):
            if self.hold and not self.release.is_set():
                self.release.wait(30)
                return text_reply("never seen")
            return text_reply("stopped as asked", delay=self.delay)
        done = len(tool_results(request))
        if done < STEPS:
            return tool_use_reply(("fs_read_file", {"path": "README.md"}), delay=self.delay)
        return text_reply("all twelve done")


def carrying(server: MessagesServer, conv_id: str) -> list[int]:
    """The numbers (1-based) of ``conv_id``'s requests that carry the order."""
    mine = [b for b in server.bodies if conversation_of(b) == conv_id]
    return [n for n, b in enumerate(mine, 1) if ORDER in json.dumps(b["messages"])]


def check_delivered_once(conv: Conversation, server: MessagesServer) -> None:
    """Delivered once, after the tool results of its step, as a recorded event; read."""
    events = conv.events()
    holding = [ev for ev in events if ORDER in ev.body]
    assert len(holding) == 1 and holding[0].role == "user"
    ev = holding[0]
    assert ev.meta["delivered"] == "mid-run" and len(ev.meta["mail"]) == 1
    assert events[events.index(ev) - 1].role == "tool"  # after the pending tool results
    inbox = (conv.path / "inbox" / f"{ev.meta['mail'][0]}.md").read_text(encoding="utf-8")
    assert "read = true" in inbox
    first = carrying(server, conv.id)[0]
    sent = [b for b in server.bodies if conversation_of(b) == conv.id][first - 1]
    last = sent["messages"][-1]
    assert [b["type"] for b in last["content"]][-2:] == ["tool_result", "text"]
    assert json.dumps(sent["messages"]).count(ORDER) == 1


def only_conversation(ws: Path) -> Conversation:
    found = wait_until(
        lambda: [p.name for p in (ws / "conversations").iterdir() if p.name.startswith("c-")],
        message="the conversation",
    )
    assert isinstance(found, list)
    return Conversation(ws / "conversations", found[0])


def test_mail_sent_while_jpfs_query_runs_reaches_the_next_model_call(
    ws: Path, api_env: MessagesServer, cli: Callable[..., Result]
) -> None:
    write_profile(ws, "worker", WORKER, allowed=True)
    api_env.responder = Worker()
    query = subprocess.Popen(
        [sys.executable, "-m", "jpfs", "query", "--new", "--agent", "worker", "Read it 12 times."],
        cwd=ws, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        api_env.wait_for_requests(2, timeout=30)
        conv = only_conversation(ws)
        sent = cli("mail", "send", conv.id, ORDER)
        assert sent.code == 0, sent.stderr
        out, err = query.communicate(timeout=60)
    finally:
        query.kill()
        query.wait()
    assert query.returncode == 0, err
    assert out.strip() == "stopped as asked"  # the run followed it
    assert carrying(api_env, conv.id)[0] in (3, 4)
    check_delivered_once(conv, api_env)
    # Shown as what the model was told; mail not delivered yet, as waiting.
    later = cli("mail", "send", "--no-start", "-s", "later", conv.id, "Read it once more.")
    printed = cli("conversation", "print", conv.id).stdout
    assert "· user · mail delivered mid-run · m-" in printed
    assert f"## Mail waiting\n\n- {later.stdout.strip()} from @human: later" in printed


@pytest.fixture
def daemon_proc(ws: Path) -> Any:
    yield from daemon_proc_fixture(ws)


def use_worker(ws: Path) -> None:
    from jpfs.core.config import set_in_file

    write_profile(ws, "worker", WORKER, allowed=True)
    set_in_file(ws / ".jpfs" / "config.toml", "conversations.default_agent", '"worker"')


def test_a_daemon_killed_while_the_call_carrying_mail_is_in_flight_sends_it_once_again(
    ws: Path, api_env: MessagesServer, daemon_proc: DaemonProc, cli: Callable[..., Result]
) -> None:
    use_worker(ws)
    worker = Worker(hold=True)
    api_env.responder = worker
    daemon_proc.start()
    write_in_place(ws / "conversations" / "w" / "task.md", "Read it 12 times.\n")
    api_env.wait_for_requests(2, timeout=30)
    assert cli("mail", "send", "w", ORDER).code == 0
    wait_until(lambda: carrying(api_env, "w"), timeout=30, message="the call carrying the mail")
    daemon_proc.kill()
    worker.release.set()
    daemon_proc.start()
    conv = Conversation(ws / "conversations", "w")
    wait_until(lambda: conv.read("result.md") is not None, timeout=60, message="the result")
    assert "stopped as asked" in str(conv.read("result.md"))
    redone = carrying(api_env, "w")
    assert len(redone) == 2  # the killed call, and the same call again after the restart
    mine = [b for b in api_env.bodies if conversation_of(b) == "w"]
    assert mine[redone[0] - 1]["messages"] == mine[redone[1] - 1]["messages"]
    check_delivered_once(conv, api_env)


def test_an_interrupt_cuts_the_model_call_in_flight_short(
    ws: Path, api_env: MessagesServer, daemon_proc: DaemonProc, cli: Callable[..., Result]
) -> None:
    use_worker(ws)
    api_env.responder = Worker(delay=20.0)  # each call takes 20 s: an interrupt must not wait
    daemon_proc.start()
    write_in_place(ws / "conversations" / "w" / "task.md", "Read it 12 times.\n")
    api_env.wait_for_requests(1, timeout=30)
    (ws / "conversations" / "w" / "events").mkdir(exist_ok=True)
    started = time.monotonic()
    assert cli("mail", "send", "--interrupt", "w", ORDER).code == 0
    wait_until(lambda: carrying(api_env, "w"), timeout=15, message="the interrupting mail")
    assert time.monotonic() - started < 15  # not after the 20 s call
    conv = Conversation(ws / "conversations", "w")
    assert [ev.role for ev in conv.events()] == ["user", "user"]  # the cut call left nothing
    assert carrying(api_env, "w") == [2]


PARENT = """
model = "claude-test"
provider = "anthropic"
[system]
role = "You are the PARENT."
[tools]
allow = ["fork", "mail_send", "jp_await", "fs_read_file"]
"""


def test_a_callers_mail_send_steers_its_running_child(
    ws: Path, api_env: MessagesServer, cli: Callable[..., Result]
) -> None:
    write_profile(ws, "parent", PARENT, allowed=True)
    worker = Worker()
    child: list[str] = []

    def answer(request: JsonDict) -> Answer:
        if "/" in conversation_of(request):  # the fork: a copy of the parent, at work
            return worker(request)
        results = tool_results(request)
        if not results:
            return tool_use_reply(("fork", {"prompt": "Read it 12 times."}))
        if len(results) == 1:
            child.append(json.loads(results[0]["content"])["conversation_id"])
            # Once the child has made two calls: mail it while it runs.
            wait_until(lambda: len(carrying_any(api_env, child[0])) >= 2, timeout=30)
            return tool_use_reply(("mail_send", {"to": child[0], "body": ORDER}))
        if len(results) == 2:
            return tool_use_reply(("jp_await", {"ids": [child[0]]}))
        return text_reply("the parent is done")

    api_env.responder = answer
    done = cli("query", "--new", "--agent", "parent", "Start a worker and steer it.")
    assert done.code == 0, done.stderr
    conv = Conversation(ws / "conversations", child[0])
    assert carrying(api_env, conv.id)[0] in (3, 4)
    check_delivered_once(conv, api_env)
    assert "stopped as asked" in str(conv.read("result.md"))
    parents = [b for b in api_env.bodies if conversation_of(b) == child[0].split("/")[0]]
    (awaited,) = json.loads(tool_results(parents[-1])[-1]["content"])
    assert awaited["mail"]["waiting"] == [] and len(awaited["mail"]["delivered"]) == 1


def carrying_any(server: MessagesServer, conv_id: str) -> list[JsonDict]:
    return [b for b in server.bodies if conversation_of(b) == conv_id]


BUDGETED = """
model = "claude-sonnet-4-6"
provider = "anthropic"
[system]
role = "You are the BUDGETED worker."
[tools]
allow = ["fs_read_file"]
[limits]
max_turns = 30
budget_tokens = 1000
"""


def test_a_budgeted_run_is_told_once_to_wrap_up_and_its_caller_gets_its_summary(
    ws: Path, api_env: MessagesServer, cli: Callable[..., Result]
) -> None:
    write_profile(ws, "caller", CALLER.format(agent="budgeted"), allowed=True)
    write_profile(ws, "budgeted", BUDGETED)
    notes: list[str] = []

    def answer(request: JsonDict) -> Answer:
        if "CALLER" in str(request.get("system")):
            if not tool_results(request):
                return tool_use_reply(("jp_query", {"config": "budgeted", "query": "Read."}))
            return text_reply("the caller is done")
        told = last_user_text(request)
        if "[jpfs: this run has spent" in told:
            notes.append(told)
            return text_reply("SUMMARY: read README.md 8 times, nothing left but more reads.")
        # 100 tokens a call: the note comes before the ninth call (800 of 1,000).
        return tool_use_reply(
            ("fs_read_file", {"path": "README.md"}), input_tokens=90, output_tokens=10
        )

    api_env.responder = answer
    done = cli("query", "--new", "--agent", "caller", "Delegate.")
    assert done.code == 0, done.stderr
    assert len(notes) == 1
    assert "spent 80% of the tightest budget over it (budget_tokens = 1,000" in notes[0]
    (top,) = [p for p in (ws / "conversations").iterdir() if p.name.startswith("c-")]
    statuses = [
        json.loads(p.read_text().split("+++")[-1])
        for p in sorted((top / "inbox").glob("*.md"))
        if 'kind = "status"' in p.read_text()
    ]
    assert len(statuses) == 1
    assert statuses[0]["success"] is False
    assert statuses[0]["summary"].startswith("SUMMARY: read README.md 8 times")
    assert "asked to wrap up near its budget" in statuses[0]["summary"]


def test_mail_from_a_clone_syncing_through_a_remote_reaches_the_running_agent(
    tmp_path: Path, ws: Path, api_env: MessagesServer, cli: Callable[..., Result]
) -> None:
    from tests.conftest import clone_sharing, running_daemon, share_record

    use_worker(ws)
    git_add_commit(ws)
    remote = share_record(tmp_path, ws, cli, interval="0.5")
    other = clone_sharing(remote, tmp_path / "other", cli)
    api_env.responder = Worker(delay=0.5)
    with running_daemon(ws):
        write_in_place(ws / "conversations" / "w" / "task.md", "Read it 12 times.\n")
        # The other machine sees the conversation once the daemon pushed it, mails it, and
        # pushes the mail; the daemon's sync brings it in while the agent works.
        wait_until(
            lambda: cli("sync", cwd=other).code == 0 and (other / "conversations" / "w").is_dir(),
            timeout=30,
            message="the conversation on the other clone",
        )
        sent = cli("mail", "send", "--no-start", "w", ORDER, cwd=other)
        assert sent.code == 0, sent.stderr
        assert cli("sync", cwd=other).code == 0
        conv = Conversation(ws / "conversations", "w")
        wait_until(lambda: conv.read("result.md") is not None, timeout=60, message="the result")
    assert "stopped as asked" in str(conv.read("result.md"))
    assert len(carrying(api_env, "w")) >= 1
    check_delivered_once(conv, api_env)


def git_add_commit(ws: Path) -> None:
    from tests.conftest import git

    git(ws, "add", "-A")
    git(ws, "commit", "-q", "-m", "worker profile")


def test_a_message_file_saved_into_the_inbox_by_hand_reaches_the_running_agent(
    ws: Path, api_env: MessagesServer, daemon_proc: DaemonProc
) -> None:
    """The daemon commits the file once it settled; the next model call carries it."""
    use_worker(ws)
    api_env.responder = Worker(delay=0.5)
    daemon_proc.start()
    write_in_place(ws / "conversations" / "w" / "task.md", "Read it 12 times.\n")
    api_env.wait_for_requests(2, timeout=30)
    msg_id = "m-01jh5w7x2kq3v9d8e7f6g5h4j3"
    write_in_place(
        ws / "conversations" / "w" / "inbox" / f"{msg_id}.md",
        f'+++\nid = "{msg_id}"\nfrom = "@human"\nto = "w"\nsubject = "by hand"\n'
        f'created = 2026-11-28T10:00:00Z\nkind = "message"\nread = false\n+++\n{ORDER}\n',
    )
    conv = Conversation(ws / "conversations", "w")
    wait_until(lambda: conv.read("result.md") is not None, timeout=60, message="the result")
    assert "stopped as asked" in str(conv.read("result.md"))
    check_delivered_once(conv, api_env)


def test_notes_come_once_a_run_at_their_thresholds(tmp_path: Path) -> None:
    from jpfs.core.conversation import create
    from jpfs.services.conversations.steering import Figures, notes_due, wrapped_up

    conv = create(tmp_path, "c", agent="a")
    conv.append_event("user", "task")
    calm = Figures(budget_share=0.79, clock_share=0.5, clock_limit=600, calls_left=5)
    assert notes_due(conv.events(), calm) == []
    late = Figures(budget_share=0.5, clock_share=0.81, clock_limit=600, calls_left=1)
    due = notes_due(conv.events(), late)
    assert [n.kind for n in due] == ["clock", "turns"]
    assert "used 81% of its time (max_run_seconds = 600)" in due[0].text
    assert "this is the last model call of this run (limits.max_turns)" in due[1].text
    for note in due:
        conv.append_event("user", note.text, {"note": note.kind})
    assert notes_due(conv.events(), late) == []  # once a run ...
    assert wrapped_up(conv.events()) == (
        "asked to wrap up near its time (max_run_seconds) and max_turns"
    )
    conv.append_event("assistant", "summary")
    conv.append_event("user", "new input: a new run")
    assert [n.kind for n in notes_due(conv.events(), late)] == ["clock", "turns"]  # ... each
    assert wrapped_up(conv.events()) == ""


TURNS = WORKER.replace("max_turns = 30", "max_turns = 4")


def test_the_last_call_a_run_may_make_is_told_so_and_its_answer_ends_the_run(
    ws: Path, api_env: MessagesServer, cli: Callable[..., Result]
) -> None:
    write_profile(ws, "worker", TURNS, allowed=True)
    told: list[int] = []

    def answer(request: JsonDict) -> Answer:
        if "[jpfs: this is the last model call of this run" in last_user_text(request):
            told.append(len(tool_results(request)))
            return text_reply("SUMMARY: read README.md four times")
        return tool_use_reply(("fs_read_file", {"path": "README.md"}))

    api_env.responder = answer
    done = cli("query", "--new", "--agent", "worker", "Read it forever.")
    assert done.code == 0, done.stderr
    assert told == [4]  # after max_turns calls, before the one more a run may make
    assert done.stdout.startswith("SUMMARY: read README.md four times")
