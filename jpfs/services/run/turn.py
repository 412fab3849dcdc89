"""A work turn's model call: its request made from the record, fitted to the model's
window (:mod:`jpfs.core.view`), sent, and fitted again smaller when the server refuses
it for its length.

A refusal names the window the server really has (a profile that overstates it, a local
server started with a smaller context) and the prompt's real size; the next view is
fitted to those. Only when a refit changes nothing (every older tool result is already
a note) does the turn fail, saying what is too large.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from jpfs.core import models, profiles, view
from jpfs.core.conversation import Conversation, Event
from jpfs.core.tool import Tool
from jpfs.core.workspace import Workspace
from jpfs.errors import ContextOverflow, LimitError
from jpfs.infra.providers.base import Reply, Request

# A refusal for length, then a smaller request, at most this many times in one turn.
_REFITS = 3


@dataclass(frozen=True)
class Sent:
    """A turn's reply, the view its request was, and the thinking it ran with."""

    reply: Reply
    shown: view.View
    thinking: models.ThinkingSetting

    def context(self) -> dict[str, Any]:
        """The assistant event's ``[context]``: the view, and the thinking of the turn."""
        return {**self.shown.record(), "thinking": self.thinking}


def loop_thinking(events: Sequence[Event]) -> models.ThinkingSetting | None:
    """The thinking of the tool loop in progress: its first reply's (the API takes one
    thinking configuration per assistant turn, tool calls included, so a profile edited
    mid-loop takes effect at the next turn). None outside a loop."""
    found: models.ThinkingSetting | None = None
    for ev in reversed(events):
        if ev.role == "user":
            break
        if ev.role == "assistant":
            recorded = view.context_of(ev).get("thinking")
            if recorded is not None:
                found = recorded
    return found


def call(
    ws: Workspace,
    conv: Conversation,
    events: Sequence[Event],
    tools: dict[str, Tool],
    complete: Callable[[Request], Reply],
) -> Sent:
    """Ask the model for the next reply of ``conv``'s work."""
    config = conv.settings
    model = config.model
    thinking = loop_thinking(events)
    if thinking is None:
        thinking = config.thinking_setting()
    base = Request(
        model=model,
        system=profiles.system_prompt(config),
        messages=[],
        tools=tuple(t.spec() for t in tools.values()),
        max_tokens=config.max_tokens,
        timeout=config.timeout,
        phase="work",
        metadata={"conversation": conv.id},
        thinking=models.thinking_param(model, thinking),
        effort=config.effort,
    )
    fixed = len(base.system) + len(
        json.dumps([dataclasses.asdict(t) for t in base.tools], ensure_ascii=False)
    )
    frame = view.Frame(
        window=config.window(),
        max_tokens=base.max_tokens,
        fixed_chars=fixed,
        preserved=models.preserved(model),
    )
    prefix = f"{ws.conv_root_rel}/{conv.id}/events"

    def where(ev: Event) -> str:
        return f"{prefix}/{ev.path.name}"

    shown = view.fit(events, frame, where)
    for refit in range(_REFITS + 1):
        budget = thinking if isinstance(thinking, int) else 0
        request = dataclasses.replace(
            base, messages=shown.messages, max_tokens=max(shown.max_tokens, budget + 1)
        )
        try:
            return Sent(complete(request), shown, thinking)
        except ContextOverflow as exc:
            ratio = exc.tokens / shown.chars if exc.tokens else None
            frame = dataclasses.replace(frame, window=exc.window, ratio=ratio or frame.ratio)
            smaller = view.fit(events, frame, where)
            if refit == _REFITS or (smaller.cut, smaller.max_tokens) == (
                shown.cut,
                shown.max_tokens,
            ):
                raise LimitError(
                    f"{exc} (nothing more can be left out of the prompt: {shown.notes} older"
                    " tool results are notes already)"
                ) from exc
            shown = smaller
    raise AssertionError("unreachable")
