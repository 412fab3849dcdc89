"""What Chat Completions servers refuse, for the local test server (:mod:`tests.chat_server`).

The counterpart of :mod:`tests.api_rules`: pure functions, a request body in, ``None``
or a :class:`Refusal` (OpenAI's ``param`` and ``code`` included) out, with the texts of
OpenAI's API (the pairing rules, the context window) and vLLM (the window with the
completion's tokens: OpenAI's own words that one differently now).
"""

from __future__ import annotations

from typing import Any

from tests.api_thinking import JsonDict, Refusal, tokens

CHAT_WINDOW = 131_072


def _role(message: Any) -> Any:
    return message.get("role") if isinstance(message, dict) else None


def chat_prompt_tokens(body: JsonDict) -> int:
    """The prompt's size by the stand-in tokenizer: its messages and tools."""
    parts = [*(body.get("messages") or []), *(body.get("tools") or [])]
    return sum(tokens(p) for p in parts)


def _chat_pairing(messages: list[Any]) -> Refusal | None:
    calls: list[Any] = []  # the ids the tool messages now running may answer
    for i, message in enumerate(messages):
        role = _role(message)
        if role == "tool":
            param = f"messages.[{i}].role"
            if not calls:
                # Verbatim (the brief's research), "preceeding" included.
                return Refusal(
                    "Invalid parameter: messages with role 'tool' must be a response to a"
                    " preceeding message with 'tool_calls'.",
                    param=param,
                )
            if message.get("tool_call_id") not in calls:
                # Exact text not verified (as remembered from the API).
                return Refusal(
                    f"Invalid parameter: 'tool_call_id' of '{message.get('tool_call_id')}'"
                    " not found in 'tool_calls' of previous message.",
                    param=f"messages.[{i}].tool_call_id",
                )
            continue
        calls = []
        wanted = [c.get("id") for c in (message.get("tool_calls") or []) if isinstance(c, dict)]
        if role != "assistant" or not wanted:
            continue
        answered = set()
        for later in messages[i + 1 :]:
            if _role(later) != "tool":
                break
            answered.add(later.get("tool_call_id"))
        missing = [str(x) for x in wanted if x not in answered]
        if missing:
            return Refusal(
                "An assistant message with 'tool_calls' must be followed by tool messages"
                " responding to each 'tool_call_id'. The following tool_call_ids did not have"
                f" response messages: {', '.join(missing)}",
                param=f"messages.[{i}].role",
            )
        calls = wanted
    return None


def check_chat(body: JsonDict, window: int) -> Refusal | None:
    """A ``POST /v1/chat/completions`` body as OpenAI judges it (the window's second text
    is vLLM's: OpenAI's own now words it differently)."""
    messages = body.get("messages")
    refused = _chat_pairing(messages) if isinstance(messages, list) else None
    if refused:
        return refused
    size = chat_prompt_tokens(body)
    asked = body.get("max_completion_tokens") or body.get("max_tokens") or 0
    head = f"This model's maximum context length is {window} tokens. However, "
    if size > window:
        return Refusal(
            f"{head}your messages resulted in {size} tokens. Please reduce the length of the"
            " messages.",
            param="messages",
            code="context_length_exceeded",
        )
    if isinstance(asked, int) and size + asked > window:
        return Refusal(
            f"{head}you requested {size + asked} tokens ({size} in the messages, {asked} in the"
            " completion). Please reduce the length of the messages or completion.",
            param="messages",
            code="context_length_exceeded",
        )
    return None
