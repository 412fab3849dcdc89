"""A conversation's transcript: rendered for a human (markdown) or a program (JSON) by
``print``, and copied into a fork."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jpfs.core import frontmatter, ids, tree
from jpfs.core.conversation import ANSWERS, INBOX, QUESTIONS, RESULT, TASK, Conversation, Event
from jpfs.core.eventlog import check_last
from jpfs.core.messages import thinking_of
from jpfs.errors import FormatError


def _event_header(ev: Event) -> str:
    bits = [f"{ev.seq:04d}", ev.role]
    if ev.role == "assistant":
        if ev.meta.get("model"):
            bits.append(str(ev.meta["model"]))
        usage = ev.meta.get("usage")
        if isinstance(usage, dict):
            bit = f"in={usage.get('input_tokens', 0)} out={usage.get('output_tokens', 0)}"
            cached = usage.get("cache_read_input_tokens"), usage.get("cache_creation_input_tokens")
            if any(cached):
                bit += f" cache_read={cached[0] or 0} cache_write={cached[1] or 0}"
            if isinstance(usage.get("cost_usd"), float | int):
                bit += f" ${usage['cost_usd']:.4f}"
            bits.append(bit)
    if ev.role == "tool":
        bits.append(str(ev.meta.get("tool_name", "")))
        if ev.meta.get("is_error"):
            bits.append("error")
    if ev.role == "user":
        # What reached a running agent at a model call (steering): mail, or jpfs's note.
        if ev.meta.get("delivered"):
            mail = ev.meta.get("mail")
            bits.append(f"mail delivered {ev.meta['delivered']}")
            if isinstance(mail, list):
                bits += [str(m) for m in mail]
        if ev.meta.get("note"):
            bits.append(f"jpfs note: {ev.meta['note']}")
    return "### " + " · ".join(b for b in bits if b)


def waiting_mail(conv: Conversation) -> list[tuple[str, str, str]]:
    """Its caller's mail not delivered yet, as (id, from, subject): what its next model
    call (or its next run) delivers; the MAIL column of ``jpfs tree`` counts it."""
    return mail_by_kind(conv)[0]


def mail_by_kind(
    conv: Conversation,
) -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str]]]:
    """Its unread messages: (its caller's, :func:`waiting_mail`; the others')."""
    waiting: list[tuple[str, str, str]] = []
    others: list[tuple[str, str, str]] = []
    for message in unread_mail(conv):
        (waiting if ids.is_caller(message[1], conv.id) else others).append(message)
    return waiting, others


def unread_mail(conv: Conversation) -> list[tuple[str, str, str]]:
    """Every unread message in ``conv``'s inbox, as (id, from, subject): its caller's
    (:func:`waiting_mail`) and its children's, which the agent reads with its tools."""
    box = conv.path / INBOX
    try:
        names = sorted(n for n in os.listdir(box) if n.endswith(".md") and not n.startswith("."))
    except OSError:
        return []
    out = []
    for name in names:
        try:
            meta, _ = frontmatter.read(box / name, conv.root)
        except (OSError, FormatError):
            continue
        if meta.get("read") is False and meta.get("kind", "message") == "message":
            out.append((name[:-3], str(meta.get("from", "")), str(meta.get("subject", ""))))
    return out


def _folded_thinking(ev: Event) -> str | None:
    """One line in place of the event's thinking: folded, and marked as the agent's own
    (``--format json`` keeps it whole)."""
    blocks = thinking_of(ev)
    if not blocks:
        return None
    chars = sum(len(str(b.get("thinking") or "")) for b in blocks)
    redacted = sum(1 for b in blocks if b.get("type") == "redacted_thinking")
    what = f"{len(blocks)} block{'s' if len(blocks) != 1 else ''}, {chars:,} characters"
    if redacted:
        what += f", {redacted} encrypted by the provider"
    return f"> [thinking folded: {what}; the agent's own, kept in the record]"


def render_event(ev: Event) -> str:
    parts = [_event_header(ev), ""]
    folded = _folded_thinking(ev) if ev.role == "assistant" else None
    if folded is not None:
        parts += [folded, ""]
    parts.append(ev.body.rstrip())
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
    waiting, others = mail_by_kind(conv)
    for heading, listed in (("Mail waiting", waiting), ("Unread mail", others)):
        if listed:
            out += [f"## {heading}", ""]
            out += [f"- {mid} from {sender}: {subject}" for mid, sender, subject in listed]
            out.append("")
    if not waiting and last is None and (result := conv.read(RESULT)):
        out += ["## Result", "", result.strip(), ""]
    return "\n".join(out).rstrip() + "\n"


def as_json(conv: Conversation, last: int | None = None) -> dict[str, Any]:
    data: dict[str, Any] = tree.info(conv).to_json()
    for name in (TASK, QUESTIONS, ANSWERS):
        data[name.removesuffix(".md")] = conv.read(name)
    data["events"] = [ev.to_json() for ev in conv.events(last=last)]
    for key, listed in zip(("mail_waiting", "mail_unread"), mail_by_kind(conv), strict=True):
        data[key] = [
            {"id": mid, "from": sender, "subject": subject} for mid, sender, subject in listed
        ]
    return data


def settled(events: Sequence[Event]) -> tuple[list[Event], Event | None]:
    """``events`` minus a turn still calling tools, and that turn if it has text.

    The turn that is calling tools right now (the one that called ``fork``, say) belongs
    to its conversation: its tool calls and their results stay there. A copy takes its
    text alone, and nothing when it has none, so the copy's transcript stays valid for
    the Messages API whatever ran meanwhile, and never holds a turn with nothing in it.
    """
    for i in range(len(events) - 1, -1, -1):
        ev = events[i]
        if ev.role == "user":
            break
        if ev.role == "assistant":
            if ev.meta.get("tool_calls"):
                return list(events[:i]), ev if ev.body.strip() else None
            break
    return list(events), None


def copy_for_fork(events: Sequence[Event], dest: Path, last: int | None = None) -> int:
    """Copy the settled part of ``events`` (:func:`settled`) into the events directory
    ``dest``, renumbered from 1; only the last ``last`` of them when given. Returns the
    number of events written.

    A fork never shows its child a placeholder for a turn (a copied turn without text
    would reach the model as ``(no reply)``) nor a tool call the child would run again.
    """
    check_last(last)
    kept, turn = settled(events)
    items: list[tuple[Event, bool]] = [(ev, False) for ev in kept]
    if turn is not None:
        items.append((turn, True))
    if last is not None:
        items = items[-last:] if last > 0 else []
    if not items:
        return 0
    dest.mkdir(parents=True, exist_ok=True)
    # Renumbered from 1: a recorded view's cut (jpfs.core.view) names events by number.
    offset = items[0][0].seq - 1
    for seq, (ev, text_only) in enumerate(items, 1):
        target = dest / f"{seq:04d}-{ev.role}.md"
        context = ev.meta.get("context")
        moved = offset and isinstance(context, dict) and isinstance(context.get("cut"), int)
        if not text_only and not moved:
            shutil.copyfile(ev.path, target)
            continue
        meta = dict(ev.meta)
        if text_only:
            meta.pop("tool_calls", None)
            meta["stop_reason"] = "end_turn"
        if moved:
            assert isinstance(context, dict)
            meta["context"] = {**context, "cut": max(0, int(context["cut"]) - offset)}
        target.write_text(frontmatter.render(meta, ev.body), encoding="utf-8")
    return len(items)
