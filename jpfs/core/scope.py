"""Scope checks: every id an agent, an MCP client or ``--root-id`` names goes through here.

The rule is directory ancestry. An id is accepted when it is well formed, names an
existing conversation, every directory on its path is a real directory (not a
symlink), its real path lies under the conversation root's real path, and, when a
scope root is given, it is a strict descendant of that root.

Ids people type are resolved here too, so that every way in (CLI, tools, MCP, the
library) reads them alike: each segment may be a unique prefix of a segment at its
level (``c-01m8grcy/c-01m8grcyp``), an exact segment always winning, and ``@`` stands
for the active conversation where the caller has one. A prefix is matched only among
what the caller may name: at the levels of the scope root's own path that path alone,
below it the real directories there. So nothing outside the subtree is matched,
counted or named in an error.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

from jpfs.core import ids
from jpfs.errors import ArgumentError, IdError, NotFoundError, ScopeError

CONVERSATION_TOML = "conversation.toml"
TASK = "task.md"
ACTIVE = "@"
# An ambiguous prefix's error names this many candidates, then counts the rest.
SHOWN_CANDIDATES = 5


def is_conversation_dir(path: Path) -> bool:
    # lexists: a link or FIFO where a file belongs still makes a conversation, whose
    # run then reports the bad file instead of it going unnoticed.
    return os.path.lexists(path / CONVERSATION_TOML) or os.path.lexists(path / TASK)


def conversation_path(conv_root: Path, conv_id: str) -> Path:
    """The directory of ``conv_id`` (validated, not checked for existence or links)."""
    return conv_root.joinpath(*ids.validate(conv_id).split("/"))


def check_path(conv_root: Path, conv_id: str) -> Path:
    """Refuse ids whose path passes through a symlink or resolves outside the root."""
    path = conversation_path(conv_root, conv_id)
    cur = conv_root
    for seg in conv_id.split("/"):
        cur = cur / seg
        try:
            st = os.lstat(cur)
        except FileNotFoundError:
            return path
        if stat.S_ISLNK(st.st_mode):
            raise ScopeError(f"conversation {conv_id!r} passes through a symlink ({cur.name})")
        if not stat.S_ISDIR(st.st_mode):
            raise IdError(f"conversation {conv_id!r}: {cur.name} is not a directory")
    real_root = os.path.realpath(conv_root)
    real = os.path.realpath(path)
    if os.path.commonpath([real_root, real]) != real_root:
        raise ScopeError(f"conversation {conv_id!r} resolves outside the conversation root")
    return path


def resolve(
    conv_root: Path,
    conv_id: str,
    *,
    within: str | None = None,
    must_exist: bool = True,
    active: Callable[[], str | None] | None = None,
) -> str:
    """Validate ``conv_id`` for a caller scoped to ``within`` and return its canonical form.

    ``within=None`` means unscoped (a human at the CLI); ``within=""`` means the whole
    tree (any existing id); otherwise only strict descendants of ``within`` pass.
    An id that names no conversation as written is read as prefixes of segments
    (:func:`expand`) when ``must_exist``; ``active`` gives what ``@`` stands for
    (None: the caller has no active conversation, as an agent has not).
    """
    canonical = ids.validate(_active(conv_id, active))
    outside = bool(within) and not ids.is_descendant(canonical, within or "")
    if not outside:
        path = check_path(conv_root, canonical)
        if not must_exist or is_conversation_dir(path):
            return canonical
    if must_exist:
        found = expand(conv_root, canonical, within or "")
        if found is not None and found != canonical:
            return resolve(conv_root, found, within=within)
    if outside:
        raise ScopeError(
            f"conversation {canonical!r} is outside the allowed subtree {within!r}"
            " (only its descendants may be named)"
        )
    raise NotFoundError(f"no conversation {canonical!r}")


def _active(conv_id: str, active: Callable[[], str | None] | None) -> str:
    """``@`` (or ``@/rest``) with the active conversation's id in its place."""
    if not isinstance(conv_id, str) or (conv_id != ACTIVE and not conv_id.startswith("@/")):
        return conv_id
    if active is None:
        raise IdError("'@' (the active conversation) names nothing here: give the id")
    current = active()
    if current is None:
        raise NotFoundError("no active conversation for '@' (run `jpfs conversation use ID`)")
    return current + conv_id[len(ACTIVE) :]


def children(conv_root: Path, parent_id: str) -> list[str]:
    """The names a segment below ``parent_id`` (``""``: the root) is matched among: real
    sub-directories with well-formed, unreserved names, as :func:`jpfs.core.tree.walk`
    descends into (the short ids listings show are unique among the same names)."""
    path = conv_root.joinpath(*parent_id.split("/")) if parent_id else conv_root
    try:
        with os.scandir(path) as entries:
            names = [entry.name for entry in entries if ids.is_child_dir(entry)]
    except OSError:  # gone, not a directory, unreadable: nothing to match there
        return []
    return names


def expand(conv_root: Path, conv_id: str, within: str = "") -> str | None:
    """The id whose segments ``conv_id``'s segments are, each exactly or as the unique
    prefix of one at its level; None when a segment matches nothing.

    At the levels of ``within``'s own path only that path is seen, so a prefix never
    matches, nor counts, a conversation outside it. An ambiguous segment is an
    :class:`ArgumentError` naming a few of the candidates (all inside ``within``).
    """
    scope_path = ids.segments(within)
    resolved: list[str] = []
    for level, seg in enumerate(ids.segments(conv_id)):
        here = "/".join(resolved)
        if level < len(scope_path):
            names = [scope_path[level]]
        else:
            names = children(conv_root, here)
        if seg in names:
            resolved.append(seg)
            continue
        matches = sorted(name for name in names if name.startswith(seg))
        if not matches:
            return None
        if len(matches) > 1:
            raise ArgumentError(_ambiguous(conv_id, here, matches))
        resolved.append(matches[0])
    return "/".join(resolved)


def _ambiguous(conv_id: str, here: str, matches: list[str]) -> str:
    shown = [f"{here}/{name}" if here else name for name in matches[:SHOWN_CANDIDATES]]
    more = len(matches) - len(shown)
    listed = ", ".join(shown) + (f" and {more} more" if more else "")
    return (
        f"conversation id {conv_id!r} is ambiguous: it begins {len(matches)}"
        f" conversations ({listed}); type more of it"
    )
