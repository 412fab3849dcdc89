"""Event files -> provider messages (Anthropic content blocks), and back.

    user event       -> {"role": "user", "content": [text]}
    assistant event  -> {"role": "assistant", "content": [text?, tool_use...]}
    tool event       -> a tool_result block; consecutive ones share one user message
    error event      -> not sent to the model (it is for the humans)

Consecutive messages of one role are merged, because the Messages API requires
user and assistant turns to alternate.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jpfs.core.conversation import Event

JsonDict = dict[str, Any]


def to_messages(events: Sequence[Event]) -> list[JsonDict]:
    messages: list[JsonDict] = []

    def add(role: str, blocks: list[JsonDict]) -> None:
        if not blocks:
            return
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].extend(blocks)
        else:
            messages.append({"role": role, "content": blocks})

    for ev in events:
        if ev.role == "user":
            add("user", [{"type": "text", "text": ev.body}])
        elif ev.role == "assistant":
            blocks: list[JsonDict] = []
            if ev.body.strip():
                blocks.append({"type": "text", "text": ev.body})
            for call in ev.tool_calls:
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": call["id"],
                        "name": call["name"],
                        "input": call["input"],
                    }
                )
            add("assistant", blocks or [{"type": "text", "text": "(no reply)"}])
        elif ev.role == "tool":
            block: JsonDict = {
                "type": "tool_result",
                "tool_use_id": str(ev.meta.get("tool_call_id", "")),
                "content": ev.body,
            }
            if ev.meta.get("is_error"):
                block["is_error"] = True
            add("user", [block])
    return messages


def pending_tool_calls(events: Sequence[Event]) -> list[JsonDict]:
    """Tool calls of the last assistant event that have no result event yet.

    After a crash mid-tools these are exactly the calls to (re)run; finished ones
    are never repeated.
    """
    for i in range(len(events) - 1, -1, -1):
        ev = events[i]
        if ev.role == "assistant":
            done = {e.meta.get("tool_call_id") for e in events[i + 1 :] if e.role == "tool"}
            return [c for c in ev.tool_calls if c["id"] not in done]
        if ev.role == "user":
            return []
    return []
