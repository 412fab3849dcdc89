"""File tools for agents: read, list, grep, write, modify under ``ctx.files_root``.

All confinement lives in :mod:`jpfs.infra.safefs`; this module adds the profile's write
permission (``ctx.writable`` globs) and formats results for a model, with explicit
notes whenever something was cut.

Writable globs match the normalised POSIX path relative to ``files_root``, case-sensitively:
``*`` and ``?`` stay within one path segment, ``**`` spans segments (``**/`` may match no
directory at all) and a trailing ``/`` means everything below. ``*`` deliberately does not
cross ``/`` (unlike plain ``fnmatch``): ``notes/*`` granting the whole subtree would be a
surprise in a security policy.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from typing import Any

from jpfs.core import secrets
from jpfs.core.tool import JsonDict, Tool, ToolContext
from jpfs.errors import ScopeError, ToolError
from jpfs.infra import safefs, safescan
from jpfs.infra.git import ignore

READ_CAP_BYTES = 2_000_000
READ_DEFAULT_LINES = 2000
READ_MAX_CHARS = 100_000
LIST_MAX_ENTRIES = 1000
GREP_MAX_MATCHES = 200


@functools.lru_cache(maxsize=256)
def _glob_regex(pattern: str) -> re.Pattern[str]:
    pat = pattern.strip()
    while pat.startswith("./"):
        pat = pat[2:]
    if pat.endswith("/"):
        pat += "**"
    out: list[str] = []
    i = 0
    while i < len(pat):
        if pat.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pat.startswith("**", i):
            out.append(".*")
            i += 2
        elif pat[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pat[i] == "?":
            out.append("[^/]")
            i += 1
        elif pat[i] == "[" and (end := pat.find("]", i + 2)) != -1:
            body = pat[i + 1 : end]
            negate = body[:1] == "!"
            body = re.escape(body[1:] if negate else body).replace("\\-", "-")
            out.append(f"(?!/)[{'^' if negate else ''}{body}]")
            i = end + 1
        else:
            out.append(re.escape(pat[i]))
            i += 1
    return re.compile("".join(out))


def path_is_writable(relpath: str, patterns: Sequence[str]) -> bool:
    """Whether the normalised ``relpath`` matches one of the profile's writable globs."""
    return any(_glob_regex(p).fullmatch(relpath) for p in patterns if p.strip())


def _conv_scope(ctx: ToolContext) -> tuple[str, str | None]:
    """(conversation root, the caller's own conversation dir), relative to files_root."""
    root = ctx.workspace.conv_root_rel if ctx.workspace is not None else "conversations"
    return root, f"{root}/{ctx.conversation}" if ctx.conversation else None


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top + "/")


def hidden_from(ctx: ToolContext) -> safescan.Hide:
    """Other conversations are out of sight: the record is read through jp_conversation_*
    tools, which apply the subtree rule; a file tool must not be a way around it."""
    root, own = _conv_scope(ctx)

    def hide(rel: str) -> bool:
        if not _under(rel, root) or rel == root:
            return False
        return own is None or not (_under(rel, own) or _under(own, rel))

    return hide


def exposed(ctx: ToolContext) -> tuple[str, ...]:
    """The profile's ``tools.expose`` globs: secret-looking or ignored paths it may read."""
    tools = ctx.config.get("tools", {})
    return tuple(str(p) for p in tools.get("expose", []) if str(p).strip())


def secret_reason(ctx: ToolContext, rel: str, ignored: Callable[[str], bool]) -> str:
    """Why ``rel`` is not for this agent ("" when it is): a well-known secret file, or a
    file git ignores (``.env`` and friends), unless the profile exposes it. The record's
    files are jpfs's own (redacted as they are written) and the scope rule's business."""
    root, _own = _conv_scope(ctx)
    if rel == "." or _under(rel, root) or path_is_writable(rel, exposed(ctx)):
        return ""
    if secrets.secret_name(rel):
        return "is a well-known secret file"
    if ignored(rel):
        return "is ignored by git (ignored files often hold secrets: .env, keys, caches)"
    return ""


def secret_hider(ctx: ToolContext) -> safescan.Hide:
    """The listing's and grep's view of :func:`secret_reason`: such paths are skipped."""
    found: list[ignore.Ignored] = []

    def ignored(rel: str) -> bool:
        if not found:
            found.append(ignore.ignored(ctx.files_root))
        return rel in found[0]

    return lambda rel: bool(secret_reason(ctx, rel, ignored))


def check_visible(ctx: ToolContext, path: str) -> str:
    rel = safefs.normalize_relpath(path)
    if rel != "." and hidden_from(ctx)(rel):
        raise ScopeError(
            f"path {rel!r} belongs to another conversation; use the jp_conversation_* tools"
        )
    return rel


def check_readable(ctx: ToolContext, path: str) -> str:
    """:func:`check_visible`, and not a secret (:func:`secret_reason`)."""
    rel = check_visible(ctx, path)
    why = secret_reason(ctx, rel, lambda r: ignore.is_ignored(ctx.files_root, r))
    if why:
        raise ScopeError(
            f"path {rel!r} {why}; agents do not read it, so that what it holds is never"
            " sent to a model nor committed (a profile may list it in tools.expose)"
        )
    return rel


def hidden_or_secret(ctx: ToolContext) -> safescan.Hide:
    scope, secret = hidden_from(ctx), secret_hider(ctx)
    return lambda rel: scope(rel) or secret(rel)


def _check_writable(ctx: ToolContext, path: str) -> str:
    rel = check_visible(ctx, path)
    root, own = _conv_scope(ctx)
    if rel.split("/")[0].lower() == ".jpfs":
        # Profiles and config are the security policy; an agent must not rewrite them.
        raise ScopeError(f"path {rel!r} is jpfs configuration; agents cannot write it")
    if _under(rel, root) and not (own is not None and _under(rel, f"{own}/files")):
        raise ScopeError(
            f"path {rel!r} is in the conversation record; agents may write only under"
            f" {own or root}/files/"
        )
    if not any(p.strip() for p in ctx.writable):
        raise ToolError("this agent's profile does not allow writing files")
    if rel == "." or not path_is_writable(rel, ctx.writable):
        allowed = ", ".join(p for p in ctx.writable if p.strip())
        raise ToolError(
            f"writing {rel!r} is not allowed by this agent's profile (writable: {allowed})"
        )
    return rel


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
    rel = _check_writable(ctx, path)
    if _under(rel, _conv_scope(ctx)[0]):
        content = secrets.redact(content)[0]  # into the record, which is shared
    created = safefs.write_text(ctx.files_root, rel, content)
    size = len(content.encode("utf-8"))
    return f"{'created' if created else 'replaced'} {rel} ({size:,} bytes)"


def _modify(ctx: ToolContext, args: JsonDict) -> str:
    path: str = _arg(args, "path", str)
    old: str = _arg(args, "old", str)
    new: str = _arg(args, "new", str)
    rel = _check_writable(ctx, path)
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
