"""Seed 003, "Subagent Onboarding Protocol": onboard, reply, call, the onboarding
handle, the ask_caller tool, the filesystem variant, batch onboarding + fork.

The seed's Python (``agent_onboard``, ``agent_onboard_reply``, ``call_agent``) is
jpfs's library (``jpfs.onboard``, ``jpfs.reply``, ``jpfs.call``; synchronous); the
agents are real jpfs agents on the anthropic provider (the SDK against the local
Messages API server).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import jpfs
from jpfs.core import tree
from jpfs.core.conversation import Conversation
from jpfs.core.locks import is_locked
from jpfs.core.state import State
from jpfs.core.workspace import open_workspace
from jpfs.services.views.history import log
from tests.conftest import Result, git, rgit, running_daemon, wait_until, write_profile
from tests.messages_server import Router, last_user_text, text_reply, tool_use_reply
from tests.runners import query
from tests.seeds.helpers import ID, by_turn, last_result, tool_names, turn_of

Cli = Callable[..., Result]

REVIEWER = """
model = "claude-reviewer"
provider = "anthropic"
description = "Reviews code for security problems; interviews its caller first."
[system]
role = "You are CODE_REVIEWER."
[onboarding]
enabled = true
max_rounds = 3
"""
EXECUTOR = REVIEWER.replace("CODE_REVIEWER", "TASK_EXECUTOR").replace(
    "Reviews code for security problems", "Executes one task of a batch"
)
CALLER = """
model = "claude-caller"
provider = "anthropic"
[system]
role = "You are the CALLER."
[tools]
allow = ["jp_query"]
agents = ["code_reviewer"]
"""

# handle = await agent_onboard("code_reviewer", context="Review PR #123 for security")
CONTEXT = "Review PR #123 for security"
DIFF = "--- a/app.py\n+++ b/app.py\n+cur.execute('SELECT * FROM t WHERE id=' + uid)\n"


def round_of(request: dict[str, Any]) -> int:
    """The onboarding round a request asks for (0: not an onboarding step)."""
    if "ask_caller" not in tool_names(request):
        return 0
    found = re.search(r"onboarding round (\d+) of", last_user_text(request))
    assert found
    return int(found.group(1))


def ask(*questions: str) -> Any:
    return tool_use_reply(("ask_caller", {"questions": list(questions)}))


def reviewer(request: dict[str, Any]) -> Any:
    """The seed's interviews: "Proposed Design" (PR #123) and "Message Flow"."""
    text, n = last_user_text(request), round_of(request)
    if n == 0:
        return text_reply("REVIEW: SQL injection in app.py line 1; requirements.txt is clean")
    if "Nothing to ask" in text:
        return text_reply("I have what I need.")  # no tool call: ready
    if "export module" in text:  # Message Flow
        flow = [ask("What format?"), ask("Any constraints?"), tool_use_reply(("start_work", {}))]
        return flow[n - 1]
    if "login handler" in text:  # the filesystem variant
        return [ask("Which framework?"), tool_use_reply(("start_work", {}))][n - 1]
    steps = [
        # Subagent asks: "What languages? Any known vulnerabilities to focus on?"
        ask("What languages?", "Any known vulnerabilities to focus on?"),
        # Subagent asks: "Should I check dependencies too?"
        ask("Should I check dependencies too?"),
        # Subagent signals ready
        tool_use_reply(("start_work", {})),
    ]
    return steps[n - 1]


@pytest.fixture
def reviewer_ws(ws: Path, api_env: Any, monkeypatch: pytest.MonkeyPatch) -> Path:
    write_profile(ws, "code_reviewer", REVIEWER, allowed=True)
    write_profile(ws, "task_executor", EXECUTOR, allowed=True)
    write_profile(ws, "caller", CALLER, allowed=True)
    api_env.responder = reviewer
    monkeypatch.chdir(ws)  # the library finds the workspace from the current directory
    return ws


def test_proposed_design(reviewer_ws: Path, api_env: Any) -> None:
    """The seed: "Proposed Design (Prototype)", step by step, and "Internal Flow"."""
    # Step 1: Start onboarding conversation
    handle = jpfs.onboard("code_reviewer", context="Review PR #123 for security")
    assert not handle.ready
    assert (
        handle.current_question == "1. What languages?\n2. Any known vulnerabilities to focus on?"
    )
    # Step 2: Answer questions (may loop)
    handle = jpfs.reply(handle, "Python/JS. Focus on SQL injection.")
    assert not handle.ready and handle.current_question == "1. Should I check dependencies too?"
    handle = jpfs.reply(handle, "Yes, check requirements.txt")
    # Subagent signals ready
    assert handle.ready and handle.current_question is None
    # The handle carries the agent identity, (through its conversation) the Q&A, readiness.
    assert handle.agent == "code_reviewer"
    template = Conversation(open_workspace(reviewer_ws).conv_root, handle.conversation)
    assert "Yes, check requirements.txt" in str(template.read("answers.md"))

    # Step 3: Execute with full context
    result = jpfs.call(handle, input=DIFF)
    assert result.startswith("REVIEW: SQL injection")

    # Internal flow: onboarding steps get exactly ask_caller (and start_work); the
    # execution gets the onboarding context prepended to its input, and no ask_caller.
    steps = [b for b in api_env.bodies if round_of(b)]
    assert [round_of(b) for b in steps] == [1, 2, 3]
    assert all(tool_names(b) == ["ask_caller", "start_work"] for b in steps)
    (work,) = [b for b in api_env.bodies if not round_of(b)]
    assert "ask_caller" not in tool_names(work)
    brief = last_user_text(work)
    assert brief.startswith(f"{CONTEXT}\n\n## Your task\n\n{DIFF.strip()}\n\n## Onboarding")
    for said in ("What languages?", "Python/JS. Focus on SQL injection.",
                 "Should I check dependencies too?", "Yes, check requirements.txt"):  # fmt: skip
        assert said in brief.split("## Onboarding", 1)[1]

    # "Can an already-onboarded handle be reused for multiple calls?" Yes: no new Q&A.
    assert jpfs.call(handle, input="--- a/b.py\n").startswith("REVIEW:")
    assert len([b for b in api_env.bodies if round_of(b)]) == 3


def test_no_questions_means_ready_and_plain_calls_skip_onboarding(
    reviewer_ws: Path, api_env: Any
) -> None:
    """The seed: "Returns without asking → returns handle with ready=True"; "Regular
    call_agent(name, input) still works (no onboarding)"."""
    handle = jpfs.onboard("code_reviewer", "Nothing to ask: review app.py")
    assert handle.ready and handle.current_question is None
    questions = Conversation(open_workspace(reviewer_ws).conv_root, handle.conversation)
    assert "Note: I have what I need." in str(questions.read("questions.md"))
    before = len(api_env.bodies)
    assert jpfs.call("code_reviewer", DIFF).startswith("REVIEW:")
    assert [round_of(b) for b in api_env.bodies[before:]] == [0]


def test_message_flow_between_agents(reviewer_ws: Path, api_env: Any) -> None:
    """The seed: "Message Flow": the parent starts the onboarding, the subagent asks "What format?",
    the parent answers "JSON with schema X", then "Any constraints?" / "Max 10 files",
    the subagent is ready and executes: through jp_query, the one tool a jpfs caller
    uses for both phases (the seed's option B: the call returns questions first)."""
    child: list[str] = []

    def answer(text: str) -> Any:
        def step(req: dict[str, Any]) -> Any:
            child[:] = ID.findall(last_result(req))
            return tool_use_reply(("jp_query", {"id": child[0], "query": text}))

        return step

    api_env.responder = (
        Router()
        .on_system("You are the CALLER.", by_turn(
            tool_use_reply(("jp_query", {"config": "code_reviewer",
                                         "query": "Audit the export module"})),
            answer("JSON with schema X"),
            answer("Max 10 files"),
            text_reply("got the audit"),
        ))
        .on_system("You are CODE_REVIEWER.", reviewer)
    )  # fmt: skip
    done = query(open_workspace(reviewer_ws), "Audit exports", agent="caller")
    assert done.state is State.IDLE
    results = [last_result(b) for b in api_env.bodies if "You are the CALLER." in str(b)
               and turn_of(b)]  # fmt: skip
    cid = child[0]
    assert results == [
        f'<questions conversation_id="{cid}">\n1. What format?\n</questions>',
        f'<questions conversation_id="{cid}">\n1. Any constraints?\n</questions>',
        f'<response conversation_id="{cid}">\nREVIEW: SQL injection in app.py line 1;'
        " requirements.txt is clean\n</response>",
    ]
    events = [e.event for e in reversed(log(reviewer_ws, "jpfs-record", cid))]
    assert events == [
        "task", "questions", "answers", "questions", "answers", "ready", "input", "assistant",
        "result",
    ]  # fmt: skip


def test_filesystem_variant(reviewer_ws: Path, cli: Cli) -> None:
    """The seed: "Alternative: Filesystem-Mediated": 1. the caller writes task.md; 2. the agent
    writes its questions to questions.md; 3. the caller reads them and writes
    answers.md; 4. the agent reads answers.md and does the task. The caller touches only
    files; the daemon runs the agent (jpfs's "no new primitives")."""
    assert cli("config", "set", "conversations.default_agent", '"code_reviewer"').code == 0
    assert cli("config", "set", "agents.allowed", '["code_reviewer"]').code == 0
    git(reviewer_ws, "add", ".jpfs")
    git(reviewer_ws, "commit", "-q", "-m", "reviewer by default")
    conv_dir = reviewer_ws / "conversations" / "review"
    conv = Conversation(reviewer_ws / "conversations", "review")
    local = reviewer_ws / ".jpfs" / "local"
    with running_daemon(reviewer_ws):
        conv_dir.mkdir()
        (conv_dir / "task.md").write_text("Review the login handler for security.\n")
        # The caller reads the questions once the agent's run has ended (an edit during a
        # run is committed with its next step, under the agent's name: daemon.md).
        wait_until(
            lambda: tree.state_of(conv) is State.WAITING and not is_locked(local, "review"),
            timeout=20,
            message="the questions",
        )
        assert "1. Which framework?" in (conv_dir / "questions.md").read_text()
        (conv_dir / "answers.md").write_text("# Answers\n\n## Round 1\n\nFlask 3.\n")
        wait_until(lambda: tree.state_of(conv) is State.IDLE, timeout=20, message="the result")
    assert (conv_dir / "result.md").read_text().rstrip().endswith("requirements.txt is clean")
    assert "Flask 3." in conv.events()[0].body
    authors = rgit(reviewer_ws, "log", "--reverse", "--format=%an|%s", "--", "review")
    assert authors.splitlines()[:3] == [
        "Test User|jpfs(review): task",
        "code_reviewer (jpfs agent)|jpfs(review): questions",
        "Test User|jpfs(review): answers",
    ]


TASKS = [f"Port module {n} to the new API" for n in range(1, 11)]


def executor(request: dict[str, Any]) -> Any:
    n = round_of(request)
    if n == 1:
        return ask("Which API version should every port target?")
    if n:
        return tool_use_reply(("start_work", {}))
    task = last_user_text(request).split("## Your task", 1)[1].split("## Onboarding")[0]
    task = task.strip()
    return text_reply(f"done: {task}")


def test_batch_onboarding_then_fork(reviewer_ws: Path, api_env: Any) -> None:
    """The seed: "Batch Onboarding (Fork Pattern)", in the seed's own steps:

        agent_create("task_executor", instructions)      -> the task_executor profile
        agent_onboard(handle, "I have 10 tasks: [list]. Ask me anything.")
          → single comprehensive Q&A session
        agent_fork(handle, 10) → 10 handles, each with onboarding context
        for i, h in enumerate(handles): agent_call(h, tasks[i])
    A ready handle is the fork point: each call is a new child inheriting the Q&A."""
    api_env.responder = executor
    listing = "; ".join(TASKS)
    handle = jpfs.onboard("task_executor", f"I have 10 tasks: {listing}. Ask me anything.")
    assert handle.current_question == "1. Which API version should every port target?"
    handle = jpfs.reply(handle, "v2, everywhere")
    assert handle.ready
    results = [jpfs.call(handle, TASKS[i]) for i in range(10)]
    assert results == [f"done: {t}\n" for t in TASKS]
    # One onboarding session (ask, then ready) for ten executions.
    assert [round_of(b) for b in api_env.bodies].count(0) == 10
    assert [round_of(b) for b in api_env.bodies if round_of(b)] == [1, 2]
    w = open_workspace(reviewer_ws)
    children = [c for c in tree.walk(w.conv_root, handle.conversation)]
    assert len(children) == 10
    for cid in children:
        first = Conversation(w.conv_root, cid).events()[0].body
        assert first.count("v2, everywhere") == 1 and "I have 10 tasks" in first


def test_batch_onboarding_command(
    reviewer_ws: Path, api_env: Any, cli: Cli, tmp_path: Path
) -> None:
    """The same pattern from the command line: `jpfs onboard AGENT --tasks FILE` onboards
    once over the tasks, then runs one child per task in parallel."""
    api_env.responder = executor
    tasks = tmp_path / "tasks.md"
    tasks.write_text("".join(f"## {t}\n\n" for t in TASKS), encoding="utf-8")
    asked = cli("onboard", "task_executor", "--tasks", str(tasks))
    assert asked.code == 4, asked.stderr
    (template,) = ID.findall(asked.stdout)
    assert "Which API version" in asked.stdout
    assert cli("answer", template, "v2, everywhere").code == 0
    done = cli("onboard", "--id", template)
    assert done.code == 0, done.stderr
    answers = re.findall(r'<response conversation_id="([^"]+)">\ndone: (.*)\n</response>',
                         done.stdout)  # fmt: skip
    assert sorted(t for _, t in answers) == sorted(TASKS)
    assert all(cid.startswith(template + "/") for cid, _ in answers)
    assert [round_of(b) for b in api_env.bodies if round_of(b)] == [1, 2]
