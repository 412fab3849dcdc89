"""What the Messages API refuses, for the local test server.

Pure functions: a request body in, what the model sees or a :class:`Refusal` out,
with the real API's error texts. :mod:`tests.messages_server` runs them on every
request before the scripted answer; a refusal is a 400 that consumes no scripted reply.
Thinking signatures are :mod:`tests.api_thinking`'s, re-exported here with its builders;
the Chat Completions rules are :mod:`tests.api_chat_rules`'s.

Where a text below was seen in real API errors it is copied verbatim; where none was
found the comment says so and the text is written in the API's style.

The Messages rules are per model (:class:`ModelRules`); :data:`MODELS` is the shipped
table, a server's ``models`` a copy that tests may add to::

    messages_server.models["tiny"] = ModelRules(context_window=2_000, count_usage=True)
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from tests.api_thinking import (
    JsonDict,
    Refusal,
    check_echoed,
    content_blocks,
    is_thinking,
    redacted_thinking_block,
    thinking_block,
    tokens,
)

__all__ = [
    "MODELS",
    "Accepted",
    "JsonDict",
    "ModelRules",
    "Refusal",
    "check_messages",
    "prompt_blocks",
    "prompt_tokens",
    "redacted_thinking_block",
    "rules_for",
    "thinking_block",
    "thinking_on",
    "tokens",
]

EFFORTS = ("low", "medium", "high", "xhigh", "max")
BINDING_BETA = "thinking-binding-controls-2026-08-01"
INTERLEAVED_BETA = "interleaved-thinking-2025-05-14"
# Tools may change mid-conversation without invalidating the prefix before the change:
# inferred from the docs on caching (not on thinking), a change of the tool list then
# invalidates no thinking block. Claude Code sends it, and loads deferred tools as it goes.
TOOL_CHANGES_BETA = "mid-conversation-tool-changes-2026-07-01"


@dataclass(frozen=True)
class ModelRules:
    """What one model accepts. ``thinking``: ``"none"`` (refuses thinking),
    ``"optional"`` (off unless asked), ``"adaptive-only"`` (on by default, refuses
    ``enabled`` and ``disabled``). ``preserved``: thinking blocks are bound to their
    conversation (preserved thinking). ``budget_thinking``/``adaptive_thinking``: accepts
    ``thinking.type`` ``enabled`` (with ``budget_tokens``) / ``adaptive``. ``efforts``:
    the ``output_config.effort`` values accepted (none: effort refused).
    ``count_usage``: the reply's ``usage.input_tokens`` is the computed prompt size, not
    the script's. ``system_messages``: ``role: "system"`` messages are accepted.
    ``show_thinking``: thinking text is shown unless ``thinking.display`` says
    ``"omitted"`` (False: shown only when it says ``"summarized"``)."""

    context_window: int = 200_000
    thinking: Literal["none", "optional", "adaptive-only"] = "optional"
    preserved: bool = False
    budget_thinking: bool = True
    efforts: tuple[str, ...] = EFFORTS
    count_usage: bool = False
    system_messages: bool = False
    adaptive_thinking: bool = True
    show_thinking: bool = True


_FIVE = ModelRules(
    1_000_000, "adaptive-only", budget_thinking=False, system_messages=True, show_thinking=False
)
_FOUR_SIX = ModelRules(1_000_000, efforts=("low", "medium", "high", "max"))
MODELS: Mapping[str, ModelRules] = {
    "claude-fable-5": _FIVE,
    "claude-mythos-5": _FIVE,
    "claude-fable-5-1": replace(_FIVE, preserved=True),
    "claude-mythos-5-1": replace(_FIVE, preserved=True),
    "claude-opus-4-6": _FOUR_SIX,
    "claude-sonnet-4-6": _FOUR_SIX,
    "claude-haiku-4-5": ModelRules(200_000, efforts=(), adaptive_thinking=False),
    # The model Claude Code asks for (tests/mcp/test_client_claude_code.py): preserved
    # thinking that cannot be turned off, mid-conversation system messages.
    "claude-opus-5-5": replace(_FIVE, preserved=True),
}


def rules_for(models: Mapping[str, ModelRules], default: ModelRules, model: Any) -> ModelRules:
    """The rules of ``model``; a dated name (``claude-haiku-4-5-20251001``) falls back to
    its alias, an unknown one to ``default``."""
    name = str(model)
    found = models.get(name) or models.get(re.sub(r"-\d{8}$", "", name))
    return found or default


@dataclass(frozen=True)
class Accepted:
    """A request the API takes: whether the model thinks (and shows the text), the
    prompt's size, and ``input_transformations`` (thinking blocks dropped) for the reply."""

    thinking_on: bool
    shown: bool
    prompt_tokens: int
    transformations: list[JsonDict] = field(default_factory=list)


# --- the prompt -----------------------------------------------------------------------


def _without_marks(part: Any) -> Any:
    if isinstance(part, dict):
        return {k: _without_marks(v) for k, v in part.items() if k != "cache_control"}
    if isinstance(part, list):
        return [_without_marks(v) for v in part]
    return part


def prompt_blocks(request: JsonDict) -> list[tuple[Any, bool]]:
    """The prompt in the order the API caches it (tools, system, messages), one item per
    block with whether it carries a ``cache_control`` breakpoint."""
    blocks: list[tuple[Any, bool]] = []
    for tool in request.get("tools") or []:
        blocks.append((_without_marks(tool), "cache_control" in tool))
    system = request.get("system")
    if isinstance(system, str) and system:
        blocks.append(({"type": "text", "text": system}, False))
    elif isinstance(system, list):
        blocks.extend((_without_marks(b), "cache_control" in b) for b in system)
    for message in request.get("messages") or []:
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        for block in content or []:
            marked = isinstance(block, dict) and "cache_control" in block
            blocks.append(({"role": message.get("role"), **_without_marks(block)}, marked))
    return blocks


def _is(block: Any, kind: str) -> bool:
    return isinstance(block, dict) and block.get("type") == kind


def prompt_tokens(body: JsonDict, rules: ModelRules) -> int:
    """The prompt's size by the stand-in tokenizer. Thinking from turns before the latest
    user input is not counted (the API ignores it), except on ``preserved`` models."""
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    if not rules.preserved:
        turn = max(
            (i for i, m in enumerate(messages) if m.get("role") == "user"
             and any(not _is(b, "tool_result") for b in content_blocks(m))),
            default=0,
        )  # fmt: skip
        messages = [
            {**m, "content": [b for b in content_blocks(m) if not is_thinking(b)]}
            if i < turn and m.get("role") == "assistant" else m
            for i, m in enumerate(messages)
        ]  # fmt: skip
    return sum(tokens(b) for b, _ in prompt_blocks({**body, "messages": messages}))


# --- the Messages API -----------------------------------------------------------------


def thinking_on(body: JsonDict, rules: ModelRules) -> bool:
    """Whether the model thinks: asked to, or an adaptive-only model not told otherwise."""
    config = body.get("thinking")
    if isinstance(config, dict):
        return config.get("type") in ("adaptive", "enabled")
    return config is None and rules.thinking == "adaptive-only"


def _not_supported(kind: str, use: str) -> Refusal:
    return Refusal(
        f'"thinking.type.{kind}" is not supported for this model. Use {use} to control'
        " thinking behavior."
    )


_ADAPTIVE = '"thinking.type.adaptive" and "output_config.effort"'
_BUDGET = '"thinking.type.enabled" and "thinking.budget_tokens"'


def _thinking_config(body: JsonDict, rules: ModelRules, betas: Collection[str]) -> Refusal | None:
    config = body.get("thinking")
    if config is not None:
        if not isinstance(config, dict):
            return Refusal("thinking: Input should be a valid dictionary")
        kind = config.get("type")
        if kind not in ("adaptive", "enabled", "disabled"):
            # Exact text not found; pydantic's wording for a bad union tag.
            return Refusal(
                f"thinking: Input tag '{kind}' found using 'type' does not match any of the"
                " expected tags: 'adaptive', 'disabled', 'enabled'"
            )
        if rules.thinking == "none" and kind != "disabled":
            # Exact text not found.
            return Refusal(f'"thinking.type.{kind}" is not supported for this model.')
        if kind == "enabled" and not rules.budget_thinking:
            # Verbatim (anthropics/claude-code#49219 and others).
            return _not_supported("enabled", _ADAPTIVE)
        if kind == "disabled" and rules.thinking == "adaptive-only":
            # Exact text not found: written like the "enabled" one.
            return _not_supported("disabled", _ADAPTIVE)
        if kind == "adaptive" and not rules.adaptive_thinking:
            # Exact text not found: written like the "enabled" one.
            return _not_supported("adaptive", _BUDGET)
        if kind == "enabled":
            budget = config.get("budget_tokens")
            if not isinstance(budget, int):
                return Refusal("thinking.enabled.budget_tokens: Field required")
            if budget < 1024:
                return Refusal(
                    "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
                )
            max_tokens = body.get("max_tokens")
            if (
                INTERLEAVED_BETA not in betas
                and isinstance(max_tokens, int)
                and budget >= max_tokens
            ):
                return Refusal(
                    "`max_tokens` must be greater than `thinking.budget_tokens`. Please consult"
                    " our documentation at https://docs.claude.com/en/docs/build-with-claude/"
                    "extended-thinking#max-tokens-and-context-window-size"
                )
    effort = (body.get("output_config") or {}).get("effort")
    if effort is not None:
        # Exact texts not found: pydantic's for a bad value, the API's style otherwise.
        if effort not in EFFORTS:
            return Refusal(
                "output_config.effort: Input should be 'low', 'medium', 'high', 'xhigh' or 'max'"
            )
        if not rules.efforts:
            return Refusal("output_config.effort: effort is not supported for this model")
        if effort not in rules.efforts:
            return Refusal(
                f"output_config.effort: effort '{effort}' is not supported for this model"
            )
    choice = body.get("tool_choice")
    if (
        thinking_on(body, rules)
        and isinstance(choice, dict)
        and choice.get("type") in ("any", "tool")
    ):
        return Refusal("Thinking may not be enabled when tool_choice forces tool use.")
    return None


def _structure(messages: list[Any], rules: ModelRules) -> Refusal | None:
    """Roles, tool_use/tool_result pairing, thinking first in an assistant message."""
    roles = ("user", "assistant", "system") if rules.system_messages else ("user", "assistant")
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in roles:
            quoted = [f"'{r}'" for r in roles]
            allowed = f"{', '.join(quoted[:-1])} or {quoted[-1]}"
            return Refusal(f"messages.{i}.role: Input should be {allowed}")
        blocks = content_blocks(message)
        if role == "assistant":
            if any(is_thinking(b) for b in blocks) and not is_thinking(blocks[0]):
                # Verbatim (lbjlaq/Antigravity-Manager#653).
                return Refusal(
                    f"messages.{i}.content.0: If an assistant message contains any thinking"
                    f" blocks, the first block must be thinking or redacted_thinking. Found"
                    f" {_type(blocks[0])}."
                )
            refused = _results_follow(
                messages, i, [b.get("id") for b in blocks if _is(b, "tool_use")]
            )
            if refused:
                return refused
        elif role == "user":
            before = (
                content_blocks(messages[i - 1])
                if i and _role(messages[i - 1]) == "assistant"
                else []
            )
            calls = {b.get("id") for b in before if _is(b, "tool_use")}
            for j, block in enumerate(blocks):
                if _is(block, "tool_result") and block.get("tool_use_id") not in calls:
                    # Verbatim (router-for-me/CLIProxyAPI#497).
                    return Refusal(
                        f"messages.{i}.content.{j}: unexpected `tool_use_id` found in"
                        f" `tool_result` blocks: {block.get('tool_use_id')}. Each `tool_result`"
                        " block must have a corresponding `tool_use` block in the previous message."
                    )
    return None


def _role(message: Any) -> Any:
    return message.get("role") if isinstance(message, dict) else None


def _type(block: Any) -> str:
    return str(block.get("type")) if isinstance(block, dict) else "text"


def _results_follow(messages: list[Any], i: int, ids: list[Any]) -> Refusal | None:
    if not ids:
        return None
    after = messages[i + 1] if i + 1 < len(messages) else None
    blocks = content_blocks(after) if _role(after) == "user" else []
    answered = {b.get("tool_use_id") for b in blocks if _is(b, "tool_result")}
    missing = [str(x) for x in ids if x not in answered]
    if missing:
        # Verbatim (anthropics/claude-code#1237 and others).
        return Refusal(
            f"messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately"
            f" after: {', '.join(missing)}. Each `tool_use` block must have a corresponding"
            " `tool_result` block in the next message."
        )
    kinds = [_is(b, "tool_result") for b in blocks]
    leading = kinds.index(False) if False in kinds else len(kinds)
    if leading < sum(kinds):
        # Verbatim (anthropics/claude-code#37, 2025; the API's wording may have changed).
        return Refusal(
            f"messages.{i + 1}: Did not find {len(ids)} `tool_result` block(s) at the beginning"
            " of this message. Messages following `tool_use` blocks must begin with a matching"
            " number of `tool_result` blocks."
        )
    return None


def _marks(body: JsonDict) -> int:
    def marked(block: Any) -> int:
        if not isinstance(block, dict):
            return 0
        inner = block.get("content") if block.get("type") == "tool_result" else None
        nested = sum(marked(b) for b in inner) if isinstance(inner, list) else 0
        return int(bool(block.get("cache_control"))) + nested

    system = body.get("system")
    found = sum(marked(t) for t in body.get("tools") or [])
    found += sum(marked(b) for b in system) if isinstance(system, list) else 0
    for message in body.get("messages") or []:
        found += sum(marked(b) for b in content_blocks(message)) if isinstance(message, dict) else 0
    return found


def _tool_loop(messages: list[Any]) -> Refusal | None:
    """In a tool loop, the final assistant message starts with thinking."""
    if not messages or _role(messages[-1]) != "user":
        return None
    if not any(_is(b, "tool_result") for b in content_blocks(messages[-1])):
        return None
    i = max((k for k, m in enumerate(messages) if _role(m) == "assistant"), default=-1)
    blocks = content_blocks(messages[i]) if i >= 0 else []
    if not blocks or is_thinking(blocks[0]):
        return None
    # Verbatim (Kilo-Org/kilocode#5219), "preceeding" included.
    return Refusal(
        f"messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, but found"
        f" `{_type(blocks[0])}`. When `thinking` is enabled, a final `assistant` message must"
        " start with a thinking block (preceeding the lastmost set of `tool_use` and"
        " `tool_result` blocks). We recommend you include thinking blocks from previous turns."
        " To avoid this requirement, disable `thinking`. Please consult our documentation at"
        " https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
    )


def check_messages(
    body: JsonDict, rules: ModelRules, betas: Collection[str] = ()
) -> Refusal | Accepted:
    """A ``POST /v1/messages`` body as the API judges it for a model with ``rules``;
    ``betas``: the ``anthropic-beta`` header's values."""
    if not isinstance(body.get("max_tokens"), int):
        return Refusal("max_tokens: Field required")
    messages = body.get("messages")
    if not isinstance(messages, list):
        return Refusal("messages: Field required")
    marks = _marks(body)
    if marks > 4:
        # Verbatim (tghamm/Anthropic.SDK#50).
        return Refusal(f"A maximum of 4 blocks with cache_control may be provided. Found {marks}.")
    refused = _thinking_config(body, rules, betas) or _structure(messages, rules)
    if refused:
        return refused
    config = body.get("thinking")
    config = config if isinstance(config, dict) else {}
    binding = config.get("block_binding")
    drop = (
        BINDING_BETA in betas
        and isinstance(binding, dict)
        and binding.get("prefix_mismatch_behavior") == "drop_block"
    )
    tools = TOOL_CHANGES_BETA not in betas
    echoed = check_echoed(body, str(body.get("model")), rules.preserved, drop, tools=tools)
    if isinstance(echoed, Refusal):
        return echoed
    seen, transformations = echoed
    on = thinking_on(body, rules)
    if on and not rules.preserved:
        refused = _tool_loop(messages)
        if refused:
            return refused
    size, window = prompt_tokens(seen, rules), rules.context_window
    if size > window:
        # Verbatim (earendil-works/pi#102).
        return Refusal(f"prompt is too long: {size} tokens > {window} maximum")
    if size + body["max_tokens"] > window:
        # Verbatim (docker/docker-agent#569).
        return Refusal(
            f"input length and `max_tokens` exceed context limit: {size} + {body['max_tokens']}"
            f" > {window}, decrease input length or `max_tokens` and try again"
        )
    display = config.get("display")
    shown = display == "summarized" or (rules.show_thinking and display != "omitted")
    return Accepted(on, shown, size, transformations)
