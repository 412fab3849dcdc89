"""What each model takes: its context window and the thinking it accepts.

The table beside the prices (:mod:`jpfs.core.prices`), looked up by the same names (a
dated snapshot by its model's name, :func:`jpfs.core.prices.find`). A profile's
``context_window`` sets the window of any model (a local model's ``num_ctx``); a model
found nowhere has no known window until a server refuses a prompt for its length
(protocol/agents.md, "Context that fits").

Thinking, as the Messages API documents it (platform.claude.com, "Adaptive thinking",
"Extended thinking", "Preserved thinking", November 2026):

- ``adaptive``: the model decides how much to think (``thinking: {"type": "adaptive"}``,
  effort through ``output_config.effort``). The 5.x frontier models accept nothing else,
  and refuse ``disabled``.
- ``budget``: extended thinking with ``budget_tokens`` (>= 1024, < ``max_tokens``); the
  only mode before Claude 4.6, deprecated on 4.6, refused from 4.7 on.
- ``off``: no thinking. On a model that thinks unless told not to, jpfs sends
  ``disabled``; elsewhere it sends nothing (so a model that accepts only adaptive
  thinking is never sent ``disabled``).
- ``preserved``: from Claude Fable 5.1 on, a thinking block is bound to everything
  before it (its prefix); a request whose prefix of a block changed is refused, so the
  view drops the blocks after a change it makes (:mod:`jpfs.core.view`).

A profile value a known model refuses is a :class:`ProfileError` when the profile is
loaded, before any call. A model not in the table gets what the profile says, as the
profile says it, and the API decides.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from jpfs.core.prices import find
from jpfs.errors import ProfileError

# The API's effort levels, lowest first (output_config.effort).
EFFORTS = ("low", "medium", "high", "xhigh", "max")
MIN_BUDGET = 1024  # the API's least budget_tokens
ThinkingSetting = Literal["adaptive", "off"] | int


@dataclass(frozen=True)
class Thinking:
    """The thinking modes a model accepts."""

    adaptive: bool = False
    budget: bool = False
    can_disable: bool = True  # False: ``disabled`` is refused (it always thinks)
    default_on: bool = False  # it thinks (adaptively) when the request says nothing
    preserved: bool = False  # thinking blocks are bound to their prefix


@dataclass(frozen=True)
class ModelSpec:
    context_window: int
    thinking: Thinking = Thinking()
    efforts: tuple[str, ...] = ()  # the effort levels it takes; () refuses effort


_ALWAYS = Thinking(adaptive=True, can_disable=False, default_on=True)
_ALWAYS_BOUND = Thinking(adaptive=True, can_disable=False, default_on=True, preserved=True)
_ON_BY_DEFAULT = Thinking(adaptive=True, default_on=True)
_ON_BY_DEFAULT_BOUND = Thinking(adaptive=True, default_on=True, preserved=True)
_ADAPTIVE = Thinking(adaptive=True)
_EITHER = Thinking(adaptive=True, budget=True)
_BUDGET = Thinking(budget=True)
_NONE = Thinking()
_FULL = EFFORTS
_NO_XHIGH = ("low", "medium", "high", "max")
_M = 1_000_000
_K200 = 200_000

# Claude models (platform.claude.com "Models overview" and each model's page, Nov 2026).
MODELS: dict[str, ModelSpec] = {
    "claude-fable-5-2": ModelSpec(_M, _ALWAYS_BOUND, _FULL),
    "claude-mythos-5-2": ModelSpec(_M, _ALWAYS_BOUND, _FULL),
    "claude-fable-5-1": ModelSpec(_M, _ALWAYS_BOUND, _FULL),
    "claude-mythos-5-1": ModelSpec(_M, _ALWAYS_BOUND, _FULL),
    "claude-fable-5": ModelSpec(_M, _ALWAYS, _FULL),
    "claude-mythos-5": ModelSpec(_M, _ALWAYS, _FULL),
    "claude-opus-5-5": ModelSpec(_M, _ALWAYS_BOUND, _FULL),
    # Opus 5 turns thinking off only at effort high or lower (checked below).
    "claude-opus-5": ModelSpec(_M, _ON_BY_DEFAULT, _FULL),
    # Sonnet 5.5 has no "disabled" (its "between_tools" is another mode): always on here.
    "claude-sonnet-5-5": ModelSpec(_M, _ALWAYS_BOUND, _FULL),
    "claude-sonnet-5": ModelSpec(_M, _ALWAYS, _FULL),
    "claude-haiku-5-5": ModelSpec(_M, _ON_BY_DEFAULT_BOUND, _FULL),
    "claude-opus-4-8": ModelSpec(_M, _ADAPTIVE, _FULL),
    "claude-opus-4-7": ModelSpec(_M, _ADAPTIVE, _FULL),
    "claude-opus-4-6": ModelSpec(_M, _EITHER, _NO_XHIGH),
    "claude-sonnet-4-6": ModelSpec(_M, _EITHER, _NO_XHIGH),
    "claude-opus-4-5": ModelSpec(_K200, _BUDGET, ("low", "medium", "high")),
    "claude-opus-4-1": ModelSpec(_K200, _BUDGET),
    "claude-opus-4-0": ModelSpec(_K200, _BUDGET),
    "claude-sonnet-4-5": ModelSpec(_K200, _BUDGET),
    "claude-sonnet-4-0": ModelSpec(_K200, _BUDGET),
    "claude-3-7-sonnet": ModelSpec(_K200, _BUDGET),
    "claude-haiku-4-5": ModelSpec(_K200, _BUDGET),
    "claude-3-5-haiku": ModelSpec(_K200, _NONE),
    "claude-3-haiku": ModelSpec(_K200, _NONE),
    # OpenAI's (platform.openai.com "Models"); their reasoning is not jpfs's to set.
    "gpt-5": ModelSpec(400_000),
    "gpt-5-mini": ModelSpec(400_000),
    "gpt-5-nano": ModelSpec(400_000),
    "gpt-4.1": ModelSpec(1_047_576),
    "gpt-4.1-mini": ModelSpec(1_047_576),
    "gpt-4.1-nano": ModelSpec(1_047_576),
    "gpt-4o": ModelSpec(128_000),
    "gpt-4o-mini": ModelSpec(128_000),
    "o3": ModelSpec(200_000),
    "o4-mini": ModelSpec(200_000),
}


def spec_of(model: str) -> ModelSpec | None:
    return find(model, MODELS)


def context_window(config: Mapping[str, Any]) -> int | None:
    """:func:`window_of` a configuration's ``model`` and ``context_window``."""
    given = config.get("context_window")
    given = given if isinstance(given, int) and not isinstance(given, bool) else None
    return window_of(str(config.get("model") or ""), given)


def window_of(model: str, given: int | None) -> int | None:
    """The window a conversation's prompts must fit: the profile's ``context_window``,
    else the shipped table's, else unknown (None)."""
    if given is not None:
        return given
    spec = spec_of(model)
    return spec.context_window if spec is not None else None


def preserved(model: str) -> bool:
    """Whether ``model``'s thinking blocks are bound to their prefix."""
    spec = spec_of(model)
    return spec is not None and spec.thinking.preserved


def check(
    where: str,
    *,
    model: str,
    provider: str,
    max_tokens: int,
    thinking: str | int | None,
    effort: str | None,
    window: int | None,
) -> None:
    """Refuse a ``thinking``, ``effort`` or ``context_window`` (``window``) the profile's
    model does not take, naming what it does take."""
    if window is not None and window < 1024:
        raise ProfileError(f"{where}: context_window must be at least 1024 tokens, got {window}")
    if (thinking is not None or effort is not None) and provider != "anthropic":
        key = "thinking" if thinking is not None else "effort"
        raise ProfileError(
            f'{where}: {key!r} applies only to provider = "anthropic"'
            f" (this profile's provider is {provider!r})"
        )
    if isinstance(thinking, str) and thinking not in ("adaptive", "off"):
        raise ProfileError(
            f'{where}: thinking must be "adaptive", "off" or a budget of tokens, got {thinking!r}'
        )
    if isinstance(thinking, int) and not MIN_BUDGET <= thinking < max_tokens:
        raise ProfileError(
            f"{where}: a thinking budget must be at least {MIN_BUDGET} tokens and below"
            f" max_tokens ({max_tokens}), got {thinking}"
        )
    if effort is not None and effort not in EFFORTS:
        raise ProfileError(f"{where}: effort must be one of {', '.join(EFFORTS)}, got {effort!r}")
    spec = spec_of(model)
    if spec is None:
        return  # the API decides
    modes = spec.thinking
    if thinking == "adaptive" and not modes.adaptive:
        fix = f"thinking = <budget tokens> (at least {MIN_BUDGET})" if modes.budget else "none"
        raise ProfileError(f"{where}: {model} does not think adaptively (it takes: {fix})")
    if isinstance(thinking, int) and not modes.budget:
        takes = 'thinking = "adaptive", with effort' if modes.adaptive else "no thinking"
        raise ProfileError(f"{where}: {model} takes no thinking budget (it takes {takes})")
    if thinking == "off" and not modes.can_disable:
        raise ProfileError(
            f'{where}: {model} always thinks: the API refuses thinking = "off" for it'
            ' (leave thinking out, or set effort = "low" to think less)'
        )
    if thinking == "off" and modes.default_on and effort in ("xhigh", "max"):
        raise ProfileError(
            f'{where}: {model} turns thinking off only at effort "high" or lower, got {effort!r}'
        )
    if effort is not None and effort not in spec.efforts:
        takes = ", ".join(spec.efforts) if spec.efforts else "none"
        raise ProfileError(f"{where}: {model} does not take effort {effort!r} (it takes: {takes})")


def setting(config: Mapping[str, Any]) -> ThinkingSetting:
    """:func:`thinking_of` a configuration's ``model`` and ``thinking``."""
    return thinking_of(str(config.get("model") or ""), config.get("thinking"))


def thinking_of(model: str, given: ThinkingSetting | None) -> ThinkingSetting:
    """The thinking a conversation runs with: the profile's, else its model's default."""
    if given is not None:
        return given
    spec = spec_of(model)
    return "adaptive" if spec is not None and spec.thinking.default_on else "off"


def thinking_param(model: str, value: ThinkingSetting) -> dict[str, Any] | None:
    """The request's ``thinking`` for ``value``: None sends none."""
    if value == "adaptive":
        return {"type": "adaptive"}
    if isinstance(value, int):
        return {"type": "enabled", "budget_tokens": value}
    spec = spec_of(model)
    if spec is not None and spec.thinking.default_on and spec.thinking.can_disable:
        return {"type": "disabled"}
    return None
