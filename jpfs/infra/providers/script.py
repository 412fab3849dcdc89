"""A deterministic, offline provider whose replies come from the profile.

    [script]
    delay = 0.0                      # seconds per turn (cancellable), default 0

    [[script.onboarding]]            # onboarding round N uses entry N
    questions = ["Which module?"]    # ask the caller...
    assumptions = ["Python 3.11"]
    # ready = true                   # ...or declare ready (also: past the last entry)

    [[script.turns]]                 # the Nth model turn of a run uses entry N
    text = "Delegating: {input}"
    tool_calls = [{ name = "jp_query", input = { config = "researcher", query = "{input}" } }]

    [[script.turns]]
    text = "Done. {results}"         # a turn without tool_calls is the final answer

An entry with ``when = "regex"`` is used only in runs whose last user text matches
it (case-insensitively), so one helper script can branch on its task.

Placeholders: ``{task}`` the run's first user text, ``{input}`` the last user text,
``{results}`` the previous turn's tool results, ``{conversation}`` the conversation id.
An entry may also say ``error = "..."`` (the provider fails) or ``delay = 1.5``.
The script is stateless: the turn number is read from the messages, so a run resumed
after a crash continues at the right entry. Its tool calls are real calls into jpfs.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Mapping
from typing import Any

from jpfs.errors import Cancelled, ProviderError
from jpfs.infra.providers.base import JsonDict, Reply, Request, ToolCall, Usage


class _Blank(dict[str, str]):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def _fill(value: Any, values: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        return value.format_map(_Blank(values))
    if isinstance(value, list):
        return [_fill(v, values) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, values) for k, v in value.items()}
    return value


def _text_of(message: JsonDict) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text", "") for b in content or [] if b.get("type") == "text")


def _is_plain_user(message: JsonDict) -> bool:
    if message.get("role") != "user":
        return False
    content = message.get("content")
    if isinstance(content, str):
        return True
    return not any(b.get("type") == "tool_result" for b in content or [])


def _results_of(message: JsonDict) -> str:
    out = []
    for block in message.get("content") or []:
        if isinstance(block, dict) and block.get("type") == "tool_result":
            content = block.get("content")
            out.append(content if isinstance(content, str) else json.dumps(content))
    return "\n".join(out)


class ScriptProvider:
    def __init__(self, script: Mapping[str, Any]) -> None:
        self.script = script
        self.delay = float(script.get("delay", 0.0))

    def _wait(self, seconds: float, cancel: threading.Event) -> None:
        if seconds > 0 and cancel.wait(seconds):
            raise Cancelled("cancelled")
        if cancel.is_set():
            raise Cancelled("cancelled")

    def complete(self, request: Request, cancel: threading.Event) -> Reply:
        messages = request.messages
        plain = [i for i, m in enumerate(messages) if _is_plain_user(m)]
        start = plain[-1] if plain else 0
        turn = sum(1 for m in messages[start:] if m.get("role") == "assistant")
        values = {
            "task": _text_of(messages[plain[0]]).strip() if plain else "",
            "input": _text_of(messages[start]).strip() if messages else "",
            "results": _results_of(messages[-1]).strip() if messages else "",
            "conversation": str(request.metadata.get("conversation", "")),
        }
        usage = Usage(sum(len(_text_of(m)) for m in messages) // 4 + 1, 0)
        if request.phase == "onboarding":
            return self._onboarding(request, values, usage, cancel)
        entries = [
            e
            for e in self.script.get("turns", [])
            if not e.get("when") or re.search(str(e["when"]), values["input"], re.IGNORECASE)
        ]
        finals = [e for e in entries if not e.get("tool_calls")]
        if turn < len(entries):
            entry = entries[turn]
        elif finals:
            entry = finals[-1]
        else:
            entry = {"text": "(script finished)"}
        self._wait(float(entry.get("delay", self.delay)), cancel)
        if entry.get("error"):
            raise ProviderError(f"script provider: {_fill(entry['error'], values)}")
        text = str(_fill(entry.get("text", ""), values))
        calls = []
        for n, call in enumerate(entry.get("tool_calls", [])):
            seed = f"{values['conversation']}|{len(messages)}|{n}|{call.get('name')}"
            call_id = "toolu_" + hashlib.sha1(seed.encode()).hexdigest()[:20]
            calls.append(
                ToolCall(call_id, str(call["name"]), _fill(dict(call.get("input", {})), values))
            )
        usage = Usage(usage.input_tokens, len(text) // 4 + 1)
        stop = "tool_use" if calls else "end_turn"
        return Reply(text, tuple(calls), usage, request.model, stop)

    def _onboarding(
        self, request: Request, values: Mapping[str, str], usage: Usage, cancel: threading.Event
    ) -> Reply:
        round_no = int(request.metadata.get("round", 1))
        entries = list(self.script.get("onboarding", []))
        entry = entries[round_no - 1] if round_no <= len(entries) else {"ready": True}
        self._wait(float(entry.get("delay", self.delay)), cancel)
        if entry.get("error"):
            raise ProviderError(f"script provider: {_fill(entry['error'], values)}")
        assumptions = list(_fill(entry.get("assumptions", []), values))
        if entry.get("ready") or not entry.get("questions"):
            args: JsonDict = {"assumptions": assumptions, "note": str(entry.get("note", ""))}
            call = ToolCall(f"toolu_ready_{round_no}", "start_work", args)
        else:
            args = {
                "questions": list(_fill(entry["questions"], values)),
                "assumptions": assumptions,
            }
            call = ToolCall(f"toolu_ask_{round_no}", "ask_caller", args)
        return Reply("", (call,), usage, request.model, "tool_use")
