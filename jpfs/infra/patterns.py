"""Patterns from agents and users, matched in linear time.

A regular expression an agent writes runs inside the daemon, beside every other
conversation. Python's ``re`` backtracks: ``(a+)+$`` over a long line takes minutes and
holds the GIL all the while, so one tool call would stop every conversation. Patterns
are therefore compiled with RE2 (``google-re2``), whose matching time is linear in the
input, whatever the pattern. RE2 has no backreferences and no lookaround; such a
pattern is refused with a message that says so.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import re2  # type: ignore[import-untyped]

from jpfs.errors import PatternError

Matcher = Callable[[str], bool]


def compile_pattern(pattern: str, *, regex: bool, ignore_case: bool = False) -> Matcher:
    """A predicate telling whether ``pattern`` (a literal unless ``regex``) occurs in a line."""
    if pattern == "":
        raise PatternError("empty search pattern")
    source = pattern if regex else re.escape(pattern)
    options = re2.Options()
    options.case_sensitive = not ignore_case
    options.log_errors = False
    try:
        compiled = re2.compile(source, options)
    except re2.error as exc:
        raise PatternError(
            f"invalid regular expression {pattern!r}: {exc}. Patterns use RE2 syntax"
            " (linear-time matching): no backreferences or lookaround"
        ) from exc
    search = compiled.search
    return lambda line: search(line) is not None
