"""What every provider takes and returns.

Messages use the Anthropic Messages content-block shape as jpfs's neutral format
(``text``, ``tool_use``, ``tool_result`` blocks): it is the richest of the formats we
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
    input_tokens: int = 0
    output_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens
        )

    def trailer(self) -> str:
        return f"input={self.input_tokens} output={self.output_tokens}"


@dataclass(frozen=True)
class Request:
    model: str
    system: str
    messages: list[JsonDict]
    tools: tuple[ToolSpec, ...] = ()
    max_tokens: int = 4096
    timeout: float = 600.0
    # Free-form hints for scripted providers (e.g. "onboarding" or "work"); real
    # providers ignore it.
    phase: str = "work"
    metadata: JsonDict = field(default_factory=dict)
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


class Provider(Protocol):
    def complete(self, request: Request, cancel: threading.Event) -> Reply:
        """One model turn. Must return or raise ``Cancelled`` promptly once ``cancel`` is set."""
        ...
