"""What an agent's file tools may see, read and write under ``ctx.files_root``.

Other conversations are out of sight (the record is read through the
``jp_conversation_*`` tools, which apply the subtree rule); secrets are not read
(well-known secret files, and what git ignores, unless the profile's ``tools.expose``
lists them); writes need the profile's ``tools.write`` globs, and never reach ``.jpfs/``
or the record outside the caller's own ``files/``.

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

from jpfs.core import secrets
from jpfs.core.tool import ToolContext
from jpfs.errors import ScopeError, ToolError
from jpfs.infra import safefs, safescan
from jpfs.infra.git import ignore


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


def conv_scope(ctx: ToolContext) -> tuple[str, str | None]:
    """(conversation root, the caller's own conversation dir), relative to files_root."""
    root = ctx.workspace.conv_root_rel if ctx.workspace is not None else "conversations"
    return root, f"{root}/{ctx.conversation}" if ctx.conversation else None


def under(path: str, top: str) -> bool:
    return path == top or path.startswith(top + "/")


def hidden_from(ctx: ToolContext) -> safescan.Hide:
    """Other conversations are out of sight: the record is read through jp_conversation_*
    tools, which apply the subtree rule; a file tool must not be a way around it."""
    root, own = conv_scope(ctx)

    def hide(rel: str) -> bool:
        if not under(rel, root) or rel == root:
            return False
        return own is None or not (under(rel, own) or under(own, rel))

    return hide


def exposed(ctx: ToolContext) -> tuple[str, ...]:
    """The profile's ``tools.expose`` globs: secret-looking or ignored paths it may read."""
    return tuple(p for p in ctx.settings.tools.expose if p.strip())


def secret_reason(ctx: ToolContext, rel: str, ignored: Callable[[str], bool]) -> str:
    """Why ``rel`` is not for this agent ("" when it is): a well-known secret file, or a
    file git ignores (``.env`` and friends), unless the profile exposes it. The record's
    files are jpfs's own (redacted as they are written) and the scope rule's business."""
    root, _own = conv_scope(ctx)
    if rel == "." or under(rel, root) or path_is_writable(rel, exposed(ctx)):
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


def check_writable(ctx: ToolContext, path: str) -> str:
    rel = check_visible(ctx, path)
    root, own = conv_scope(ctx)
    if rel.split("/")[0].lower() == ".jpfs":
        # Profiles and config are the security policy; an agent must not rewrite them.
        raise ScopeError(f"path {rel!r} is jpfs configuration; agents cannot write it")
    if under(rel, root) and not (own is not None and under(rel, f"{own}/files")):
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
