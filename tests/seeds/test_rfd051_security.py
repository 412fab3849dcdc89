"""RFD 051, "Configuring sub-agents", "The NONE boundary", "Restricting capabilities"
and "Security: conversation scoping": each control of the seed's tables, through the
tool calls a main agent makes (real SDK, real git repository).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jpfs.core.workspace import open_workspace
from jpfs.services.conversations.lifecycle import new_conversation
from tests.conftest import write_profile
from tests.messages_server import (
    Router,
    last_user_text,
    system_text,
    text_reply,
    tool_results,
    tool_use_reply,
)
from tests.runners import query
from tests.seeds.conftest import MAIN_PROMPT, RESEARCHER, RESEARCHER_PROMPT
from tests.seeds.helpers import ID, by_turn, conversation_of, last_result, tool_names

SEED_MODEL = "claude-sonnet-4-20250514"
READ_TOOLS = ["fs_read_file", "fs_grep_files", "fs_list_files"]


def requests_with(api_env: Any, prompt: str) -> list[dict[str, Any]]:
    return [b for b in api_env.bodies if prompt in system_text(b)]


def results_of(api_env: Any) -> list[dict[str, Any]]:
    """The main agent's tool results, one per turn, in order."""
    return [tool_results(r)[-1] for r in requests_with(api_env, MAIN_PROMPT)[1:]]


def test_researcher_cannot_recurse_or_write(rfd_ws: Path, api_env: Any) -> None:
    """| No recursion | Agent config does not enable `jp_query` |
    | Read-only tools | Agent config only enables read tools |
    | Model selection | Agent config sets `assistant.model` |"""
    api_env.responder = (
        Router()
        .on_system(
            RESEARCHER_PROMPT,
            by_turn(
                tool_use_reply(
                    ("jp_query", {"config": "researcher", "query": "go deeper"}),
                    ("fs_write_file", {"path": "notes.md", "content": "x"}),
                ),
                text_reply("I could only read."),
            ),
        )
        .on_system(
            MAIN_PROMPT,
            by_turn(
                tool_use_reply(("jp_query", {"config": "researcher", "query": "Study src/"})),
                text_reply("ok"),
            ),
        )
    )
    query(open_workspace(rfd_ws), "go", agent="main", segment="main")
    first, second = requests_with(api_env, RESEARCHER_PROMPT)
    assert tool_names(first) == READ_TOOLS  # exactly the profile's tools, in its order
    assert first["model"] == SEED_MODEL
    refused = tool_results(second)
    assert [r["is_error"] for r in refused] == [True, True]
    assert all("this agent has no such tool" in r["content"] for r in refused)
    assert not (rfd_ws / "notes.md").exists()


def test_a_profile_without_a_model_is_a_loud_error(rfd_ws: Path, api_env: Any) -> None:
    """The seed: "The agent config must explicitly set `assistant.model`. If it doesn't, config
    validation fails — a loud, clear error.\""""
    # A profile this machine never saw good (no last good copy to stand in).
    (rfd_ws / ".jpfs" / "local" / "policy" / "agents" / "researcher.toml").unlink()
    write_profile(rfd_ws, "researcher", RESEARCHER.replace(f'model = "{SEED_MODEL}"', ""))
    api_env.responder = by_turn(
        tool_use_reply(("jp_query", {"config": "researcher", "query": "Study src/"})),
        text_reply("ok"),
    )
    query(open_workspace(rfd_ws), "go", agent="main", segment="main")
    (result,) = results_of(api_env)
    assert result["is_error"] is True
    assert "researcher.toml: a profile must name its model" in result["content"]


def test_a_good_profile_broken_later_is_stood_in_for_and_said(rfd_ws: Path, api_env: Any) -> None:
    """jpfs's own rule beside the seed's (protocol/daemon.md, "Your branch, your git
    habits"): once a profile loaded good here, a broken copy on the branch (a checkout,
    a conflict, a half-done edit) does not fail new work; the last good copy runs and
    the validation error is said, never swallowed."""
    api_env.responder = lambda req: text_reply("ok")
    ws = open_workspace(rfd_ws)
    query(ws, "first", agent="researcher", segment="first")  # loads good: kept
    write_profile(rfd_ws, "researcher", RESEARCHER.replace(f'model = "{SEED_MODEL}"', ""))
    ws = open_workspace(rfd_ws)
    query(ws, "second", agent="researcher", segment="second")
    assert "a profile must name its model" in ws.notes[".jpfs/agents/researcher.toml"]
    assert api_env.requests[-1].json["model"] == SEED_MODEL  # the last good one's


def test_config_is_an_enum_of_the_allowed_profiles(rfd_ws: Path, api_env: Any) -> None:
    """| Allowed profiles | `config` parameter's `enum` lists valid profiles |: "A free-form
    config path would let the LLM attempt to load arbitrary config files.\""""
    api_env.responder = by_turn(
        tool_use_reply(("jp_query", {"config": "../../config", "query": "x"})),
        tool_use_reply(("jp_query", {"config": "default", "query": "x"})),
        text_reply("ok"),
    )
    query(open_workspace(rfd_ws), "go", agent="main", segment="main")
    first = requests_with(api_env, MAIN_PROMPT)[0]
    schema = next(t for t in first["tools"] if t["name"] == "jp_query")["input_schema"]
    assert schema["properties"]["config"]["enum"] == ["researcher", "planner"]
    for result in results_of(api_env):
        assert result["is_error"] is True
        assert "must be one of researcher, planner" in result["content"]
    assert not [b for b in api_env.bodies if MAIN_PROMPT not in system_text(b)]


def test_overrides_allow_only_the_model(rfd_ws: Path, api_env: Any) -> None:
    """| Allowed overrides | Shell script validates override keys against allowlist |:
    "only assistant.model overrides are allowed\""""
    api_env.responder = (
        Router()
        .on_system(RESEARCHER_PROMPT, text_reply("done"))
        .on_system(
            MAIN_PROMPT,
            by_turn(
                tool_use_reply(
                    (
                        "jp_query",
                        {
                            "config": "researcher",
                            "query": "Study src/",
                            "overrides": ["assistant.model=claude-haiku-test"],
                        },
                    )
                ),
                tool_use_reply(
                    (
                        "jp_query",
                        {
                            "config": "researcher",
                            "query": "Study src/",
                            "overrides": ['tools.allow=["fs_write_file"]'],
                        },
                    )
                ),
                text_reply("ok"),
            ),
        )
    )
    query(open_workspace(rfd_ws), "go", agent="main", segment="main")
    (child_request,) = requests_with(api_env, RESEARCHER_PROMPT)
    assert child_request["model"] == "claude-haiku-test"
    allowed, refused = results_of(api_env)
    assert not allowed.get("is_error") and allowed["content"].startswith("<response")
    assert refused["is_error"] is True
    assert refused["content"].strip() == (
        "override 'tools.allow' is not allowed by profile 'researcher' (overridable: model)"
    )


def test_continuation_keeps_the_configuration_it_was_created_with(
    rfd_ws: Path, api_env: Any
) -> None:
    """The seed: "No `--cfg=NONE` on continuation": a conversation keeps the configuration stored
    when it was created; a later change of the profile reaches new sub-agents only."""
    child: list[str] = []

    def continue_then_start(req: dict[str, Any]) -> Any:
        write_profile(
            rfd_ws,
            "researcher",
            RESEARCHER.replace(SEED_MODEL, "claude-changed").replace(
                '"fs_list_files"]', '"fs_list_files", "mail_send"]'
            ),
        )
        child.extend(ID.findall(last_result(req)))
        return tool_use_reply(
            ("jp_query", {"id": child[0], "query": "And the tests?"}),
            ("jp_query", {"config": "researcher", "query": "A new question"}),
        )

    api_env.responder = (
        Router()
        .on_system(RESEARCHER_PROMPT, lambda req: text_reply("answer: " + last_user_text(req)))
        .on_system(
            MAIN_PROMPT,
            by_turn(
                tool_use_reply(("jp_query", {"config": "researcher", "query": "Study src/"})),
                continue_then_start,
                text_reply("ok"),
            ),
        )
    )
    query(open_workspace(rfd_ws), "go", agent="main", segment="main")
    by_conv: dict[str, list[dict[str, Any]]] = {}
    for body in requests_with(api_env, RESEARCHER_PROMPT):
        by_conv.setdefault(conversation_of(body), []).append(body)
    first_child = by_conv.pop(child[0])
    (new_child,) = by_conv.values()
    assert [b["model"] for b in first_child] == [SEED_MODEL, SEED_MODEL]
    assert tool_names(first_child[1]) == READ_TOOLS
    assert new_child[0]["model"] == "claude-changed"
    assert tool_names(new_child[0]) == [*READ_TOOLS, "mail_send"]


def test_every_tool_is_scoped_to_the_callers_subtree(rfd_ws: Path, api_env: Any) -> None:
    """| Conversation scoping | `--root-id` flag enforces descendant constraint in JP |:
    "if the LLM provides an ID that escapes the subtree, the command fails with a hard
    error"; jp_conversation_list hardcodes the caller as its root and shows hidden ones."""
    w = open_workspace(rfd_ws)
    new_conversation(w, "main", agent="main")
    new_conversation(w, "mine", parent="main", agent="researcher", hidden=True, task="hidden work")
    new_conversation(w, "other", agent="researcher", task="someone else's")
    new_conversation(w, "theirs", parent="other", agent="researcher", task="not yours")
    calls = [
        ("jp_query", {"id": "other", "query": "hi"}),
        ("jp_query", {"id": "main/../other/theirs", "query": "hi"}),
        ("jp_conversation_print", {"id": "other/theirs"}),
        ("jp_conversation_print", {"id": "main"}),
        ("jp_conversation_grep", {"pattern": "someone", "id": "other"}),
        ("jp_conversation_grep", {"pattern": "not yours"}),
        ("jp_conversation_list", {}),
    ]
    api_env.responder = by_turn(*[tool_use_reply(c) for c in calls], text_reply("ok"))
    query(w, "look around", conv_id="main")
    results = results_of(api_env)
    for (name, args), result in zip(calls[:5], results, strict=False):
        assert result["is_error"] is True, (name, args, result)
        assert len(result["content"].strip().splitlines()) == 1
    assert "outside the allowed subtree" in results[0]["content"]
    assert results[5]["content"].strip() == "no matches"
    listed = json.loads(results[6]["content"])
    assert [r["id"] for r in listed] == ["main/mine"]
