"""``grep`` over conversations: task, Q&A, events, results, mail and files.

Every file of the record's worktree is searched, committed or not. git grep over the
tracked files is the fast path (C, multi-threaded, trusting the index); a file written
moments ago and not committed yet is found by :mod:`jpfs.infra.git.untracked` while that
grep runs, and searched with ``git grep --no-index``. ``git grep --untracked`` would do
both in one process but walks the tree inside the grep (1.4x the tracked search at
130,000 files), and so does ``git ls-files --others`` beside it (1.3x); the untracked
scan's cache re-lists only the directories that changed (bench/RESULTS.md).

``conversation.toml`` is not searched: it is metadata, and its [config] snapshot of
the agent's profile would match most searches in every conversation.

The heavy lifting is ``git grep`` (C, multi-threaded, reads the index); jpfs adds
what git does not know: which conversation a file belongs to, scoping and hidden
conversations.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from jpfs.core import ids
from jpfs.core.scope import CONVERSATION_TOML
from jpfs.errors import FormatError, PatternError
from jpfs.infra import git, textfile
from jpfs.infra.git import untracked

TIMEOUT = 120.0  # seconds a git grep may take before the search is refused

# A record that does not set ``hidden`` to anything but ``false`` is not hidden; seeing
# that in the raw text spares a full TOML parse (pure Python) of every matching
# conversation's record, which cost more than the git grep itself (bench/RESULTS.md).
# The key is looked for first and its line start checked after: anchored at every line
# start (``re.M``), the same search was 8x slower.
_HIDDEN_KEY = re.compile(rb"""hidden["']?[ \t]*(?:=[ \t]*+(?!false\b)|\.)""")


def _maybe_hidden(raw: bytes) -> bool:
    """Whether a line of ``raw`` may set ``hidden`` (a key alone at its line's start,
    quoted or not, set to anything but ``false``, or a dotted key under it)."""
    for found in _HIDDEN_KEY.finditer(raw):
        line = raw.rfind(b"\n", 0, found.start()) + 1
        if not raw[line : found.start()].strip(b" \t\"'"):
            return True
    return False


@dataclass(frozen=True)
class Match:
    id: str
    file: str  # path relative to the conversation directory
    line: int
    text: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def owner(rel: str) -> tuple[str, str]:
    """``a/b/events/0001-user.md`` -> (``a/b``, ``events/0001-user.md``)."""
    parts = rel.split("/")
    for i, part in enumerate(parts[:-1]):
        if part in ids.RESERVED:
            return "/".join(parts[:i]), "/".join(parts[i:])
    return "/".join(parts[:-1]), parts[-1]


def grep(
    conv_root: Path,
    pattern: str,
    *,
    only: Iterable[str] = (),
    under: str | None = None,
    regex: bool = False,
    ignore_case: bool = False,
    include_hidden: bool = False,
    cache_dir: Path | None = None,
) -> list[Match]:
    """Matches in the files of conversations ``only`` (just their own files), or in
    every conversation below ``under`` (exclusive), or in the whole tree. ``cache_dir``
    (``.jpfs/local``) keeps what spares the next search a walk of the whole tree."""
    if regex:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise PatternError(f"bad regular expression {pattern!r}: {exc}") from exc
    only = list(only)
    # git runs in the record worktree, whose root is the conversation root.
    tops = only or [under or ""]
    options = [
        "-I", "-n", "-z", "--no-color", "-P" if regex else "-F",
        "-i" if ignore_case else "--no-ignore-case", "-e", pattern,
    ]  # fmt: skip
    spec = [
        *(f":(literal){t}" if t else "." for t in tops),
        # The record's [config] snapshot would match every search for a common word.
        f":(exclude,glob)**/{CONVERSATION_TOML}",
    ]
    procs = [git.start(conv_root, ["-c", "core.quotePath=false", "grep", *options, "--", *spec])]
    try:
        # The tracked search runs while the tree is scanned for files not tracked yet.
        new_files = [
            f
            for f in untracked.untracked(conv_root, tops, cache_dir=cache_dir)
            if f.rpartition("/")[2] != CONVERSATION_TOML
        ]
        for n in range(0, len(new_files), 500):
            more = ["grep", "--no-index", *options, "--", *new_files[n : n + 500]]
            procs.append(git.start(conv_root, more))
        output = b"".join(_matches(proc, pattern) for proc in procs)
    finally:
        git.stop(procs)
    hidden: dict[str, bool] = {}

    def is_hidden(conv_id: str) -> bool:
        # A conversation is hidden when it, or an ancestor below the search root, is.
        if conv_id not in hidden:
            own = _hides_itself(conv_root, conv_id)
            up = ids.parent(conv_id)
            stop = under or ""
            hidden[conv_id] = own or (
                up is not None and ids.is_descendant(up, stop) and is_hidden(up)
            )
        return hidden[conv_id]

    wanted = set(only)
    out = []
    thinking = _ThinkingLines(conv_root)
    for line in output.decode("utf-8", errors="replace").splitlines():
        path, _, rest = line.partition("\0")
        lineno, _, text = rest.partition("\0")
        conv_id, file = owner(path)
        if not conv_id:
            continue
        if wanted and conv_id not in wanted:
            continue
        if not wanted and under and not ids.is_descendant(conv_id, under):
            continue
        if not include_hidden and not wanted and is_hidden(conv_id):
            continue
        if int(lineno) in thinking.of(conv_id, file):
            continue  # the agent's own thinking is shown to nobody by a search
        out.append(Match(conv_id, file, int(lineno), text))
    return out


class _ThinkingLines:
    """The lines of assistant events' front matter that hold thinking (``[[thinking]]``
    tables): the agent's own, never in a caller's context, so never a search's match nor
    its context lines. Read only for events that matched."""

    def __init__(self, conv_root: Path) -> None:
        self.conv_root = conv_root
        self._found: dict[tuple[str, str], frozenset[int]] = {}

    def of(self, conv_id: str, file: str) -> frozenset[int]:
        if not (file.startswith("events/") and file.endswith("-assistant.md")):
            return frozenset()
        key = (conv_id, file)
        if key not in self._found:
            try:
                text = textfile.read_text(self.conv_root / conv_id / file, self.conv_root)
            except (OSError, FormatError):
                text = ""
            self._found[key] = thinking_lines(text)
        return self._found[key]


def thinking_lines(text: str) -> frozenset[int]:
    """Line numbers (1-based) of the ``[[thinking]]`` tables in ``text``'s front matter."""
    lines = text.split("\n")
    if not lines or lines[0].rstrip() != "+++":
        return frozenset()
    out: set[int] = set()
    inside = False
    for number, line in enumerate(lines[1:], start=2):
        stripped = line.strip()
        if stripped == "+++":
            break
        if stripped.startswith("["):
            inside = stripped == "[[thinking]]"
        if inside:
            out.add(number)
    return frozenset(out)


@dataclass(frozen=True)
class Shown:
    """A line to show around matches: a match (``:``), context (``-``), or the ``--``
    between two groups of lines (``sep``), as grep -C shows them."""

    id: str
    file: str
    line: int
    text: str
    sep: str  # ":" match, "-" context, "--" group separator (no line)


def with_context(conv_root: Path, matches: list[Match], context: int) -> list[Shown]:
    """``matches`` with ``context`` lines before and after each, read from the files
    (as they are now, committed or not); overlapping groups merge, as in grep."""
    out: list[Shown] = []
    by_file: dict[tuple[str, str], list[Match]] = {}
    for m in matches:
        by_file.setdefault((m.id, m.file), []).append(m)
    thinking = _ThinkingLines(conv_root)
    for (conv_id, file), found in by_file.items():
        try:
            lines = textfile.read_text(conv_root / conv_id / file, conv_root).splitlines()
        except (OSError, FormatError):
            lines = []
        hits = {m.line for m in found}
        wanted = sorted(
            ({n for m in found for n in range(m.line - context, m.line + context + 1)}
            & set(range(1, len(lines) + 1)))
            - thinking.of(conv_id, file)
            | hits
        )  # fmt: skip
        previous = None
        for n in wanted:
            if out and (previous is None or n != previous + 1):
                out.append(Shown(conv_id, file, 0, "", "--"))
            text = lines[n - 1] if n <= len(lines) else next(m.text for m in found if m.line == n)
            out.append(Shown(conv_id, file, n, text, ":" if n in hits else "-"))
            previous = n
    return out


def _hides_itself(conv_root: Path, conv_id: str) -> bool:
    try:
        # Non-blocking, regular files only, capped: a FIFO or a huge file named
        # conversation.toml cannot stall the search (read with the root below).
        raw = textfile.read_bytes(Path(f"{conv_root}/{conv_id}/{CONVERSATION_TOML}"))
    except (OSError, FormatError):
        return False
    if not _maybe_hidden(raw):
        return False
    # Imported here: most searches never parse a record, and the CLI starts faster.
    from jpfs.core.conversation import Conversation

    try:
        return bool(Conversation(conv_root, conv_id).meta().get("hidden", False))
    except (FileNotFoundError, FormatError):
        return False


def _matches(proc: subprocess.Popen[bytes], pattern: str) -> bytes:
    """A git grep's output (no match: empty).

    git grep -P runs PCRE2 in its own process (our GIL stays free) with its match
    limits; the timeout bounds whatever is left.
    """
    try:
        out, err = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        raise PatternError(
            f"searching for {pattern!r} took over {TIMEOUT:.0f} s; narrow the pattern"
        ) from exc
    if proc.returncode == 1:
        return b""
    if proc.returncode != 0:
        text = err.decode(errors="replace")
        if "pattern" in text or "regex" in text or "parenthes" in text:
            raise PatternError(f"bad pattern {pattern!r}: {git.complaint(text)}")
        raise git.failure(["grep"], proc.returncode, err)
    return out
