"""Markdown with TOML front matter between ``+++`` lines (the event and mail format).

    +++
    role = "assistant"
    created = 2026-11-22T08:00:00Z
    +++
    body...

Reading uses the stdlib ``tomllib`` (fast, strict); writing uses ``tomlkit`` so values
render the way a human would write them.
"""

from __future__ import annotations

import datetime as dt
import re
import tomllib
from pathlib import Path
from typing import Any

from jpfs.errors import FormatError
from jpfs.infra import textfile

FENCE = "+++"


def loads(text: str, source: str, what: str = "TOML") -> dict[str, Any]:
    """TOML ``text`` as data; malformed TOML, and TOML nested deeper than Python's
    recursion limit (``a = [[[[...]]]]`` a few thousand deep), are a FormatError naming
    ``source``: one conversation's bad file is that conversation's error, never a crash
    of the listing or the daemon that read it."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise FormatError(f"{source}: malformed {what}: {exc}") from exc
    except RecursionError:
        raise FormatError(f"{source}: malformed {what}: nested too deeply") from None


def parse(text: str, *, source: str = "<text>") -> tuple[dict[str, Any], str]:
    """Split ``text`` into (front matter, body). No front matter -> ({}, text)."""
    if not text.startswith(FENCE):
        return {}, text
    first_nl = text.find("\n")
    if first_nl == -1 or text[:first_nl].rstrip() != FENCE:
        return {}, text
    end = text.find("\n" + FENCE, first_nl)
    while end != -1:
        after = end + 1 + len(FENCE)
        if after >= len(text) or text[after] in "\r\n":
            break
        end = text.find("\n" + FENCE, after)
    if end == -1:
        raise FormatError(f"{source}: front matter opened with '+++' is never closed")
    raw = text[first_nl + 1 : end + 1]
    meta = loads(raw, source, "TOML front matter")
    body_start = end + 1 + len(FENCE)
    if text.startswith("\r\n", body_start):
        body_start += 2
    elif text.startswith("\n", body_start):
        body_start += 1
    return meta, text[body_start:]


def render(meta: dict[str, Any], body: str) -> str:
    head = _render_simple(meta)
    if head is None:
        head = _render_tomlkit(meta)
    if not head.endswith("\n"):
        head += "\n"
    if body and not body.endswith("\n"):
        body += "\n"
    return f"{FENCE}\n{head}{FENCE}\n{body}"


def _render_tomlkit(meta: dict[str, Any]) -> str:
    import tomlkit  # only writers pay for it: read-only commands must start fast

    doc = tomlkit.document()
    for key, value in meta.items():
        if value is not None:
            doc[key] = value
    return str(tomlkit.dumps(doc))


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+\Z")
_ESCAPE = re.compile(r'[\x00-\x1f\x7f"\\]')
_COMPACT = {
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\f": "\\f",
    "\r": "\\r",
    '"': '\\"',
    "\\": "\\\\",
}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return _COMPACT.get(char) or f"\\u{ord(char):04x}"


def _render_simple(meta: dict[str, Any]) -> str | None:
    """What :func:`_render_tomlkit` writes, for the usual front matter: bare keys with
    strings, integers, booleans and UTC datetimes (tomlkit's document model costs about
    as much as the rest of an event append); None for anything else."""
    lines = []
    for key, value in meta.items():
        if value is None:
            continue
        if not _BARE_KEY.match(key):
            return None
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, int):
            text = str(value)
        elif isinstance(value, str):
            text = '"' + _ESCAPE.sub(_escape, value) + '"'
        elif isinstance(value, dt.datetime) and value.tzinfo is dt.UTC and not value.microsecond:
            text = value.replace(tzinfo=None).isoformat() + "Z"
        else:
            return None
        lines.append(f"{key} = {text}\n")
    return "".join(lines)


def read(path: Path, root: Path | None = None) -> tuple[dict[str, Any], str]:
    """Front matter and body of ``path``, read safely (:mod:`jpfs.infra.textfile`; ``root``:
    the conversation root the file must stay under)."""
    return parse(textfile.read_text(path, root), source=str(path))
