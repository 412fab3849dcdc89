"""Helpers shared by the seed tests: scripted model turns and reading requests."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from tests.messages_server import Answer, content_text, conversation_of, tool_results

__all__ = ["conversation_of"]  # re-exported: the seeds' tests route by conversation

JsonDict = dict[str, Any]
Step = Answer | Callable[[JsonDict], Answer]

ID = re.compile(r'conversation_id="([^"]+)"')
PLACEHOLDER = "(no reply)"


def turn_of(request: JsonDict) -> int:
    """How many model turns this conversation already had: its assistant messages."""
    return sum(1 for m in request.get("messages", []) if m.get("role") == "assistant")


def by_turn(*steps: Step) -> Callable[[JsonDict], Answer]:
    """A stateless responder: the Nth model turn of a conversation gets ``steps[N]``
    (like the script provider, so a conversation continued later goes on where it was)."""

    def respond(request: JsonDict) -> Answer:
        step = steps[turn_of(request)]
        return step(request) if callable(step) else step

    return respond


def last_result(request: JsonDict) -> str:
    """The text of the last tool result the request sends back to the model."""
    results = tool_results(request)
    assert results, "the request carries no tool result"
    return content_text(results[-1].get("content", "")).rstrip("\n")


def all_text(request: JsonDict) -> list[str]:
    """Every text block of every message, as the model sees them."""
    out: list[str] = []
    for message in request.get("messages", []):
        content = message.get("content")
        if isinstance(content, str):
            out.append(content)
            continue
        for block in content or []:
            if block.get("type") == "text":
                out.append(str(block.get("text", "")))
    return out


def tool_names(request: JsonDict) -> list[str]:
    return [str(t["name"]) for t in request.get("tools", [])]


def result_json(request: JsonDict) -> Any:
    return json.loads(last_result(request))
