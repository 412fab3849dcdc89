"""The cost of calls to an OpenAI-compatible server (tests/chat_server.py): a call is
priced by the model the server says it ran, or by the model the profile asked for when
the server's name is that one under a gateway's prefix (``openai/gpt-4.1-mini``); never
by the asked name when the server ran another model."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jpfs.core import prices
from jpfs.core.conversation import Conversation
from tests.chat_server import ChatServer, call, chat_server, chat_text, chat_tool_calls
from tests.conftest import Result, git, rgit, write_profile

__all__ = ["chat_server"]  # the fixture

GATEWAY = """
model = "gpt-4.1-mini"
provider = "openai"
base_url = "{url}"
[onboarding]
enabled = true
"""
# gpt-4.1-mini's shipped price: 0.40 input, 1.60 output per million tokens.
COST = round((1000 * 0.40 + 100 * 1.60) / 1_000_000, 6)


@pytest.mark.parametrize(
    ("served", "asked", "billed"),
    [
        ("gpt-4.1-mini", "gpt-4.1-mini", "gpt-4.1-mini"),
        ("openai/gpt-4.1-mini", "gpt-4.1-mini", "gpt-4.1-mini"),
        ("gpt-4.1-mini-2025-04-14", "gpt-4.1-mini", "gpt-4.1-mini-2025-04-14"),  # priced
        ("", "gpt-4.1-mini", "gpt-4.1-mini"),  # the server named none
        ("llama3.1:8b", "gpt-4.1-mini", "llama3.1:8b"),  # routed elsewhere
        ("openai/gpt-4.1", "gpt-4.1-mini", "openai/gpt-4.1"),
        ("openai/my-model", "my-model", "openai/my-model"),  # nothing to gain
    ],
)
def test_billed_as(served: str, asked: str, billed: str) -> None:
    assert prices.billed_as(served, asked, prices.table()) == billed


def counted(served: str) -> Callable[[dict[str, Any]], Any]:
    """Onboarding says ready at once, then the answer; every call 1000 + 100 tokens,
    the model named ``served``."""

    def respond(request: dict[str, Any]) -> Any:
        tools = [t["function"]["name"] for t in request.get("tools") or []]
        usage = {"model": served, "prompt_tokens": 1000, "completion_tokens": 100}
        if "start_work" in tools:
            return chat_tool_calls(call("start_work", {}), **usage)
        return chat_text("the answer", **usage)

    return respond


@pytest.fixture
def gateway(ws: Path, chat_server: ChatServer) -> ChatServer:
    write_profile(ws, "gw", GATEWAY.format(url=chat_server.url), allowed=True)
    git(ws, "add", "-A")
    git(ws, "commit", "-q", "-m", "a gateway agent")
    return chat_server


def run(cli: Callable[..., Result], ws: Path) -> tuple[Conversation, dict[str, Any]]:
    done = cli("query", "--new", "--agent", "gw", "--non-interactive", "go")
    assert done.code == 0, done.stderr
    (path,) = [p for p in (ws / "conversations").iterdir() if p.name.startswith("c-")]
    shown = cli("conversation", "show", path.name, "--format", "json")
    assert shown.code == 0, shown.stderr
    return Conversation(ws / "conversations", path.name), json.loads(shown.stdout)["usage"]


def test_a_gateways_name_for_the_asked_model_is_priced_as_it(
    ws: Path, cli: Callable[..., Result], gateway: ChatServer
) -> None:
    gateway.responder = counted("openai/gpt-4.1-mini")
    conv, usage = run(cli, ws)
    # The record keeps the name the server gave; the price is the asked model's.
    (turn,) = [e for e in conv.events() if e.role == "assistant"]
    assert turn.meta["model"] == "openai/gpt-4.1-mini"
    assert turn.meta["usage"]["cost_usd"] == COST
    (step,) = tomllib.loads(conv.read("usage.toml") or "")["call"]
    assert step["model"] == "openai/gpt-4.1-mini" and step["cost_usd"] == COST
    assert usage["cost_usd"] == 2 * COST and usage["cost_note"] is None
    # `jpfs log` reads the commits' trailers: the same prices.
    log = rgit(ws, "log", "--format=%(trailers:key=Jpfs-Usage,valueonly)")
    assert log.count(f"cost_usd={COST:.6f}") == 2


def test_another_model_served_under_the_asked_name_has_no_price(
    ws: Path, cli: Callable[..., Result], gateway: ChatServer
) -> None:
    gateway.responder = counted("llama3.1:8b")
    conv, usage = run(cli, ws)
    (turn,) = [e for e in conv.events() if e.role == "assistant"]
    assert turn.meta["model"] == "llama3.1:8b" and "cost_usd" not in turn.meta["usage"]
    assert usage["cost_usd"] is None and "'llama3.1:8b'" in usage["cost_note"]
    assert "cost_usd=" not in rgit(ws, "log", "--format=%(trailers:key=Jpfs-Usage,valueonly)")
