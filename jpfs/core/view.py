"""What the model sees: a conversation's events made into a request that fits its window.

The record keeps every event in full; a request is a *view* of it, computed from the
record alone, so a restart, a retry, a fork or another machine sends what the live run
would have sent. When the prompt would pass a share of the model's context window, the
view replaces the oldest tool results by a note naming the event file that holds them
(the model can read it again); the task, the onboarding Q&A, every user input and the
newest turn's results always stay.

    cut        tool results of events up to this seq go as notes. It only moves forward,
               in steps (to half the room once past 80% of it), so between steps every
               request begins with the one before it and reads it from the prompt cache.
    room       the window less what the reply may need (max_tokens, at most a quarter).
    estimate   tokens per character, learned from the last call's reported usage
               (recorded beside it as ``prompt_chars``), times the request's characters.

Each assistant event records the view its request was (``[context]``: ``cut``,
``prompt_chars``, ``window``), which is how the next request knows the cut in force
and the ratio; a window learned from a server's refusal is recorded there too.

Thinking blocks go back verbatim (:mod:`jpfs.core.messages`). On models whose thinking
is bound to its prefix (:func:`jpfs.core.models.preserved`), a block is refused once
anything before it changed, so a block made under another cut is left out: the blocks
made under the cut in force stay valid, and so does the cache between steps.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from jpfs.core.conversation import Event
from jpfs.core.messages import thinking_of, to_messages
from jpfs.errors import LimitError

JsonDict = dict[str, Any]
HIGH = 0.8  # past this share of the room, the view takes a step ...
LOW = 0.5  # ... down to this share
DEFAULT_RATIO = 1 / 3  # tokens per character before any call reported its size
MIN_RATIO = 1 / 8  # a ratio below this is a server's made-up usage, not a tokenizer's


@dataclass(frozen=True)
class Frame:
    """What a view is fitted to."""

    window: int | None  # the model's context window; None: not known (nothing trimmed)
    max_tokens: int  # what the profile lets a reply take
    fixed_chars: int  # the system prompt and tool definitions, as sent
    preserved: bool = False  # thinking blocks bound to their prefix
    ratio: float | None = None  # tokens per character, learned from a refusal


@dataclass(frozen=True)
class View:
    messages: list[JsonDict]
    cut: int
    chars: int  # the request's characters (fixed part and messages)
    tokens: int  # its estimated size
    max_tokens: int  # what to ask the reply for
    window: int | None
    notes: int  # tool results sent as notes

    def record(self) -> JsonDict:
        """The assistant event's ``[context]``."""
        out: JsonDict = {"cut": self.cut, "prompt_chars": self.chars}
        if self.window is not None:
            out["window"] = self.window
        return out


def context_of(ev: Event) -> JsonDict:
    found = ev.meta.get("context")
    return found if isinstance(found, dict) else {}


def _int(value: object, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def recorded_ratio(events: Sequence[Event]) -> float | None:
    """Tokens per character of the newest call that recorded both its size and usage."""
    for ev in reversed(events):
        if ev.role != "assistant":
            continue
        chars = _int(context_of(ev).get("prompt_chars"))
        usage = ev.meta.get("usage")
        if chars <= 0 or not isinstance(usage, dict):
            continue
        tokens = sum(
            _int(usage.get(k))
            for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
        )
        return tokens / chars if tokens > 0 else None
    return None


def note(ev: Event, path: str) -> str:
    return (
        f"[jpfs: this tool result ({len(ev.body):,} characters) was left out of the prompt"
        f" to keep it within the model's context window. It is kept in full in {path};"
        " read that file again if you need it.]"
    )


def fit(events: Sequence[Event], frame: Frame, where: Callable[[Event], str]) -> View:
    """The view of ``events`` for the next call (:class:`LimitError` when even the
    smallest view does not fit, naming what is too large). ``where``: the path of an
    event's file, as the agent's file tools name it."""
    assistants = [ev for ev in events if ev.role == "assistant"]
    last = context_of(assistants[-1]) if assistants else {}
    window = frame.window
    learned = _int(last.get("window"))
    if learned and (window is None or learned < window):
        window = learned
    ratio = max(frame.ratio or recorded_ratio(events) or DEFAULT_RATIO, MIN_RATIO)
    newest = assistants[-1].seq if assistants else 0
    # Oldest first; the newest turn's results (after the last reply) always stay.
    candidates = [ev for ev in events if ev.role == "tool" and ev.seq < newest]
    cut = _int(last.get("cut"))

    def build(cut: int) -> tuple[list[JsonDict], int, int]:
        notes = {ev.seq: note(ev, where(ev)) for ev in candidates if ev.seq <= cut}
        unthought = [
            ev.seq
            for ev in assistants
            if frame.preserved and _int(context_of(ev).get("cut")) != cut
        ]
        messages = to_messages(events, notes=notes, unthought=unthought)
        chars = frame.fixed_chars + len(json.dumps(messages, ensure_ascii=False))
        return messages, chars, len(notes)

    def tokens(chars: int) -> int:
        return math.ceil(chars * ratio)

    messages, chars, notes = build(cut)
    if window is None:
        return View(messages, cut, chars, tokens(chars), frame.max_tokens, None, notes)
    room = window - min(frame.max_tokens, window // 4)
    if tokens(chars) > HIGH * room:
        # A step: skip ahead by what each result saves (an estimate), then check exactly.
        left = [ev for ev in candidates if ev.seq > cut]
        saved = chars - LOW * room / ratio
        for ev in left:
            if saved <= 0:
                break
            saved -= len(json.dumps(ev.body, ensure_ascii=False)) - len(note(ev, where(ev)))
            cut = ev.seq
        messages, chars, notes = build(cut)
        while tokens(chars) > LOW * room and (rest := [ev for ev in left if ev.seq > cut]):
            cut = rest[0].seq
            messages, chars, notes = build(cut)
    estimate = tokens(chars)
    if estimate > room:
        raise LimitError(_too_large(events, frame, window, room, ratio, cut, where))
    max_tokens = max(1, min(frame.max_tokens, window - estimate))
    return View(messages, cut, chars, estimate, max_tokens, window, notes)


def _too_large(
    events: Sequence[Event],
    frame: Frame,
    window: int,
    room: int,
    ratio: float,
    cut: int,
    where: Callable[[Event], str],
) -> str:
    """What is too large, in the words a user can act on."""

    def size(ev: Event) -> int:
        thinking = len(json.dumps(thinking_of(ev))) if ev.role == "assistant" else 0
        return math.ceil((len(ev.body) + thinking) * ratio)

    kept = [ev for ev in events if ev.role in ("user", "assistant") or ev.seq > cut]
    largest = sorted(kept, key=size, reverse=True)[:3]
    parts = ", ".join(f"{where(ev)} ~{size(ev):,}" for ev in largest)
    return (
        f"the prompt does not fit the model's context window ({window:,} tokens, of which"
        f" {window - room:,} are kept for the reply) even with every older tool result left"
        f" out: the system prompt and tools take ~{math.ceil(frame.fixed_chars * ratio):,}"
        f" tokens, and what must stay is largest in {parts}. Use a model with a larger"
        " window (or set context_window if the server's is larger), or split the task"
    )
