"""``grep`` over conversations: task, Q&A, events, results, mail and files.

Every file of the record's worktree is searched, committed or not. git grep over the
tracked files is the fast path (C, multi-threaded, trusting the index); a file written
moments ago and not committed yet is found by ``git ls-files --others``, run alongside
it, and searched with ``git grep --no-index``. ``git grep --untracked`` would do both
in one process but walks the tree inside the grep: 1.4x the tracked search at 130,000
files, against 1.16x for the two side by side (bench/RESULTS.md).

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
from jpfs.core.conversation import Conversation
from jpfs.core.tree import SKIP
from jpfs.errors import FormatError, GitError, PatternError

# A record that does not set ``hidden`` to anything but ``false`` is not hidden; seeing
# that in the raw text spares a full TOML parse (pure Python) of every matching
# conversation's record, which cost more than the git grep itself (bench/RESULTS.md).
_MAYBE_HIDDEN = re.compile(rb"""^[ \t]*["']?hidden["']?[ \t]*(?:=[ \t]*+(?!false\b)|\.)""", re.M)


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
        if part in SKIP:
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
) -> list[Match]:
    """Matches in the files of conversations ``only`` (just their own files), or in
    every conversation below ``under`` (exclusive), or in the whole tree."""
    if regex:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise PatternError(f"bad regular expression {pattern!r}: {exc}") from exc
    only = list(only)
    # git runs in the record worktree, whose root is the conversation root.
    if only:
        paths = list(only)
    elif under:
        paths = [f"{under}/"]
    else:
        paths = ["."]
    options = [
        "-I", "-n", "-z", "--no-color", "-P" if regex else "-F",
        "-i" if ignore_case else "--no-ignore-case", "-e", pattern,
    ]  # fmt: skip
    spec = [
        *(f":(literal){p}" for p in paths),
        # The record's [config] snapshot would match every search for a common word.
        ":(exclude,glob)**/conversation.toml",
    ]
    tracked = ["git", "-c", "core.quotePath=false", "grep", *options, "--", *spec]
    others = ["git", "-c", "core.quotePath=false", "ls-files", "-o", "--exclude-standard"]
    found = _run_both(conv_root, pattern, tracked, [*others, "-z", "--", *spec])
    output = found[0]
    new_files = [f for f in found[1].decode("utf-8", "replace").split("\0") if f]
    for n in range(0, len(new_files), 500):
        more = ["git", "grep", "--no-index", *options, "--", *new_files[n : n + 500]]
        output += _run_both(conv_root, pattern, more)[0]
    hidden: dict[str, bool] = {}

    def is_hidden(conv_id: str) -> bool:
        # A conversation is hidden when it, or an ancestor below the search root, is.
        if conv_id not in hidden:
            conv = Conversation(conv_root, conv_id)
            try:
                own = bool(
                    _MAYBE_HIDDEN.search(conv.toml_path.read_bytes())
                    and conv.meta().get("hidden", False)
                )
            except (FileNotFoundError, FormatError):
                own = False
            up = ids.parent(conv_id)
            stop = under or ""
            hidden[conv_id] = own or (
                up is not None and ids.is_descendant(up, stop) and is_hidden(up)
            )
        return hidden[conv_id]

    wanted = set(only)
    out = []
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
        out.append(Match(conv_id, file, int(lineno), text))
    return out


def _run_both(conv_root: Path, pattern: str, grep: list[str], *more: list[str]) -> list[bytes]:
    """The output of ``grep`` (no match: empty) and of each of ``more``, run side by side.

    git grep -P runs PCRE2 in its own process (our GIL stays free) with its match
    limits; the timeout bounds whatever is left.
    """
    procs = [
        subprocess.Popen(argv, cwd=conv_root, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for argv in (grep, *more)
    ]
    outputs: list[tuple[bytes, bytes]] = []
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=120))
    except subprocess.TimeoutExpired as exc:
        raise PatternError(
            f"searching for {pattern!r} took over 120 s; narrow the pattern"
        ) from exc
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    code = procs[0].returncode
    if code not in (0, 1):
        err = outputs[0][1].decode(errors="replace").strip()
        if "pattern" in err or "regex" in err or "parenthes" in err:
            raise PatternError(f"bad pattern {pattern!r}: {err.removeprefix('fatal: ')}")
        raise GitError(f"git grep failed: {err}")
    for proc, (_, stderr) in zip(procs[1:], outputs[1:], strict=True):
        if proc.returncode != 0:
            raise GitError(f"git ls-files failed: {stderr.decode(errors='replace').strip()}")
    return [out if i or code == 0 else b"" for i, (out, _) in enumerate(outputs)]
