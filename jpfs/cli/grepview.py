"""How ``jpfs conversation grep`` shows a line: grep's ``ID:FILE:LINE: text`` (``-`` for
context lines, ``--`` between groups), the matches highlighted on a terminal."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable

from jpfs.services.views.search import Match, Shown

_ON, _OFF = "\x1b[1;31m", "\x1b[0m"

Painter = Callable[[str], str]


def painter(pattern: str, *, regex: bool, ignore_case: bool) -> Painter:
    """What marks the matches in a line: nothing unless stdout is a terminal (and
    ``NO_COLOR`` is unset), as grep's ``--color=auto``."""
    if "NO_COLOR" in os.environ or not sys.stdout.isatty() or not pattern:
        return lambda text: text
    try:
        found = re.compile(pattern if regex else re.escape(pattern), re.I if ignore_case else 0)
    except re.error:  # a PCRE pattern Python does not read: shown plain
        return lambda text: text
    return lambda text: found.sub(lambda m: f"{_ON}{m.group(0)}{_OFF}" if m.group(0) else "", text)


def render(line: Match | Shown, paint: Painter, short: Callable[[str], str] = str) -> str:
    """One line of output; ``short`` gives what is shown of its id (short ids)."""
    sep = line.sep if isinstance(line, Shown) else ":"
    if sep == "--":
        return "--"
    text = paint(line.text) if sep == ":" else line.text
    return f"{short(line.id)}:{line.file}{sep}{line.line}{sep} {text}"
