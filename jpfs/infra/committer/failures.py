"""Translation of foreign exceptions met while committing into :class:`GitError`."""

from __future__ import annotations

import pygit2

from jpfs.errors import GitError, RepositoryFault


def translate(exc: BaseException) -> GitError:
    fault = RepositoryFault.of(exc)  # a full disk says so as everywhere else
    if fault is not None:
        return fault
    if isinstance(exc, OSError):
        where = f" ({exc.filename})" if exc.filename else ""
        return RepositoryFault(
            f"git repository I/O failed{where}: {exc.strerror or exc}; check "
            "permissions and free disk space, then retry"
        )
    if isinstance(exc, pygit2.GitError):
        return RepositoryFault(f"git operation failed: {exc}; run `git fsck` if this persists")
    return GitError(f"commit failed: {exc!r}")
