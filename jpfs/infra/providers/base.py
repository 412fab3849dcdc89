"""What every provider takes and returns.

Messages use the Anthropic Messages content-block shape as jpfs's neutral format
(``thinking``, ``text``, ``tool_use``, ``tool_result`` blocks): it is the richest of the formats we
speak, and the event files map onto it one to one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

JsonDict = dict[str, Any]


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    input_schema: JsonDict


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    input: JsonDict


@dataclass(frozen=True)
class Usage:
    """What one model call consumed, with the Messages API's meanings: ``input_tokens``
    excludes the prompt tokens read from or written to the cache, which are counted
    apart (a cache read costs a tenth of fresh input, a cache write a quarter more)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_input_tokens + other.cache_read_input_tokens,
            self.cache_creation_input_tokens + other.cache_creation_input_tokens,
        )

    @property
    def total(self) -> int:
        """Every token the call processed: the four counts summed (what budgets count)."""
        return (
            self.input_tokens
            + self.output_tokens
            + self.cache_read_input_tokens
            + self.cache_creation_input_tokens
        )

    def counts(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
        }


@dataclass(frozen=True)
class Request:
    model: str
    system: str
    messages: list[JsonDict]
    tools: tuple[ToolSpec, ...] = ()
    max_tokens: int = 4096
    timeout: float = 600.0
    # Mark the prompt for caching (a provider that caches puts its breakpoints on the
    # fixed part and on the newest message); the profile's ``prompt_cache``.
    cache: bool = True
    # Free-form hints for scripted providers (e.g. "onboarding" or "work"); real
    # providers ignore it.
    phase: str = "work"
    metadata: JsonDict = field(default_factory=dict)
    # The Messages API's ``thinking`` object (None: send none) and ``output_config.effort``
    # (jpfs.core.models); other providers take neither (a profile that sets them is
    # refused before any call).
    thinking: JsonDict | None = None
    effort: str | None = None
    # Told, in one line, when the provider waits before trying again (a 429, a 5xx), so
    # that `daemon status` and the log say why a turn takes long instead of going quiet.
    notify: Callable[[str], None] | None = field(default=None, compare=False, repr=False)
    # Given the reply's text as it arrives (a provider that streams); one that cannot
    # stream ignores it, and the caller shows the reply when it is complete.
    on_text: Callable[[str], None] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Reply:
    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = Usage()
    model: str = ""
    stop_reason: str = "end_turn"
    # The reply's ``thinking`` and ``redacted_thinking`` blocks, in order, exactly as
    # received (signature and data included): they go back verbatim, first in their
    # message, while the API needs them (jpfs.core.messages).
    thinking: tuple[JsonDict, ...] = ()


class Provider(Protocol):
    def complete(self, request: Request, cancel: threading.Event) -> Reply:
        """One model turn. Must return or raise ``Cancelled`` promptly once ``cancel`` is set."""
        ...
