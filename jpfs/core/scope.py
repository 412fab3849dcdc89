"""Scope checks: every id an agent, an MCP client or ``--root-id`` names goes through here.

The rule is directory ancestry. An id is accepted when it is well formed, names an
existing conversation, every directory on its path is a real directory (not a
symlink), its real path lies under the conversation root's real path, and, when a
scope root is given, it is a strict descendant of that root.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from jpfs.core import ids
from jpfs.errors import IdError, NotFoundError, ScopeError

CONVERSATION_TOML = "conversation.toml"
TASK = "task.md"


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
    conv_root: Path, conv_id: str, *, within: str | None = None, must_exist: bool = True
) -> str:
    """Validate ``conv_id`` for a caller scoped to ``within`` and return its canonical form.

    ``within=None`` means unscoped (a human at the CLI); ``within=""`` means the whole
    tree (any existing id); otherwise only strict descendants of ``within`` pass.
    """
    canonical = ids.validate(conv_id)
    if within is not None and within != "" and not ids.is_descendant(canonical, within):
        raise ScopeError(
            f"conversation {canonical!r} is outside the allowed subtree {within!r}"
            " (only its descendants may be named)"
        )
    path = check_path(conv_root, canonical)
    if must_exist and not is_conversation_dir(path):
        raise NotFoundError(f"no conversation {canonical!r}")
    return canonical
