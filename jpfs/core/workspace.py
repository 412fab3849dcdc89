"""The workspace: a git work tree with a ``.jpfs/`` directory.

Finding a workspace never runs git: it walks up from the current directory looking
for ``.jpfs/config.toml``, so read-only commands start fast.
"""

from __future__ import annotations

import dataclasses
import functools
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from jpfs.core import config as config_mod
from jpfs.errors import ScopeError, WorkspaceError

if TYPE_CHECKING:
    from jpfs.core.ledger import Book
    from jpfs.core.prices import Price
    from jpfs.infra.committer import Change, Committer

JPFS_DIR = ".jpfs"
LOCAL_DIR = ".jpfs/local"
WORKTREES_DIR = ".jpfs/local/worktrees"


@dataclass(frozen=True)
class Workspace:
    root: Path
    config: config_mod.Config = field(compare=False)

    @property
    def jpfs_dir(self) -> Path:
        return self.root / JPFS_DIR

    @property
    def local_dir(self) -> Path:
        return self.root / LOCAL_DIR

    @property
    def agents_dir(self) -> Path:
        return self.jpfs_dir / "agents"

    @property
    def conv_root_rel(self) -> str:
        return str(self.config["conversations.root"]).strip("/")

    @property
    def record_branch(self) -> str:
        return str(self.config["record.branch"])

    @functools.cached_property
    def conv_root(self) -> Path:
        """The record worktree (``conversations/``; see :mod:`jpfs.core.recordbranch`)."""
        from jpfs.core.recordbranch import locate

        return locate(self.root, self.conv_root_rel, self.record_branch)

    def ensure_record(self) -> Path:
        """The record worktree, created or repaired first if needed."""
        from jpfs.core.recordbranch import ensure

        path = ensure(self.root, self.conv_root_rel, self.record_branch, self.local_dir)
        if path != self.conv_root:
            self.__dict__["conv_root"] = path
        return path

    def record_path(self, path: str) -> str:
        """A workspace-relative path under the conversation root, relative to the record."""
        rel = self.conv_root_rel
        if path == rel:
            return ""
        if not path.startswith(rel + "/"):
            raise ScopeError(f"{path!r} is outside the conversation root {rel}/")
        return path[len(rel) + 1 :]

    def rel(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def ensure_local(self) -> Path:
        self.local_dir.mkdir(parents=True, exist_ok=True)
        return self.local_dir

    @functools.cached_property
    def committer(self) -> Committer:
        # Imported here: pygit2 costs ~0.1 s and read-only commands never commit.
        from jpfs.infra.committer import Committer

        return Committer(
            self.ensure_record(),
            maintenance_every=int(self.config["git.maintenance_every"]),
        )

    @functools.cached_property
    def spending(self) -> Book:
        """What conversations and subtrees spent, read from the record and kept up to
        date (:mod:`jpfs.core.ledger`): one book per workspace object, shared by its runs."""
        from jpfs.core.ledger import Book

        return Book(self.conv_root, self.prices, self.local_dir / "usage.bin")

    @functools.cached_property
    def prices(self) -> dict[str, Price]:
        """The price table: the shipped one with ``[prices]`` from the config over it."""
        from jpfs.core import prices

        return prices.table(self.config["prices"])

    def commit(self, change: Change) -> str | None:
        """Commit ``change`` (workspace-relative paths under the root) on the record."""
        paths = tuple(self.record_path(p) for p in change.paths)
        creates = tuple((self.record_path(p), text) for p, text in change.creates)
        return self.committer.commit(dataclasses.replace(change, paths=paths, creates=creates))


def find_root(start: Path | None = None) -> Path:
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / JPFS_DIR / config_mod.CONFIG_FILE).is_file():
            # A branch agent's worktree lives under the main workspace's
            # .jpfs/local/worktrees and has its own checkout of .jpfs/; the
            # workspace is always the main one.
            parts = candidate.parts
            for i in range(len(parts) - 3):
                if parts[i : i + 3] == (".jpfs", "local", "worktrees"):
                    return Path(*parts[:i])
            return candidate
    raise WorkspaceError(
        f"no jpfs workspace at or above {here} (run `jpfs init` in a git repository,"
        " or pass -w DIR)"
    )


def open_workspace(
    path: Path | None = None, cfg: Sequence[str] = (), *, search: bool = True
) -> Workspace:
    """The workspace at ``path`` (or found upward from it / the cwd) with config loaded."""
    if path is not None and not search:
        root = path.resolve()
        if not (root / JPFS_DIR / config_mod.CONFIG_FILE).is_file():
            raise WorkspaceError(f"{root} is not a jpfs workspace (run `jpfs init` there)")
    else:
        root = find_root(path)
    return Workspace(root, config_mod.load(root / JPFS_DIR, cfg))


def git_toplevel(path: Path) -> Path | None:
    proc = subprocess.run(
        ["git", "rev-parse", "--show-toplevel"],
        cwd=path,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        return None
    return Path(proc.stdout.strip())
