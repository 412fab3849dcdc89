"""File tools for agents: read, list, grep, write, modify under ``ctx.files_root``.

All confinement lives in :mod:`jpfs.infra.safefs`; what an agent may see, read and
write (other conversations, secrets, the profile's writable globs) in
:mod:`jpfs.tools.fsaccess`. This module runs the tools and formats their results for a
model, with explicit notes whenever something was cut.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jpfs.core import secrets
from jpfs.core.tool import JsonDict, Tool, ToolContext
from jpfs.errors import ToolError
from jpfs.infra import safefs, safescan
from jpfs.tools.fsaccess import (
    check_readable,
    check_writable,
    conv_scope,
    hidden_or_secret,
    under,
)

READ_CAP_BYTES = 2_000_000
READ_DEFAULT_LINES = 2000
READ_MAX_CHARS = 100_000
LIST_MAX_ENTRIES = 1000
GREP_MAX_MATCHES = 200


def _arg(args: JsonDict, key: str, kind: type[Any], default: Any = None) -> Any:
    value = args.get(key, default)
    if value is None and default is None:
        raise ToolError(f"missing required argument {key!r}")
    ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
    if not ok:
        raise ToolError(f"argument {key!r} must be of type {kind.__name__}")
    return value


def _read(ctx: ToolContext, args: JsonDict) -> str:
    path: str = _arg(args, "path", str)
    offset: int = _arg(args, "offset", int, 1)
    limit: int = _arg(args, "limit", int, READ_DEFAULT_LINES)
    if offset < 1 or limit < 1:
        raise ToolError("offset and limit must be at least 1")
    text, cut = safefs.read_text(ctx.files_root, check_readable(ctx, path), READ_CAP_BYTES)
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    total = len(lines)
    if total == 0:
        return "[empty file]"
    if offset > total:
        raise ToolError(f"offset {offset} is past the end of {path!r} ({total:,} lines)")
    window = lines[offset - 1 : offset - 1 + limit]
    size = 0
    for n, line in enumerate(window):
        size += len(line) + 1
        if size > READ_MAX_CHARS and n > 0:
            window = window[:n]
            break
    last = offset + len(window) - 1
    body = "\n".join(window)
    notes = []
    if offset > 1 or last < total or cut:
        of = f"at least {total:,}" if cut else f"{total:,}"
        more = f"; pass offset={last + 1} to read on" if last < total else ""
        notes.append(f"[showing lines {offset:,}-{last:,} of {of}{more}]")
    if cut:
        notes.append(f"[file is larger than {READ_CAP_BYTES:,} bytes; the rest cannot be read]")
    return "\n".join([body, *notes])


def _list(ctx: ToolContext, args: JsonDict) -> str:
    path: str = _arg(args, "path", str, ".")
    recursive: bool = _arg(args, "recursive", bool, False)
    listing = safescan.list_dir(
        ctx.files_root,
        check_readable(ctx, path),
        recursive,
        LIST_MAX_ENTRIES,
        ctx.cancel,
        hidden_or_secret(ctx),
    )
    lines = []
    for e in listing.entries:
        if e.kind == "dir":
            lines.append(e.path + "/")
        elif e.kind == "symlink":
            lines.append(f"{e.path}  (symlink, not followed)")
        elif e.kind == "file":
            lines.append(f"{e.path}  ({e.size:,} bytes)")
        else:
            lines.append(f"{e.path}  (special file)")
    if not lines:
        return "[empty directory]"
    if len(listing.entries) < listing.total or not listing.complete:
        of = f"at least {listing.total:,}" if not listing.complete else f"{listing.total:,}"
        lines.append(f"[truncated: showing {len(listing.entries):,} of {of} entries]")
    return "\n".join(lines)


def _grep(ctx: ToolContext, args: JsonDict) -> str:
    pattern: str = _arg(args, "pattern", str)
    path: str = _arg(args, "path", str, ".")
    regex: bool = _arg(args, "regex", bool, False)
    ignore_case: bool = _arg(args, "ignore_case", bool, False)
    res = safescan.grep(
        ctx.files_root,
        pattern,
        check_readable(ctx, path),
        regex,
        ignore_case,
        GREP_MAX_MATCHES,
        ctx.cancel,
        hidden_or_secret(ctx),
    )
    lines = [f"{m.path}:{m.line_no}: {m.line}" for m in res.matches]
    if not lines:
        lines.append(f"no matches for {pattern!r} in {res.files_scanned:,} file(s)")
    if len(res.matches) < res.total:
        lines.append(f"[truncated: showing {len(res.matches):,} of {res.total:,} matches]")
    if res.skipped:
        lines.append(f"[skipped {res.skipped:,} binary, oversized or unreadable file(s)]")
    if not res.complete:
        lines.append("[search stopped early: too many files; narrow it with path]")
    return "\n".join(lines)


def _write(ctx: ToolContext, args: JsonDict) -> str:
    path: str = _arg(args, "path", str)
    content: str = _arg(args, "content", str)
    rel = check_writable(ctx, path)
    if under(rel, conv_scope(ctx)[0]):
        content = secrets.redact(content)[0]  # into the record, which is shared
    created = safefs.write_text(ctx.files_root, rel, content)
    size = len(content.encode("utf-8"))
    return f"{'created' if created else 'replaced'} {rel} ({size:,} bytes)"


def _modify(ctx: ToolContext, args: JsonDict) -> str:
    path: str = _arg(args, "path", str)
    old: str = _arg(args, "old", str)
    new: str = _arg(args, "new", str)
    rel = check_writable(ctx, path)
    safefs.modify_text(ctx.files_root, rel, old, new, count=1)
    return f"modified {rel}: replaced 1 occurrence"


def _schema(props: dict[str, JsonDict], required: Sequence[str]) -> JsonDict:
    return {
        "type": "object",
        "properties": props,
        "required": list(required),
        "additionalProperties": False,
    }


_PATH = "Path relative to the working tree root, with '/' separators (e.g. 'src/app.py')."
_REFUSED = (
    "Absolute paths, '..', symbolic links, .git/, .jpfs/local/, files git ignores and"
    " well-known secret files (.env, *.pem, id_rsa...) are refused."
)

FS_TOOLS: dict[str, Tool] = {
    t.name: t
    for t in (
        Tool(
            "fs_read_file",
            "Read a UTF-8 text file from the working tree. Returns the file's lines verbatim "
            f"(no line numbers), at most {READ_DEFAULT_LINES:,} lines or {READ_MAX_CHARS:,} "
            "characters per call; a note at the end says which lines were shown and the "
            "offset to continue from. Binary files are refused. " + _REFUSED,
            _schema(
                {
                    "path": {"type": "string", "description": _PATH},
                    "offset": {
                        "type": "integer",
                        "minimum": 1,
                        "description": "First line to return, 1-based (default 1).",
                    },
                    "limit": {
                        "type": "integer",
                        "minimum": 1,
                        "description": f"Number of lines (default {READ_DEFAULT_LINES:,}).",
                    },
                },
                ["path"],
            ),
            _read,
        ),
        Tool(
            "fs_list_files",
            "List a directory of the working tree: one entry per line as a path relative to "
            "the root, directories ending in '/', files with their size. With recursive=true "
            f"the whole subtree is listed depth-first. At most {LIST_MAX_ENTRIES:,} entries; "
            "a note says when the list was cut. Symbolic links are shown but not followed; "
            ".git/ and .jpfs/local/ are hidden. " + _REFUSED,
            _schema(
                {
                    "path": {"type": "string", "description": _PATH + " Default '.'."},
                    "recursive": {
                        "type": "boolean",
                        "description": "List the whole subtree (default false).",
                    },
                },
                [],
            ),
            _list,
        ),
        Tool(
            "fs_grep_files",
            "Search text files for lines containing a pattern (a literal string unless "
            "regex=true, then an RE2 regular expression: linear time, no backreferences or lookaround). path may be a directory "
            "(searched recursively) or one file. Returns 'path:line: text' lines, at most "
            f"{GREP_MAX_MATCHES:,} matches, with a note giving the total when cut. Binary "
            "files, symbolic links, .git/ and .jpfs/local/ are skipped.",
            _schema(
                {
                    "pattern": {"type": "string", "description": "Text or regex to find."},
                    "path": {"type": "string", "description": _PATH + " Default '.'."},
                    "regex": {
                        "type": "boolean",
                        "description": "Treat pattern as a regular expression (default false).",
                    },
                    "ignore_case": {
                        "type": "boolean",
                        "description": "Case-insensitive matching (default false).",
                    },
                },
                ["pattern"],
            ),
            _grep,
        ),
        Tool(
            "fs_write_file",
            "Create or overwrite a text file with the given content (UTF-8), creating missing "
            "directories. The write is atomic. Only paths this agent's profile marks writable "
            "are allowed; others are refused and nothing is written. Overwriting a symbolic "
            "link is refused. " + _REFUSED,
            _schema(
                {
                    "path": {"type": "string", "description": _PATH},
                    "content": {"type": "string", "description": "The file's full new text."},
                },
                ["path", "content"],
            ),
            _write,
        ),
        Tool(
            "fs_modify_file",
            "Edit a text file by replacing one exact occurrence of 'old' with 'new'. 'old' must "
            "match the file exactly (whitespace and indentation included) and exactly once: "
            "if it is missing or ambiguous the call fails and nothing changes, so include "
            "enough surrounding lines to make it unique. Only paths this agent's profile "
            "marks writable are allowed. " + _REFUSED,
            _schema(
                {
                    "path": {"type": "string", "description": _PATH},
                    "old": {"type": "string", "description": "Exact text to replace."},
                    "new": {"type": "string", "description": "Replacement text."},
                },
                ["path", "old", "new"],
            ),
            _modify,
        ),
    )
}
