"""Where a work tree's git files are: its git directory and the repository's common one."""

from __future__ import annotations

from pathlib import Path


def git_dir(root: Path) -> Path | None:
    """The git directory of the work tree at ``root`` (``.git`` or where its file points)."""
    dotgit = root / ".git"
    if dotgit.is_dir():
        return dotgit
    try:
        text = dotgit.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    if not text.startswith("gitdir:"):
        return None
    target = Path(text[7:].strip())
    return target if target.is_absolute() else (root / target).resolve()


def common_dir(gitdir: Path) -> Path:
    """The common directory (objects, branches) of the repository ``gitdir`` belongs to:
    itself, or for a linked worktree the one its ``commondir`` file names."""
    try:
        text = (gitdir / "commondir").read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return gitdir
    return (gitdir / text).resolve()
