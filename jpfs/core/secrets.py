"""Secrets: the formats jpfs recognises, their redaction, and the files agents do not read.

The record is git history, and with ``sync.remote`` it is pushed where everyone with
access to the project can fetch it; whatever an agent reads would end up there. So:

- :func:`redact` replaces every recognised secret in a text with a visible marker,
  ``[redacted:<kind>]``, and counts them (the count goes into the front matter of what
  is written, so a redaction is visible and auditable). jpfs redacts what it sends to a
  provider and what it writes to the record.
- :func:`scan` finds them (kind, line) without changing anything: the check before a
  push, and ``jpfs scan`` over the record's history.
- :func:`secret_name` says whether a path names a well-known secret file (``.env``,
  ``id_rsa``, ``*.pem`` ...), which the file tools do not read unless a profile exposes
  it (as they do not read files git ignores).

The table is small and tested: each kind against its published format, and the whole
against false positives on ordinary code (jpfs's own sources and docs find nothing).
Patterns are RE2 (linear time): they run over tool results and whole transcripts. The
values of the environment variables that hold provider keys (:data:`KEY_VARIABLES`) are
redacted wherever they appear, whatever their format.
"""

from __future__ import annotations

import fnmatch
import functools
import os
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

# kind -> RE2 pattern. A ``keep`` group is kept before the marker (the name of a setting
# whose value is the secret); everything else matched is replaced.
PATTERNS: dict[str, str] = {
    "private-key": (
        # The body as PEM has it (base64, and headers such as "DEK-Info: AES-128-CBC,..."):
        # code that only names the two markers (a parser's constants) is no key.
        r"-----BEGIN[A-Z ]{0,40} PRIVATE KEY-----[A-Za-z0-9+/=\s:,.\-]*?"
        r"-----END[A-Z ]{0,40} PRIVATE KEY-----"
    ),
    "anthropic-key": r"\bsk-ant-[a-z0-9]{2,12}-[A-Za-z0-9_\-]{20,}",
    "openai-key": (
        r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{16,}T3BlbkFJ[A-Za-z0-9_\-]{16,}"
        r"|\bsk-(?:proj|svcacct|admin)-[A-Za-z0-9_\-]{40,}"
    ),
    "aws-access-key": r"\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b",
    "aws-secret-key": (
        r"(?P<keep>(?i:aws_?secret_?access_?key|aws_?secret_?key)[\"']?\s*[:=]\s*[\"']?)"
        r"[A-Za-z0-9/+]{40}\b"
    ),
    "github-token": r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{40,255})\b",
    "gitlab-token": r"\bglpat-[A-Za-z0-9_\-]{20,}",
    "slack-token": (
        r"\bxox[abposr]-[A-Za-z0-9\-]{10,}"
        r"|https://hooks\.slack\.com/services/T[A-Za-z0-9_]+/B[A-Za-z0-9_]+/[A-Za-z0-9_]+"
    ),
}
# Environment variables whose values are provider keys: redacted wherever they appear.
KEY_VARIABLES = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY")
# Shorter values are not taken for keys (a test's "x"), so as not to redact every "x".
MIN_KEY_LENGTH = 16

# Well-known secret files, by name (case-insensitive, any directory).
SECRET_NAMES = (
    ".env", ".env.*", "*.env", ".envrc",
    "*.pem", "*.key", "*.p12", "*.pfx", "*.jks", "*.keystore", "*.kdbx",
    "id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*",
    ".npmrc", ".pypirc", ".netrc", "_netrc", ".git-credentials", ".htpasswd", ".pgpass",
    "credentials", "credentials.*", "*.credentials",
)  # fmt: skip


@functools.cache
def _compiled() -> dict[str, Any]:
    """The patterns, compiled on first use: commands that only read (``ls``) never pay
    for RE2's import and compilation (5 ms)."""
    import re2  # type: ignore[import-untyped]

    options = re2.Options()
    options.log_errors = False
    return {kind: re2.compile(pattern, options) for kind, pattern in PATTERNS.items()}


def prepare() -> None:
    """Compile the patterns now: a daemon does once idle, so that its first run does not
    pay for it (among four runs starting together, each compiling them as well)."""
    _compiled()


def marker(kind: str) -> str:
    return f"[redacted:{kind}]"


def _key_values(environ: Mapping[str, str]) -> list[tuple[str, str]]:
    out = []
    for name in KEY_VARIABLES:
        value = environ.get(name, "").strip()
        if len(value) >= MIN_KEY_LENGTH:
            out.append((name, value))
    return out


def redact(text: str, environ: Mapping[str, str] | None = None) -> tuple[str, Counter[str]]:
    """``text`` with every recognised secret replaced by its marker, and how many of
    each kind were replaced."""
    counts: Counter[str] = Counter()
    for _name, value in _key_values(os.environ if environ is None else environ):
        if value in text:
            counts["provider-key"] += text.count(value)
            text = text.replace(value, marker("provider-key"))
    for kind, pattern in _compiled().items():
        if not _maybe(kind, text):
            continue

        def replace(match: Any, kind: str = kind) -> str:
            keep = match.groupdict().get("keep") or ""
            return f"{keep}{marker(kind)}"

        text, n = pattern.subn(replace, text)
        if n:
            counts[kind] += n
    return text, counts


# Literals one of which every match of a kind contains: a text with none of them skips
# that pattern (most texts skip most).
_HINTS: dict[str, tuple[str, ...]] = {
    "private-key": ("PRIVATE KEY",),
    "anthropic-key": ("sk-ant-",),
    "openai-key": ("sk-",),
    "aws-access-key": ("AKIA", "ASIA", "ABIA", "ACCA"),
    "aws-secret-key": ("ecret", "ECRET"),
    "github-token": ("gh", "github_pat_"),
    "gitlab-token": ("glpat-",),
    "slack-token": ("xox", "hooks.slack.com"),
}


def _maybe(kind: str, text: str) -> bool:
    return any(hint in text for hint in _HINTS[kind])


def redact_tree(value: Any, counts: Counter[str]) -> Any:
    """``value`` (strings, lists and tables, as front matter holds them) redacted."""
    if isinstance(value, str):
        clean, found = redact(value)
        counts.update(found)
        return clean
    if isinstance(value, list):
        return [redact_tree(item, counts) for item in value]
    if isinstance(value, dict):
        return {key: redact_tree(item, counts) for key, item in value.items()}
    return value


@dataclass(frozen=True)
class Finding:
    kind: str
    line: int  # 1-based


def scan(text: str, environ: Mapping[str, str] | None = None) -> Iterator[Finding]:
    """Every recognised secret in ``text``: its kind and line."""
    for _name, value in _key_values(os.environ if environ is None else environ):
        start = text.find(value)
        while start != -1:
            yield Finding("provider-key", text.count("\n", 0, start) + 1)
            start = text.find(value, start + 1)
    for kind, pattern in _compiled().items():
        if not _maybe(kind, text):
            continue
        for match in pattern.finditer(text):
            yield Finding(kind, text.count("\n", 0, match.start()) + 1)


def secret_name(path: str) -> bool:
    """Whether ``path`` (relative, ``/``-separated) names a well-known secret file."""
    name = path.rsplit("/", 1)[-1].lower()
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in SECRET_NAMES)
