"""Translation of foreign exceptions met while committing into :class:`GitError`."""

from __future__ import annotations

import pygit2

from jpfs.errors import GitError


def translate(exc: BaseException) -> GitError:
    if isinstance(exc, OSError):
        where = f" ({exc.filename})" if exc.filename else ""
        return GitError(
            f"git repository I/O failed{where}: {exc.strerror or exc}; check "
            "permissions and free disk space, then retry"
        )
    if isinstance(exc, pygit2.GitError):
        return GitError(f"git operation failed: {exc}; run `git fsck` if this persists")
    return GitError(f"commit failed: {exc!r}")
