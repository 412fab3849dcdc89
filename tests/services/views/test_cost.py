"""Cost: prompt caching, usage and dollars per event, conversation and subtree, budgets.

Everything runs through the real anthropic SDK against the local Messages API server,
whose replies carry the usage the tests check (fixed counts, or what its prompt-cache
simulation says of each request).
"""

from __future__ import annotations

import itertools
import json
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jpfs.core.conversation import Conversation
from tests.conftest import Result, git, rgit
from tests.messages_server import (
    MessagesServer,
    PromptCache,
    Router,
    text_reply,
    tool_results,
    tool_use_reply,
)

PRICES = """
[prices."claude-test"]
input = 3.0
output = 15.0
cache_read = 0.30
cache_creation = 3.75
"""

MAIN = """
model = "claude-test"
provider = "anthropic"
[system]
role = "You are MAIN."
[tools]
allow = ["jp_query", "jp_conversation_list"]
agents = ["child"]
[limits]
max_turns = 40
"""

CHILD = """
model = "claude-test"
provider = "anthropic"
description = "a child"
[system]
role = "You are CHILD."
[tools]
allow = ["jp_conversation_list"]
[limits]
max_turns = 40
"""


def setup(ws: Path, prices: bool = True, **profiles: str) -> None:
    """Write ``profiles`` (name -> TOML), allow them all, price claude-test; commit."""
    from jpfs.core.config import set_in_file

    for name, text in profiles.items():
        (ws / ".jpfs" / "agents" / f"{name}.toml").write_text(text, encoding="utf-8")
    config = ws / ".jpfs" / "config.toml"
    set_in_file(config, "agents.allowed", json.dumps(list(profiles)))
    if prices:
        with config.open("a", encoding="utf-8") as fh:
            fh.write(PRICES)
    git(ws, "add", "-A")
    git(ws, "commit", "-q", "-m", "profiles")


def show(cli: Callable[..., Result], conv_id: str) -> dict[str, Any]:
    result = cli("conversation", "show", conv_id, "--format", "json")
    assert result.code == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def only_child(ws: Path, parent: str) -> str:
    children = [p.name for p in (ws / "conversations" / parent).iterdir() if p.is_dir()]
    children = [c for c in children if c not in ("events", "inbox", "files")]
    assert len(children) == 1, children
    return f"{parent}/{children[0]}"


def events(ws: Path, conv_id: str) -> list[Any]:
    return Conversation(ws / "conversations", conv_id).events()


def top_id(ws: Path) -> str:
    found = [p.name for p in (ws / "conversations").iterdir() if (p / "conversation.toml").exists()]
    assert len(found) == 1, found
    return found[0]


# -- prompt caching ---------------------------------------------------------------------


def loop_server(server: MessagesServer, turns: int) -> None:
    """``turns`` tool calls, then a final answer; usage from the prompt-cache simulation."""
    server.prompt_cache = PromptCache()

    def answer(request: dict[str, Any]) -> Any:
        if len(tool_results(request)) < turns:
            return tool_use_reply(("jp_conversation_list", {}), output_tokens=20)
        return text_reply("done", output_tokens=10)

    server.responder = answer


def test_every_request_carries_breakpoints_and_reads_the_last_one_from_cache(
    ws: Path, api_env: MessagesServer, cli: Callable[..., Result]
) -> None:
    setup(ws, child=CHILD)
    loop_server(api_env, 3)
    result = cli("query", "--agent", "child", "go")
    assert result.code == 0, result.stderr
    bodies = api_env.bodies
    assert len(bodies) == 4
    for body in bodies:
        assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
        assert all("cache_control" not in t for t in body["tools"][:-1])
        assert body["system"][-1]["cache_control"] == {"type": "ephemeral"}
        last = body["messages"][-1]["content"][-1]
        assert last["cache_control"] == {"type": "ephemeral"}
        # Only the newest message is marked: the older ones are read from cache by prefix.
        older = [b for m in body["messages"][:-1] for b in m["content"]]
        assert all("cache_control" not in b for b in older)
    turns = [e for e in events(ws, top_id(ws)) if e.role == "assistant"]
    assert turns[0].meta["usage"]["cache_read_input_tokens"] == 0
    assert turns[0].meta["usage"]["cache_creation_input_tokens"] > 0
    for before, turn in itertools.pairwise(turns):
        used = turn.meta["usage"]
        # Each call reads everything the previous one wrote, and sends fresh only the
        # part after its own breakpoint (nothing: the breakpoint is on the last block).
        written_before = (
            before.meta["usage"]["cache_read_input_tokens"]
            + before.meta["usage"]["cache_creation_input_tokens"]
        )
        assert used["cache_read_input_tokens"] == written_before
        assert used["input_tokens"] == 0


def test_a_profile_turns_caching_off(
    ws: Path, api_env: MessagesServer, cli: Callable[..., Result]
) -> None:
    setup(
        ws,
        child=CHILD.replace(
            'provider = "anthropic"', 'provider = "anthropic"\nprompt_cache = false'
        ),
    )
    loop_server(api_env, 2)
    assert cli("query", "--agent", "child", "go").code == 0
    for body in api_env.bodies:
        assert "cache_control" not in json.dumps(body)
    turns = [e for e in events(ws, top_id(ws)) if e.role == "assistant"]
    assert all(t.meta["usage"]["cache_read_input_tokens"] == 0 for t in turns)


def test_a_fork_and_a_sibling_read_the_shared_prefix_from_cache(
    ws: Path, api_env: MessagesServer, cli: Callable[..., Result]
) -> None:
    setup(ws, child=CHILD)
    api_env.prompt_cache = PromptCache()
    api_env.responder = lambda request: text_reply("done")
    assert cli("query", "--agent", "child", "first task").code == 0
    source = top_id(ws)
    first = api_env.bodies[0]
    # Nothing in the prompt names the conversation: it is a header.
    assert source not in json.dumps({k: first[k] for k in ("system", "tools")})
    assert api_env.requests[0].headers["x-jpfs-conversation"] == source
    fork = cli("fork", source).stdout.strip()
    assert cli("query", "--id", fork, "and more").code == 0
    (turn,) = [e for e in events(ws, fork) if e.role == "assistant"][1:]
    # The fork's prompt begins with its source's whole transcript: read from cache.
    tools_and_system = api_env.prompt_cache.usage({**first, "messages": []})
    assert (
        turn.meta["usage"]["cache_read_input_tokens"] > tools_and_system["cache_read_input_tokens"]
    )
    assert cli("query", "--agent", "child", "--new", "a sibling").code == 0
    sibling = [e for e in api_env.bodies if "a sibling" in json.dumps(e["messages"])]
    assert sibling and sibling[0]["system"] == first["system"]


# -- usage and dollars ---------------------------------------------------------------------


def test_usage_and_subtree_usage_are_right_to_the_cent(
    ws: Path, api_env: MessagesServer, cli: Callable[..., Result]
) -> None:
    setup(ws, main=MAIN, child=CHILD)
    api_env.responder = (
        Router()
        .on_system(
            "You are MAIN",
            tool_use_reply(
                ("jp_query", {"config": "child", "query": "look"}),
                input_tokens=1000, output_tokens=100, cache_write=2000,
            ),
            text_reply("main done", input_tokens=50, output_tokens=200, cache_read=2000),
        )
        .on_system("You are CHILD", text_reply("child done", input_tokens=500, output_tokens=50))
    )  # fmt: skip
    result = cli("query", "--agent", "main", "go")
    assert result.code == 0, result.stderr
    main = top_id(ws)
    child = only_child(ws, main)
    # main: 1000*3 + 100*15 + 2000*3.75 = $0.012, then 50*3 + 200*15 + 2000*0.3 = $0.00375
    # child: 500*3 + 50*15 = $0.00225
    assert show(cli, main)["usage"] == {
        "input_tokens": 1050,
        "output_tokens": 300,
        "cache_read_input_tokens": 2000,
        "cache_creation_input_tokens": 2000,
        "cost_usd": pytest.approx(0.01575, abs=1e-9),
        "cost_note": None,
    }
    assert show(cli, main)["subtree_usage"] == {
        "input_tokens": 1550,
        "output_tokens": 350,
        "cache_read_input_tokens": 2000,
        "cache_creation_input_tokens": 2000,
        "cost_usd": pytest.approx(0.018, abs=1e-9),
        "cost_note": None,
    }
    assert show(cli, child)["usage"]["cost_usd"] == pytest.approx(0.00225, abs=1e-9)
    assert show(cli, child)["subtree_usage"] == show(cli, child)["usage"]
    # The run's usage is on the stderr line after the answer, and in the child's status mail.
    assert "5,900 tokens, $0.0180" in result.stderr
    inbox = list((ws / "conversations" / main / "inbox").glob("*.md"))
    assert len(inbox) == 1
    status = json.loads(inbox[0].read_text(encoding="utf-8").split("+++", 2)[2])
    assert status["success"] is True
    assert status["usage"]["cost_usd"] == pytest.approx(0.00225, abs=1e-9)
    # tree: cost per row and the subtree's total; jpfs log: usage per event.
    rows = {r["id"]: r for r in json.loads(cli("tree", "--format", "json").stdout)}
    assert rows[main]["cost_usd"] == pytest.approx(0.01575)
    assert rows[main]["subtree_cost_usd"] == pytest.approx(0.018)
    assert rows[child]["subtree_tokens"] == 550
    text = cli("tree").stdout
    assert "$0.0158" in text and "$0.0180" in text and "total: 5.9k tokens, $0.0180" in text
    logged = json.loads(cli("log", "--format", "json").stdout)
    turns = [e for e in logged if e["event"] == "assistant" and e["conversation"] == main]
    assert sorted(e["usage"]["cost_usd"] for e in turns) == [0.00375, 0.012]
    assert "(cache read 2000, write 0) $0.0037" in cli("log", main).stdout


def test_the_cost_report_by_model_and_by_conversation(
    ws: Path, api_env: MessagesServer, cli: Callable[..., Result]
) -> None:
    setup(ws, main=MAIN, child=CHILD)
    api_env.responder = (
        Router()
        .on_system(
            "You are MAIN",
            tool_use_reply(("jp_query", {"config": "child", "query": "look"}),
                           input_tokens=1000, output_tokens=100),
            text_reply("main done", input_tokens=1000, output_tokens=100),
        )
        .on_system("You are CHILD",
                   text_reply("child done", model="local-model", input_tokens=7, output_tokens=3))
    )  # fmt: skip
    assert cli("query", "--agent", "main", "go").code == 0
    main = top_id(ws)
    by_model = json.loads(cli("cost", "--by", "model", "--format", "json").stdout)
    assert [(r["model"], r["calls"]) for r in by_model["rows"]] == [
        ("claude-test", 2),
        ("local-model", 1),
    ]
    # A model with no price: its cost and the total's are unknown, and it says why.
    assert by_model["rows"][1]["cost_usd"] is None
    assert "no price for model 'local-model'" in by_model["rows"][1]["cost_note"]
    assert by_model["total"]["cost_usd"] is None and by_model["total"]["input_tokens"] == 2007
    text = cli("cost", "--by", "model")
    assert "$?" in text.stdout and "no price for model 'local-model'" in text.stderr
    by_conv = json.loads(cli("cost", main, "--format", "json").stdout)
    assert [r["conversation"] for r in by_conv["rows"]] == [main, only_child(ws, main)]
    assert by_conv["rows"][0]["cost_usd"] == pytest.approx(0.009)  # 2 x (1000 x 3 + 100 x 15)
    # A time range: nothing was spent in the future, everything since an hour ago.
    assert json.loads(cli("cost", "--since", "2999-01-01", "--format", "json").stdout)["rows"] == []
    assert (
        json.loads(cli("cost", "--since", "1h", "--format", "json").stdout)["total"]["calls"] == 3
    )
    assert (
        json.loads(cli("cost", "--until", "1h", "--format", "json").stdout)["total"]["calls"] == 0
    )
    bad = cli("cost", "--by", "agent")
    assert bad.code == 1 and "choose conversation or model" in bad.stderr
    # Once priced in the config, the unknown model's old calls are priced too.
    with (ws / ".jpfs" / "config.toml").open("a", encoding="utf-8") as fh:
        fh.write(
            '[prices."local-model"]\ninput = 0\noutput = 0\ncache_read = 0\ncache_creation = 0\n'
        )
    total = json.loads(cli("cost", "--format", "json").stdout)["total"]
    assert total["cost_usd"] == pytest.approx(0.009)


def test_onboarding_calls_are_counted(
    ws: Path, api_env: MessagesServer, cli: Callable[..., Result]
) -> None:
    onboarding = CHILD + "\n[onboarding]\nenabled = true\n"
    setup(ws, child=onboarding)
    api_env.enqueue(
        # An invalid step (no such field), then a valid one: both were paid for.
        tool_use_reply(("ask_caller", {"question": "x"}), input_tokens=100, output_tokens=10),
        tool_use_reply(("start_work", {}), input_tokens=200, output_tokens=20),
        text_reply("done", input_tokens=300, output_tokens=30),
    )
    assert cli("query", "--agent", "child", "go").code == 0
    conv = top_id(ws)
    ledger = (ws / "conversations" / conv / "usage.toml").read_text(encoding="utf-8")
    assert 'step = "onboarding round 1"' in ledger
    assert show(cli, conv)["usage"]["input_tokens"] == 600
    assert show(cli, conv)["usage"]["cost_usd"] == pytest.approx((600 * 3 + 60 * 15) / 1e6)
    row = json.loads(cli("tree", "--format", "json").stdout)[0]
    assert row["tokens"] == 660
    assert rgit(ws, "status", "--porcelain") == ""  # usage.toml is committed with the step


def test_a_fork_does_not_count_its_sources_spending_again(
    ws: Path, api_env: MessagesServer, cli: Callable[..., Result]
) -> None:
    setup(ws, child=CHILD)
    api_env.enqueue(text_reply("done", input_tokens=1000, output_tokens=100))
    assert cli("query", "--agent", "child", "go").code == 0
    source = top_id(ws)
    fork = cli("conversation", "fork", source)
    assert fork.code == 0, fork.stderr
    child = fork.stdout.strip()
    assert len(events(ws, child)) == 2  # the transcript is copied ...
    assert show(cli, child)["usage"]["input_tokens"] == 0  # ... its spending is not
    assert show(cli, source)["subtree_usage"]["input_tokens"] == 1000


# -- budgets ----------------------------------------------------------------------------------


def looping(server: MessagesServer, per_call_input: int = 1000) -> None:
    """Every agent calls a tool forever, each call 1,100 tokens."""
    server.responder = lambda request: tool_use_reply(
        ("jp_conversation_list", {}), input_tokens=per_call_input, output_tokens=100
    )


def test_a_runaway_loop_stops_at_its_budget_within_one_call(
    ws: Path, api_env: MessagesServer, cli: Callable[..., Result]
) -> None:
    setup(ws, child=CHILD.replace("max_turns = 40", "max_turns = 40\nbudget_tokens = 3000"))
    looping(api_env)
    result = cli("query", "--agent", "child", "loop")
    assert result.code == 1
    assert (
        "budget spent" in result.stderr and "3,300 tokens of budget_tokens = 3,000" in result.stderr
    )
    assert len(api_env.requests) == 3  # 0, 1,100 and 2,200 spent before them; then 3,300
    conv = top_id(ws)
    last = events(ws, conv)[-1]
    assert last.role == "error" and "budget_tokens" in last.body
    shown = show(cli, conv)
    assert shown["status"] == "failed" and "3,300 tokens of budget_tokens" in shown["error"]
    assert "error: budget spent" in cli("conversation", "show", conv).stdout
    # What the error says to do works: a larger budget, then new input, goes on.
    assert f"raise limits.budget_tokens in {conv}/conversation.toml" in result.stderr
    for path in (
        ws / ".jpfs" / "agents" / "child.toml",
        ws / "conversations" / conv / "conversation.toml",
    ):
        path.write_text(
            path.read_text(encoding="utf-8").replace("budget_tokens = 3000", "budget_tokens = 5000")
        )
    more = cli("query", "--id", conv, "go on")
    assert more.code == 1 and "5,500 tokens of budget_tokens = 5,000" in more.stderr
    assert len(api_env.requests) == 5  # two more calls: at 3,300 and 4,400 spent


def test_a_runaway_child_is_stopped_by_the_budget_its_caller_gave_it(
    ws: Path, api_env: MessagesServer, cli: Callable[..., Result]
) -> None:
    setup(ws, main=MAIN, child=CHILD)
    api_env.responder = (
        Router()
        .on_system(
            "You are MAIN",
            tool_use_reply(("jp_query", {"config": "child", "query": "loop",
                                         "budget_tokens": 2000}),
                           input_tokens=10, output_tokens=10),
            text_reply("main saw the failure", input_tokens=10, output_tokens=10),
        )
        .on_system("You are CHILD", lambda request: tool_use_reply(
            ("jp_conversation_list", {}), input_tokens=1000, output_tokens=100))
    )  # fmt: skip
    result = cli("query", "--agent", "main", "go")
    assert result.code == 0, result.stderr
    main = top_id(ws)
    child = only_child(ws, main)
    child_calls = [r for r in api_env.bodies if "You are CHILD" in json.dumps(r["system"])]
    assert len(child_calls) == 2  # 0 and 1,100 spent before them; 2,200 >= 2,000 after
    assert "budget_tokens = 2,000" in events(ws, child)[-1].body
    # The caller sees the error: its tool result, and its status mail with success false.
    failed = next(e for e in events(ws, main) if e.role == "tool")
    assert failed.meta["is_error"] and "budget spent" in failed.body
    inbox = list((ws / "conversations" / main / "inbox").glob("*.md"))
    status = json.loads(inbox[0].read_text(encoding="utf-8").split("+++", 2)[2])
    assert status["success"] is False and "budget" in status["summary"]
    assert status["usage"]["input_tokens"] == 2000


def test_an_ancestors_budget_stops_a_descendant_and_then_itself(
    ws: Path, api_env: MessagesServer, cli: Callable[..., Result]
) -> None:
    setup(ws, main=MAIN.replace("max_turns = 40", "max_turns = 40\nbudget_tokens = 4000"),
          child=CHILD)  # fmt: skip
    api_env.responder = (
        Router()
        .on_system("You are MAIN", tool_use_reply(
            ("jp_query", {"config": "child", "query": "loop"}), input_tokens=1000,
            output_tokens=100))
        .on_system("You are CHILD", lambda request: tool_use_reply(
            ("jp_conversation_list", {}), input_tokens=1000, output_tokens=100))
    )  # fmt: skip
    result = cli("query", "--agent", "main", "go")
    assert result.code == 1 and "budget spent" in result.stderr
    main = top_id(ws)
    child = only_child(ws, main)
    # main 1,100, then the child at 1,100 / 2,200 / 3,300 spent: 4,400 >= 4,000.
    assert len(api_env.requests) == 4
    assert f"{main} (whose subtree holds {child})" in events(ws, child)[-1].body
    assert "4,400 tokens of budget_tokens = 4,000" in events(ws, main)[-1].body


def test_a_child_budget_is_never_more_than_the_caller_has_left(
    ws: Path, api_env: MessagesServer, cli: Callable[..., Result]
) -> None:
    setup(ws, main=MAIN.replace("max_turns = 40", "max_turns = 40\nbudget_tokens = 5000"),
          child=CHILD)  # fmt: skip
    api_env.responder = Router().on_system(
        "You are MAIN",
        tool_use_reply(("jp_query", {"config": "child", "query": "x", "budget_tokens": 9000}),
                       input_tokens=1000, output_tokens=100),
        text_reply("ok", input_tokens=1, output_tokens=1),
    )  # fmt: skip
    assert cli("query", "--agent", "main", "go").code == 0
    main = top_id(ws)
    refused = next(e for e in events(ws, main) if e.role == "tool")
    assert refused.meta["is_error"]
    assert "budget_tokens = 9,000 is more than" in refused.body and "(3,900 tokens)" in refused.body
    assert not [p for p in (ws / "conversations" / main).iterdir() if p.name.startswith("c-")]


def test_budget_options_of_the_cli(
    ws: Path, api_env: MessagesServer, cli: Callable[..., Result]
) -> None:
    setup(ws, child=CHILD)
    looping(api_env)
    result = cli("query", "--agent", "child", "--budget-usd", "0.004", "loop")
    # 1,000 * 3 + 100 * 15 = $0.0045 per call: the second call is refused.
    assert result.code == 1 and "cost $0.0045 of budget_usd = 0.004" in result.stderr
    conv = top_id(ws)
    assert len(api_env.requests) == 1
    again = cli("query", "--id", conv, "--budget-tokens", "5", "more")
    assert again.code == 2 and "applies only to a new conversation" in again.stderr
    zero = cli("query", "--agent", "child", "--new", "--budget-usd", "0", "x")
    assert zero.code == 2 and "argument 'budget_usd' must be greater than 0" in zero.stderr


def test_a_dollar_budget_with_an_unpriced_model_is_refused_before_the_call(
    ws: Path, api_env: MessagesServer, cli: Callable[..., Result]
) -> None:
    setup(
        ws, prices=False, child=CHILD.replace("max_turns = 40", "max_turns = 40\nbudget_usd = 1.0")
    )
    result = cli("query", "--agent", "child", "x")
    assert result.code == 1
    assert "budget_usd = 1 cannot be kept: no price for model 'claude-test'" in result.stderr
    assert api_env.requests == []


def test_max_run_seconds_stops_a_model_call_in_flight(
    ws: Path, api_env: MessagesServer, cli: Callable[..., Result]
) -> None:
    setup(ws, child=CHILD.replace("max_turns = 40", "max_turns = 40\nmax_run_seconds = 1"))
    api_env.enqueue(text_reply("too late", delay=60))
    started = time.monotonic()
    result = cli("query", "--agent", "child", "x")
    took = time.monotonic() - started
    assert result.code == 1 and "max_run_seconds = 1 reached" in result.stderr
    assert took < 15
    assert events(ws, top_id(ws))[-1].role == "error"


@pytest.mark.parametrize(
    ("limits", "error"),
    [
        ("budget_tokens = 0", "limits.budget_tokens must be > 0"),
        ("budget_usd = -1.0", "limits.budget_usd must be > 0"),
        ('budget_usd = "lots"', "'limits.budget_usd' must be int/float"),
        ("max_run_seconds = nan", "limits.max_run_seconds must be > 0"),
    ],
)
def test_bad_limits_are_profile_errors(
    ws: Path, cli: Callable[..., Result], limits: str, error: str
) -> None:
    setup(ws, child=CHILD.replace("max_turns = 40", f"max_turns = 40\n{limits}"))
    result = cli("conversation", "new", "--agent", "child")
    assert result.code == 1 and error in result.stderr


def test_a_snapshot_may_not_drop_its_profiles_budget(
    ws: Path, api_env: MessagesServer, cli: Callable[..., Result]
) -> None:
    setup(ws, child=CHILD.replace("max_turns = 40", "max_turns = 40\nbudget_tokens = 3000"))
    assert cli("conversation", "new", "c1", "--agent", "child").code == 0
    toml = ws / "conversations" / "c1" / "conversation.toml"
    toml.write_text(toml.read_text(encoding="utf-8").replace("budget_tokens = 3000\n", ""),
                    encoding="utf-8")  # fmt: skip
    (ws / "conversations" / "c1" / "task.md").write_text("go\n", encoding="utf-8")
    result = cli("query", "--id", "c1", "")
    assert result.code == 1
    assert "limits.budget_tokens = no limit (the profile allows 3000)" in result.stderr
    assert api_env.requests == []


# -- through MCP and the daemon ---------------------------------------------------------------


def test_mcp_jp_query_carries_the_runs_usage_and_a_budget_error(
    ws: Path, api_env: MessagesServer, tmp_path: Path
) -> None:
    import anyio

    from tests.mcp.test_mcp import serve

    setup(ws, child=CHILD)
    api_env.responder = (
        Router()
        .on_last_user("answer once", text_reply("once", input_tokens=1000, output_tokens=100))
        .on_last_user("loop", lambda request: tool_use_reply(
            ("jp_conversation_list", {}), input_tokens=1000, output_tokens=100))
        .when(lambda request: True, lambda request: tool_use_reply(
            ("jp_conversation_list", {}), input_tokens=1000, output_tokens=100))
    )  # fmt: skip

    async def scenario() -> None:
        async with serve(ws, tmp_path / "err.log", "--agent", "child") as session:
            done = await session.call_tool("jp_query", {"config": "child", "query": "answer once"})
            assert not done.is_error
            assert done.meta is not None
            assert done.meta["jpfs/usage"] == {
                "input_tokens": 1000, "output_tokens": 100, "cache_read_input_tokens": 0,
                "cache_creation_input_tokens": 0, "cost_usd": 0.0045, "cost_note": None,
            }  # fmt: skip
            stopped = await session.call_tool(
                "jp_query", {"config": "child", "query": "loop", "budget_tokens": 2000}
            )
            text = "".join(getattr(c, "text", "") for c in stopped.content)
            assert stopped.is_error and "budget spent" in text and text.startswith("<error ")
            assert stopped.meta is not None and stopped.meta["jpfs/usage"]["input_tokens"] == 2000

    anyio.run(scenario)


def test_the_daemon_stops_a_runaway_and_serves_everyone_else(
    ws: Path, api_env: MessagesServer
) -> None:
    from tests.conftest import jpfs_subprocess, running_daemon, wait_until

    setup(ws, child=CHILD.replace("max_turns = 40", "max_turns = 40\nbudget_tokens = 3000"))
    from jpfs.core.config import set_in_file

    set_in_file(ws / ".jpfs" / "config.toml", "conversations.default_agent", '"child"')
    git(ws, "commit", "-qam", "default agent")
    api_env.responder = (
        Router()
        .when(lambda request: "runaway" in json.dumps(request["messages"][0]),
              lambda request: tool_use_reply(
                  ("jp_conversation_list", {}), input_tokens=1000, output_tokens=100))
        .when(lambda request: True, lambda request: text_reply("fine", input_tokens=10))
    )  # fmt: skip
    with running_daemon(ws):
        for name, task in (("runaway", "runaway"), ("calm", "be calm"), ("calm2", "be calm")):
            (ws / "conversations" / name).mkdir()
            (ws / "conversations" / name / "task.md").write_text(task + "\n", encoding="utf-8")

        def settled() -> bool:
            runaway = events(ws, "runaway")
            return bool(
                runaway and runaway[-1].role == "error"
                and all((ws / "conversations" / c / "result.md").exists() for c in ("calm", "calm2"))
            )  # fmt: skip

        wait_until(settled, timeout=60, message="the runaway stopped and the others answered")
        assert "budget_tokens = 3,000" in events(ws, "runaway")[-1].body
        runaway_calls = [r for r in api_env.bodies if "runaway" in json.dumps(r["messages"][0])]
        assert len(runaway_calls) == 3
        status = jpfs_subprocess("daemon", "status", "--format", "json", cwd=ws)
        assert json.loads(status.stdout)["running"] is True


def test_a_budget_holds_on_another_machine_that_shares_the_record(
    tmp_path: Path, ws: Path, api_env: MessagesServer, cli: Callable[..., Result]
) -> None:
    """Spending is read from the record: a clone that fetched it sees the budget spent
    and makes no call for new input."""
    from tests.conftest import clone_sharing, share_record

    setup(ws, child=CHILD.replace("max_turns = 40", "max_turns = 40\nbudget_tokens = 2000"))
    remote = share_record(tmp_path, ws, cli)
    looping(api_env)
    assert cli("query", "--agent", "child", "loop").code == 1
    conv = top_id(ws)
    calls = len(api_env.requests)
    assert calls == 2 and cli("sync").code == 0
    other = clone_sharing(remote, tmp_path / "other", cli)
    again = cli("query", "--id", conv, "try once more", cwd=other)
    assert again.code == 1 and "2,200 tokens of budget_tokens = 2,000" in again.stderr
    assert len(api_env.requests) == calls  # no call from the other machine
    shown = json.loads(cli("conversation", "show", conv, "--format", "json", cwd=other).stdout)
    assert shown["usage"]["input_tokens"] == 2000


def test_jpfs_fork_gives_a_child_a_budget_within_what_is_left(
    ws: Path, api_env: MessagesServer, cli: Callable[..., Result]
) -> None:
    setup(ws, child=CHILD.replace("max_turns = 40", "max_turns = 40\nbudget_tokens = 5000"))
    api_env.enqueue(text_reply("done", input_tokens=1000, output_tokens=100))
    assert cli("query", "--agent", "child", "go").code == 0
    parent = top_id(ws)
    refused = cli("fork", parent, "--budget-tokens", "9000", "--no-start", "-p", "more")
    assert refused.code == 1
    assert f"budget_tokens = 9,000 is more than {parent} has left (3,900 tokens)" in refused.stderr
    forked = cli("fork", parent, "--budget-tokens", "1000", "--no-start", "-p", "more")
    assert forked.code == 0, forked.stderr
    child = forked.stdout.strip()
    config = tomllib.loads((ws / "conversations" / child / "conversation.toml").read_text("utf-8"))
    assert config["config"]["limits"]["budget_tokens"] == 1000
