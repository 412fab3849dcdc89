"""``print``: a conversation rendered for a human (markdown) or a program (JSON)."""

from __future__ import annotations

import json
from typing import Any

from jpfs import tree
from jpfs.conversation import ANSWERS, QUESTIONS, RESULT, TASK, Conversation, Event


def _event_header(ev: Event) -> str:
    bits = [f"{ev.seq:04d}", ev.role]
    if ev.role == "assistant":
        if ev.meta.get("model"):
            bits.append(str(ev.meta["model"]))
        usage = ev.meta.get("usage")
        if isinstance(usage, dict):
            bits.append(f"in={usage.get('input_tokens', 0)} out={usage.get('output_tokens', 0)}")
    if ev.role == "tool":
        bits.append(str(ev.meta.get("tool_name", "")))
        if ev.meta.get("is_error"):
            bits.append("error")
    return "### " + " · ".join(b for b in bits if b)


def render_event(ev: Event) -> str:
    parts = [_event_header(ev), "", ev.body.rstrip()]
    for call in ev.tool_calls:
        parts.append(f"- tool call `{call['name']}` {json.dumps(call['input'], sort_keys=True)}")
    return "\n".join(parts).rstrip() + "\n"


def markdown(conv: Conversation, last: int | None = None) -> str:
    info = tree.info(conv)
    out = [
        f"# {info.title or conv.id}",
        "",
        f"id: {conv.id} · agent: {info.agent} · state: {info.status}",
        "",
    ]
    if last is None:
        for name, heading in ((TASK, "Task"), (QUESTIONS, "Questions"), (ANSWERS, "Answers")):
            text = conv.read(name)
            if text:
                out += [f"## {heading}", "", text.strip(), ""]
    events = conv.events(last=last)
    if events:
        out += ["## Events", ""]
        out += [render_event(ev) for ev in events]
    elif last is None and (result := conv.read(RESULT)):
        out += ["## Result", "", result.strip(), ""]
    return "\n".join(out).rstrip() + "\n"


def as_json(conv: Conversation, last: int | None = None) -> dict[str, Any]:
    data: dict[str, Any] = tree.info(conv).to_json()
    for name in (TASK, QUESTIONS, ANSWERS):
        data[name.removesuffix(".md")] = conv.read(name)
    data["events"] = [ev.to_json() for ev in conv.events(last=last)]
    return data
