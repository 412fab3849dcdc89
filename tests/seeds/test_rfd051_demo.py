"""RFD 051 (seeds 000/001), "Demo" and "Workflows": a main agent delegates to a
researcher with ``jp_query``, continues it, lists and greps its sub-conversations.

The main agent and its sub-agents are real jpfs agents on the anthropic provider (the
official SDK against ``tests/messages_server.py``); each tool call is the seed's own,
as JSON. The seed's ``config: "agent/researcher"`` is a JP config path; jpfs names the
profile (``researcher``), see protocol/seeds.md.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from jpfs.core.conversation import Conversation
from jpfs.core.state import State
from jpfs.core.workspace import open_workspace
from tests.conftest import rgit
from tests.messages_server import (
    Router,
    error_reply,
    last_user_text,
    system_text,
    text_reply,
    tool_results,
    tool_use_reply,
)
from tests.runners import query
from tests.seeds.conftest import MAIN_PROMPT, PLANNER_PROMPT, RESEARCHER_PROMPT
from tests.seeds.helpers import ID, all_text, by_turn, last_result, tool_names

# user: "Refactor error handling in jp_llm to use thiserror"
USER = "Refactor error handling in jp_llm to use thiserror"
# main_agent: jp_query(config: "agent/researcher", query: "Find all error types ...")
DELEGATE = {
    "config": "agent/researcher",
    "query": "Find all error types in jp_llm. For each, list its variants, "
    "trait impls, and where it's constructed and matched on.",
}
# <response conversation_id="jp-c19283746501"> ... </response>
RESEARCH = """\
jp_llm defines two error types:

`Error` (crates/jp_llm/src/error.rs):
- 8 variants: UnknownModel, Auth, RateLimit, ...
- Implements std::error::Error manually
- Has From impls for reqwest::Error, serde_json::Error, io::Error
- Constructed in provider modules, matched in retry.rs and stream/chain.rs

`StreamError` (crates/jp_llm/src/stream.rs):
- 3 variants for mid-stream failures
- Matched in turn_loop.rs for retry decisions"""
# main_agent: jp_query(id: "jp-c19283746501", query: "How does retry.rs decide ...")
CONTINUE = {
    "id": "jp-c19283746501",
    "query": "How does retry.rs decide which Error variants are retryable? Show the match arms.",
}
RETRY = """\
retry.rs matches on Error variants in `is_retryable()`:
- RateLimit => always retry (with backoff from header)
- Timeout => retry up to 3 times
- Connection => retry up to 2 times
- All others => not retryable"""
# main_agent: jp_conversation_grep(pattern: "is_retryable")
GREP = {"pattern": "is_retryable"}
# jp-c19283746501: retry.rs matches on Error variants in `is_retryable()`:
GREP_LINE = "retry.rs matches on Error variants in `is_retryable()`:"


def researcher(request: dict[str, Any]) -> Any:
    """The researcher answers each question of the seed with the seed's answer."""
    asked = last_user_text(request)
    if "How does retry.rs decide" in asked:
        return text_reply(RETRY)
    if "Find all error types" in asked:
        return text_reply(RESEARCH)
    if "backoff calculation" in asked:
        return text_reply("The backoff doubles from 500 ms, capped at 30 s (retry.rs:88).")
    return text_reply(f"Research result for: {asked.splitlines()[0]}")


def main_requests(api_env: Any) -> list[dict[str, Any]]:
    return [b for b in api_env.bodies if MAIN_PROMPT in system_text(b)]


def test_demo_delegate_continue_list_grep(rfd_ws: Path, api_env: Any) -> None:
    def with_child(make: Any) -> Any:
        return lambda req: make(ID.findall(last_result(req))[0])

    api_env.responder = (
        Router()
        .on_system(RESEARCHER_PROMPT, researcher)
        .on_system(
            MAIN_PROMPT,
            by_turn(
                tool_use_reply(("jp_query", DELEGATE)),  # the seed's own call
                tool_use_reply(("jp_query", {**DELEGATE, "config": "researcher"})),
                with_child(lambda c: tool_use_reply(("jp_query", {**CONTINUE, "id": c}))),
                tool_use_reply(("jp_conversation_list", {})),
                tool_use_reply(("jp_conversation_grep", GREP)),
                text_reply("Refactored."),
            ),
        )
    )
    w = open_workspace(rfd_ws)
    done = query(w, USER, agent="main", segment="main")
    assert done.state is State.IDLE and done.text.strip() == "Refactored.", done.text
    reqs = main_requests(api_env)
    assert len(reqs) == 6

    # The seed's config value is a JP config path: refused with the profiles to use.
    refused = tool_results(reqs[1])[-1]
    assert refused["is_error"] is True
    assert last_result(reqs[1]) == "jp_query: argument 'config' must be one of researcher, planner"

    # <response conversation_id="..."> wraps the sub-agent's final answer, nothing else.
    (child,) = ID.findall(last_result(reqs[2]))
    assert child.startswith("main/c-")
    assert last_result(reqs[2]) == f'<response conversation_id="{child}">\n{RESEARCH}\n</response>'

    # Continuing: the same conversation id; the main agent gets only the new answer ...
    assert last_result(reqs[3]) == f'<response conversation_id="{child}">\n{RETRY}\n</response>'
    # ... and the sub-agent had its full prior context.
    second = [b for b in api_env.bodies if RESEARCHER_PROMPT in system_text(b)][-1]
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "user"]
    texts = all_text(second)
    assert DELEGATE["query"] in texts[0] and texts[1].strip() == RESEARCH
    assert CONTINUE["query"] in texts[2]

    # jp_conversation_list: id, title and events_count of each sub-conversation.
    (row,) = json.loads(last_result(reqs[4]))
    assert row["id"] == child
    assert row["title"] == str(DELEGATE["query"])[:80]
    assert row["events_count"] == 4  # two questions, two answers

    # jp_conversation_grep(pattern: "is_retryable") -> one `ID: line` per matching line.
    assert last_result(reqs[5]).splitlines() == [f"{child}: {GREP_LINE}"]

    # Observable: the sub-conversation is a real conversation on disk, in git.
    conv = Conversation(w.conv_root, child)
    assert conv.meta()["agent"] == "researcher"
    log = rgit(rfd_ws, "log", "--format=%s", "--", child)
    assert f"jpfs({child}): result" in log and f"jpfs({child}): task" in log
    assert rgit(rfd_ws, "status", "--porcelain") == ""


def test_print_a_sub_conversation_or_only_its_last_turn(rfd_ws: Path, api_env: Any) -> None:
    """jp_conversation_print(id) and (id, last=1): "--last=1 limits the damage for cases
    where the main agent only needs the most recent response"."""
    child: list[str] = []

    def print_it(req: dict[str, Any]) -> Any:
        child.extend(ID.findall(last_result(req)))
        return tool_use_reply(("jp_conversation_print", {"id": child[0]}))

    api_env.responder = (
        Router()
        .on_system(RESEARCHER_PROMPT, researcher)
        .on_system(
            MAIN_PROMPT,
            by_turn(
                tool_use_reply(("jp_query", {**DELEGATE, "config": "researcher"})),
                print_it,
                lambda req: tool_use_reply(("jp_conversation_print", {"id": child[0], "last": 1})),
                text_reply("ok"),
            ),
        )
    )
    query(open_workspace(rfd_ws), USER, agent="main", segment="main")
    reqs = main_requests(api_env)
    full, last = last_result(reqs[2]), last_result(reqs[3])
    assert "## Task" in full and DELEGATE["query"] in full and RESEARCH in full
    assert "## Task" not in last and DELEGATE["query"] not in last
    assert RESEARCH in last and last.count("### 0") == 1


def test_mid_task_research_greps_prior_work_then_continues_it(rfd_ws: Path, api_env: Any) -> None:
    """Workflows, "Mid-task research": jp_query(config, query) -> summary; later
    jp_conversation_grep(pattern: "retry") finds it, and jp_query(config, id, query)
    continues that sub-conversation."""
    first = {"config": "researcher", "query": "How does retry.rs pattern-match on Error variants?"}

    def follow_up(req: dict[str, Any]) -> Any:
        hit = next(line for line in last_result(req).splitlines() if GREP_LINE in line)
        child = hit.split(": ", 1)[0]
        # jp_query(config: "agent/researcher", id: "jp-c...", query: "What about ...?")
        return tool_use_reply(
            (
                "jp_query",
                {
                    "config": "researcher",
                    "id": child,
                    "query": "What about the backoff calculation?",
                },
            )
        )

    api_env.responder = (
        Router()
        .on_system(RESEARCHER_PROMPT, lambda req: text_reply(RETRY) if "pattern-match" in
                   last_user_text(req) else researcher(req))
        .on_system(
            MAIN_PROMPT,
            by_turn(
                tool_use_reply(("jp_query", first)),
                tool_use_reply(("jp_conversation_grep", {"pattern": "retry"})),
                follow_up,
                text_reply("continuing the implementation"),
            ),
        )
    )  # fmt: skip
    query(open_workspace(rfd_ws), USER, agent="main", segment="main")
    reqs = main_requests(api_env)
    (child,) = ID.findall(last_result(reqs[1]))
    assert f"{child}: {GREP_LINE}" in last_result(reqs[2]).splitlines()
    assert last_result(reqs[3]).startswith(f'<response conversation_id="{child}">\n')
    assert "backoff doubles" in last_result(reqs[3])
    assert len(Conversation(open_workspace(rfd_ws).conv_root, child).events()) == 4


def test_parallel_sub_agents_run_at_once(rfd_ws: Path, api_env: Any) -> None:
    """Workflows, "Parallel sub-agents": two jp_query calls in one response each create
    an independent sub-conversation, running in parallel; both results come back."""
    calls = [
        {"config": "researcher", "query": "Analyze error handling in jp_llm"},
        {"config": "researcher", "query": "Analyze retry logic in jp_llm"},
    ]
    # Each sub-agent's model call waits for the other's: serial runs would time out.
    both_asking = threading.Barrier(2, timeout=15)
    main = by_turn(tool_use_reply(*[("jp_query", c) for c in calls]), text_reply("both done"))

    def respond(request: dict[str, Any]) -> Any:
        if MAIN_PROMPT in system_text(request):
            return main(request)
        both_asking.wait()
        return text_reply("Findings on: " + last_user_text(request).strip())

    api_env.responder = respond  # not a Router: its lock would serialise the two
    done = query(open_workspace(rfd_ws), USER, agent="main", segment="main")
    assert done.state is State.IDLE and not api_env.errors
    # In the order they finished; each names its own conversation.
    results = [r["content"].strip() for r in tool_results(main_requests(api_env)[1])]
    ids = [ID.findall(r)[0] for r in results]
    assert len(set(ids)) == 2 and all(i.startswith("main/c-") for i in ids)
    w = open_workspace(rfd_ws)
    for text, cid in zip(results, ids, strict=True):
        task = (Conversation(w.conv_root, cid).read("task.md") or "").strip()
        assert text == f'<response conversation_id="{cid}">\nFindings on: {task}\n</response>'
    assert sorted(Conversation(w.conv_root, i).read("task.md") for i in ids) == sorted(
        c["query"] + "\n" for c in calls
    )


def test_research_plan_implement(rfd_ws: Path, api_env: Any) -> None:
    """Workflows, "Research-plan-implement": research with a researcher, feed the summary
    to a planner, implement from the plan; the main agent sees summaries only."""

    def plan(req: dict[str, Any]) -> Any:
        summary = last_result(req).split("\n", 1)[1].rsplit("\n</response>", 1)[0]
        brief = f"Goal: {USER}.\n\nResearch summary:\n{summary}"
        return tool_use_reply(("jp_query", {"config": "planner", "query": brief}))

    api_env.responder = (
        Router()
        .on_system(RESEARCHER_PROMPT, researcher)
        .on_system(PLANNER_PROMPT, text_reply("1. crates/jp_llm/src/error.rs: derive thiserror"))
        .on_system(
            MAIN_PROMPT,
            by_turn(
                tool_use_reply(("jp_query", {**DELEGATE, "config": "researcher"})),
                plan,
                text_reply("Implemented step 1."),
            ),
        )
    )
    done = query(open_workspace(rfd_ws), USER, agent="main", segment="main")
    assert done.text.strip() == "Implemented step 1."
    planner_req = next(b for b in api_env.bodies if PLANNER_PROMPT in system_text(b))
    assert RESEARCH in last_user_text(planner_req)
    # The planner reads but cannot change anything, and cannot delegate.
    assert tool_names(planner_req) == ["fs_read_file", "fs_grep_files", "fs_list_files"]
    assert "derive thiserror" in last_result(main_requests(api_env)[2])
    # The main agent's context holds the summaries, never the sub-agents' own prompts.
    assert not any(RESEARCHER_PROMPT in t for t in all_text(main_requests(api_env)[-1]))


def test_a_sub_agent_whose_model_fails_is_an_error_result(rfd_ws: Path, api_env: Any) -> None:
    """The wrapping for a failed sub-agent: an error result naming the conversation."""
    api_env.responder = (
        Router()
        .on_system(RESEARCHER_PROMPT, error_reply(400, "model unavailable"))
        .on_system(
            MAIN_PROMPT,
            by_turn(
                tool_use_reply(("jp_query", {**DELEGATE, "config": "researcher"})),
                text_reply("gave up"),
            ),
        )
    )
    query(open_workspace(rfd_ws), USER, agent="main", segment="main")
    (result,) = tool_results(main_requests(api_env)[1])
    assert result["is_error"] is True
    assert result["content"].startswith('<error conversation_id="main/c-')
    assert "model unavailable" in result["content"]
