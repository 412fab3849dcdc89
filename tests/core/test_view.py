"""The view of a conversation a request sends: the record's events fitted to the model's
window, in steps that keep the cached prefix, never dropping what must stay."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from jpfs.core.conversation import Conversation, Event, create
from jpfs.core.view import Frame, View, fit
from jpfs.errors import LimitError

FILE = "word " * 1199 + "word\n"  # 6,000 characters: one file a tool read
SMALL = "word " * 299 + "word\n"  # 1,500


def where(ev: Event) -> str:
    return f"conversations/c/events/{ev.path.name}"


def loop(
    tmp_path: Path, reads: int, *, context: dict[str, Any] | None = None, body: str = FILE
) -> Conversation:
    """A task, then ``reads`` replies each reading one file, each with its result."""
    conv = create(tmp_path, "c", agent="a")
    conv.append_event("user", "Summarise the twelve files.")
    for n in range(reads):
        meta: dict[str, Any] = {
            "tool_calls": [{"id": f"t{n}", "name": "fs_read_file", "input": {"path": f"{n}"}}],
            "thinking": [{"type": "thinking", "thinking": f"read {n}", "signature": f"s{n}"}],
        }
        if context is not None:
            meta["context"] = context
        conv.append_event("assistant", "", meta)
        conv.append_event("tool", body, {"tool_call_id": f"t{n}", "tool_name": "fs_read_file"})
    return conv


def results(view: View) -> list[str]:
    return [
        block["content"]
        for message in view.messages
        for block in message["content"]
        if block["type"] == "tool_result"
    ]


def test_a_prompt_within_its_window_is_the_whole_record(tmp_path: Path) -> None:
    conv = loop(tmp_path, 3)
    view = fit(conv.events(), Frame(window=200_000, max_tokens=4096, fixed_chars=500), where)
    assert view.cut == 0 and view.notes == 0
    assert results(view) == [FILE] * 3
    assert view.record() == {"cut": 0, "prompt_chars": view.chars, "window": 200_000}
    assert view.chars == 500 + len(json.dumps(view.messages, ensure_ascii=False))
    assert view.max_tokens == 4096


def test_an_unknown_window_trims_nothing(tmp_path: Path) -> None:
    view = fit(loop(tmp_path, 12).events(), Frame(None, 4096, 500), where)
    assert view.notes == 0 and view.window is None and "window" not in view.record()


def test_past_the_share_the_oldest_results_become_notes_and_what_must_stay_stays(
    tmp_path: Path,
) -> None:
    conv = loop(tmp_path, 24, body=SMALL)
    frame = Frame(window=16_384, max_tokens=2048, fixed_chars=2000)
    assert fit(conv.events()[:25], frame, where).notes == 0  # twelve reads fit
    view = fit(conv.events(), frame, where)
    room = 16_384 - 2048
    assert 0.4 * room < view.tokens <= 0.5 * room  # a step goes down to half the room
    assert view.max_tokens == 2048 and view.tokens + view.max_tokens <= 16_384
    shown = results(view)
    assert shown[view.notes :] == [SMALL] * (24 - view.notes)  # the newer ones stay whole
    assert 0 < view.notes < 23
    # The oldest go first, and each note names the file that holds the result in full.
    assert shown[: view.notes] == [
        f"[jpfs: this tool result (1,500 characters) was left out of the prompt to keep it"
        f" within the model's context window. It is kept in full in"
        f" conversations/c/events/{2 * n + 3:04d}-tool.md; read that file again if you"
        f" need it.]"
        for n in range(view.notes)
    ]
    first = view.messages[0]["content"][0]
    assert first == {"type": "text", "text": "Summarise the twelve files.\n"}
    assert view.cut == 2 * view.notes + 1  # the seq of the last result left out


def test_between_steps_the_cut_holds_so_each_request_begins_with_the_last(
    tmp_path: Path,
) -> None:
    conv = loop(tmp_path, 6)
    frame = Frame(window=8192, max_tokens=2048, fixed_chars=2000)
    first = fit(conv.events(), frame, where)
    assert first.cut > 0
    # The reply to that request records the view; one more small turn follows.
    conv.append_event(
        "assistant",
        "",
        {
            "context": first.record(),
            "tool_calls": [{"id": "x", "name": "fs_list_files", "input": {}}],
        },
    )
    conv.append_event("tool", "a.txt\n", {"tool_call_id": "x", "tool_name": "fs_list_files"})
    second = fit(conv.events(), frame, where)
    assert second.cut == first.cut
    assert second.messages[: len(first.messages) - 1] == first.messages[:-1]


def test_a_window_learned_from_a_refusal_is_kept_by_the_record(tmp_path: Path) -> None:
    conv = loop(tmp_path, 6, context={"cut": 0, "prompt_chars": 100, "window": 8192})
    view = fit(conv.events(), Frame(window=32_768, max_tokens=2048, fixed_chars=2000), where)
    assert view.window == 8192 and view.cut > 0


def test_when_nothing_more_can_go_the_error_says_what_is_too_large(tmp_path: Path) -> None:
    conv = create(tmp_path, "c", agent="a")
    conv.append_event("user", "x" * 40_000)
    with pytest.raises(LimitError) as caught:
        fit(conv.events(), Frame(window=8192, max_tokens=2048, fixed_chars=2000), where)
    message = str(caught.value)
    assert "context window (8,192 tokens, of which 2,048 are kept for the reply)" in message
    assert "conversations/c/events/0001-user.md ~13,334" in message


def test_thinking_bound_to_its_prefix_goes_only_while_its_cut_is_in_force(
    tmp_path: Path,
) -> None:
    conv = loop(tmp_path, 12, context={"cut": 0, "prompt_chars": 100})
    events = conv.events()
    frame = Frame(window=8192, max_tokens=2048, fixed_chars=2000, preserved=True)
    view = fit(events, frame, where)
    assert view.cut > 0

    def thoughts(v: View) -> list[str]:
        return [b["thinking"] for m in v.messages for b in m["content"] if b["type"] == "thinking"]

    assert thoughts(view) == []  # every block was made under cut 0: its prefix changed
    unbound = fit(events, Frame(8192, 2048, 2000, preserved=False), where)
    assert thoughts(unbound) == [f"read {n}" for n in range(12)]  # verbatim, first
    assert all(
        m["content"][0]["type"] == "thinking" for m in unbound.messages if m["role"] == "assistant"
    )
