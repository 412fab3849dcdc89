"""The workspace: a git work tree with a ``.jpfs/`` directory.

Finding a workspace never runs git: it walks up from the current directory looking
for ``.jpfs/config.toml``, so read-only commands start fast.

``.jpfs/`` is committed on the user's branch, so a checkout, a bisect or a stash can
take it away for a while. The last good ``config.toml`` is therefore kept in
``.jpfs/local/policy/`` (machine-local, never committed) and stands in for it while the
branch has none (:mod:`jpfs.services.workspace.policy` does the same for the agent profiles).
``Workspace.notes`` says when it does.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jpfs.core import config as config_mod
from jpfs.errors import ConfigError, ScopeError, WorkspaceError
from jpfs.infra import git

if TYPE_CHECKING:
    from jpfs.core.ledger import Book
    from jpfs.core.prices import Price
    from jpfs.infra.committer import Change
    from jpfs.infra.committer.port import CommitterPort

JPFS_DIR = ".jpfs"
LOCAL_DIR = ".jpfs/local"
WORKTREES_DIR = ".jpfs/local/worktrees"
# The last good copy of .jpfs/ (config.toml, agents/*.toml): see the module docstring.
KEPT_DIR = ".jpfs/local/policy"


@dataclass(frozen=True)
class Workspace:
    root: Path
    config: config_mod.Config = field(compare=False)
    # What stands in for a missing or invalid part of .jpfs/, and why (file -> reason);
    # filled as the policy is read, shown by `jpfs daemon status`.
    notes: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def jpfs_dir(self) -> Path:
        return self.root / JPFS_DIR

    @property
    def local_dir(self) -> Path:
        return self.root / LOCAL_DIR

    @property
    def agents_dir(self) -> Path:
        """The branch's profiles (what `jpfs trust` reviews); runs read them through
        :func:`jpfs.services.workspace.policy.load_profile`, which falls back on the kept copy."""
        return self.jpfs_dir / "agents"

    @property
    def kept_dir(self) -> Path:
        return self.root / KEPT_DIR

    @property
    def conv_root_rel(self) -> str:
        return self.config.conversations_root.strip("/")

    @property
    def record_branch(self) -> str:
        return self.config.record_branch

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
        ignore_local(self.local_dir)
        return self.local_dir

    @functools.cached_property
    def committer(self) -> CommitterPort:
        # Imported here: pygit2 costs ~0.1 s and read-only commands never commit.
        from jpfs.infra.committer import Committer

        return Committer(
            self.ensure_record(),
            maintenance_every=self.config.maintenance_every,
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

        return prices.table(self.config.prices)

    def commit(self, change: Change) -> str | None:
        """Commit ``change`` (workspace-relative paths under the root) on the record."""
        paths = tuple(self.record_path(p) for p in change.paths)
        creates = tuple((self.record_path(p), text) for p, text in change.creates)
        return self.committer.commit(dataclasses.replace(change, paths=paths, creates=creates))


def is_workspace(path: Path) -> bool:
    """A workspace has ``.jpfs/config.toml``, or had one: on a branch from before
    ``jpfs init`` only the kept copy is left, and the daemon must still be reachable."""
    return (path / JPFS_DIR / config_mod.CONFIG_FILE).is_file() or (
        path / KEPT_DIR / config_mod.CONFIG_FILE
    ).is_file()


def find_root(start: Path | None = None) -> Path:
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if is_workspace(candidate):
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
        if not is_workspace(root):
            raise WorkspaceError(f"{root} is not a jpfs workspace (run `jpfs init` there)")
    else:
        root = find_root(path)
    notes: dict[str, str] = {}
    where, values = policy_config(root, notes)
    return Workspace(root, config_mod.load(where, cfg, file_values=values), notes)


def policy_config(root: Path, notes: dict[str, str]) -> tuple[Path, dict[str, Any] | None]:
    """Where ``config.toml`` is read from, and its checked values if they were read
    here: ``.jpfs/`` while the branch has it (a good one is kept as the last good
    copy), else the kept copy, noted in ``notes``.

    A file that is there but broken is read all the same, so that its error is the one
    a command shows (a running daemon keeps its previous configuration then).
    """
    live = root / JPFS_DIR / config_mod.CONFIG_FILE
    kept = root / KEPT_DIR / config_mod.CONFIG_FILE
    try:
        data = live.read_bytes()
    except FileNotFoundError:
        notes[f"{JPFS_DIR}/{config_mod.CONFIG_FILE}"] = "missing on this branch"
        return (kept.parent if kept.is_file() else live.parent), None
    except OSError:
        return live.parent, None
    try:
        values = config_mod.checked(config_mod.parse_toml(data, ConfigError, str(live)), str(live))
    except ConfigError:
        return live.parent, None
    keep(data, kept)
    try:
        ignore_local(root / LOCAL_DIR)
    except OSError:
        pass
    return live.parent, values


def keep(data: bytes, kept: Path) -> None:
    """Make ``kept`` hold ``data`` (written only when it differs: most reads change
    nothing). A failed write keeps the older copy, which is still a good one."""
    from jpfs.infra.textfile import write_atomic

    try:
        if kept.read_bytes() == data:
            return
    except OSError:
        pass
    try:
        write_atomic(kept, data)
    except OSError:
        pass


def ignore_local(local_dir: Path) -> None:
    """``.jpfs/local/`` ignores itself: a branch from before ``jpfs init`` has no
    ``.gitignore`` line for it, and its state must not show in the user's git status."""
    marker = local_dir / ".gitignore"
    if not marker.exists():
        from jpfs.infra.textfile import write_atomic

        write_atomic(marker, "# jpfs: machine-local state, never committed\n*\n")


def git_toplevel(path: Path) -> Path | None:
    proc = git.run(path, ["rev-parse", "--show-toplevel"], check=False)
    if proc.returncode != 0:
        return None
    return Path(proc.stdout.strip())
