"""Event files -> provider messages (Anthropic content blocks), and back.

    user event       -> {"role": "user", "content": [text]}
    assistant event  -> {"role": "assistant", "content": [thinking..., text?, tool_use...]}
    tool event       -> a tool_result block; consecutive ones share one user message
    error event      -> not sent to the model (it is for the humans)

Consecutive messages of one role are merged, because the Messages API requires
user and assistant turns to alternate. An assistant event's thinking blocks (its
``thinking`` front matter: each block as the API returned it) go back first in its
message, byte for byte: the API refuses a tool loop whose last assistant message does
not start with its thinking. What the request leaves out to fit the model's window is
:mod:`jpfs.core.view`'s choice, given here as ``notes`` and ``unthought``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from jpfs.core.conversation import Event

JsonDict = dict[str, Any]
THINKING = ("thinking", "redacted_thinking")


def assistant_content(
    text: str, calls: Sequence[Mapping[str, Any]], thinking: Sequence[JsonDict] = ()
) -> list[JsonDict]:
    """An assistant message's blocks: its thinking first, as received, then its text and
    tool calls."""
    blocks: list[JsonDict] = [dict(block) for block in thinking]
    if text.strip():
        blocks.append({"type": "text", "text": text})
    for call in calls:
        blocks.append(
            {"type": "tool_use", "id": call["id"], "name": call["name"], "input": call["input"]}
        )
    return blocks


def to_messages(
    events: Sequence[Event],
    *,
    notes: Mapping[int, str] | None = None,
    unthought: Collection[int] = (),
) -> list[JsonDict]:
    """The messages of ``events``; ``notes``: tool events (by seq) sent as this text
    instead of their result; ``unthought``: assistant events sent without their
    thinking."""
    messages: list[JsonDict] = []
    notes = notes or {}

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
            thinking = () if ev.seq in unthought else thinking_of(ev)
            blocks = assistant_content(ev.body, ev.tool_calls, thinking)
            if not any(b["type"] in ("text", "tool_use") for b in blocks):
                blocks.append({"type": "text", "text": "(no reply)"})
            add("assistant", blocks)
        elif ev.role == "tool":
            block: JsonDict = {
                "type": "tool_result",
                "tool_use_id": str(ev.meta.get("tool_call_id", "")),
                "content": notes.get(ev.seq, ev.body),
            }
            if ev.meta.get("is_error"):
                block["is_error"] = True
            add("user", [block])
    return messages


def thinking_of(ev: Event) -> list[JsonDict]:
    """An assistant event's thinking blocks, as recorded (the API's, byte for byte)."""
    blocks = ev.meta.get("thinking")
    if not isinstance(blocks, list):
        return []
    return [dict(b) for b in blocks if isinstance(b, dict) and b.get("type") in THINKING]


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
