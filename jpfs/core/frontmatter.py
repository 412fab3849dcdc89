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

import tomllib
from pathlib import Path
from typing import Any

from jpfs.errors import FormatError
from jpfs.infra import textfile

FENCE = "+++"


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
    try:
        meta = tomllib.loads(raw)
    except tomllib.TOMLDecodeError as exc:
        raise FormatError(f"{source}: malformed TOML front matter: {exc}") from exc
    body_start = end + 1 + len(FENCE)
    if text.startswith("\r\n", body_start):
        body_start += 2
    elif text.startswith("\n", body_start):
        body_start += 1
    return meta, text[body_start:]


def render(meta: dict[str, Any], body: str) -> str:
    import tomlkit  # only writers pay for it: read-only commands must start fast

    doc = tomlkit.document()
    for key, value in meta.items():
        if value is not None:
            doc[key] = value
    head = tomlkit.dumps(doc)
    if not head.endswith("\n"):
        head += "\n"
    if body and not body.endswith("\n"):
        body += "\n"
    return f"{FENCE}\n{head}{FENCE}\n{body}"


def read(path: Path, root: Path | None = None) -> tuple[dict[str, Any], str]:
    """Front matter and body of ``path``, read safely (:mod:`jpfs.infra.textfile`; ``root``:
    the conversation root the file must stay under)."""
    return parse(textfile.read_text(path, root), source=str(path))
