"""What the committer takes from git's configuration, read once when it opens: who
commits (``user.*``, then ``GIT_*`` and jpfs's fallback identity), which ref updates
are logged, whether the executable bit counts, and how the index is written."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pygit2

from jpfs.errors import GitError
from jpfs.infra.committer import splitindex
from jpfs.infra.committer.change import Identity
from jpfs.infra.committer.splitindex import SplitPolicy
from jpfs.infra.git.identity import FALLBACK_EMAIL, FALLBACK_NAME

_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


@dataclass(frozen=True)
class Settings:
    name: str | None  # user.name
    email: str | None  # user.email
    log_all: bool  # core.logAllRefUpdates
    filemode: bool  # core.fileMode
    skip_hash: bool  # index.skipHash
    split: SplitPolicy  # core.splitIndex, splitIndex.*

    def signature(self, kind: str, override: Identity | None) -> pygit2.Signature:
        """The ``kind`` ("AUTHOR" or "COMMITTER") of a commit made now: ``override``,
        else git's own order (environment, then config), else jpfs's fallback."""
        if override is not None:
            name, email = override.name, override.email
        else:
            name = os.environ.get(f"GIT_{kind}_NAME") or self.name or FALLBACK_NAME
            email = os.environ.get(f"GIT_{kind}_EMAIL") or self.email or FALLBACK_EMAIL
        return pygit2.Signature(name, email, int(time.time()), _local_offset_minutes())


def read(repo: pygit2.Repository, root: Path) -> Settings:
    """The settings of ``repo`` (whose work tree is ``root``), as git would read them."""
    try:
        config = repo.config.snapshot()
    except pygit2.GitError as exc:
        raise GitError(f"cannot read git config of {root}: {exc}") from exc

    def get(key: str) -> str | None:
        try:
            return str(config[key])
        except (KeyError, pygit2.GitError):
            return None

    logall = (get("core.logAllRefUpdates") or "true").lower()
    return Settings(
        name=get("user.name"),
        email=get("user.email"),
        log_all=logall in (*_TRUE, "always"),
        filemode=(get("core.fileMode") or "true").lower() not in _FALSE,
        # git >= 2.40 writes (and accepts) a null index checksum when asked to: at 100k
        # entries that saves ~5 ms of SHA-1 per index write.
        skip_hash=(get("index.skipHash") or "").lower() in _TRUE,
        split=_split_policy(get),
    )


def _split_policy(get: Callable[[str], str | None]) -> SplitPolicy:
    """git's split-index settings (``git help config``); a value git would reject is
    taken as unset, as jpfs only ever writes an index git then reads."""
    flag = (get("core.splitIndex") or "").lower()
    enabled = True if flag in _TRUE else False if flag in _FALSE else None
    setting = get("splitIndex.maxPercentChange")
    try:
        percent = int(setting or 20)
    except ValueError:
        setting, percent = None, 20
    return SplitPolicy(
        enabled=enabled,
        max_percent=min(max(percent, 0), 100),
        clean=get("splitIndex.sharedIndexExpire") is None,
        # Unset: git's 20%, and a new base from MAX_CHANGES on (see splitindex).
        max_changes=splitindex.MAX_CHANGES if setting is None else None,
    )


def _local_offset_minutes() -> int:
    return -(time.altzone if time.localtime().tm_isdst > 0 else time.timezone) // 60
