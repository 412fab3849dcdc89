"""The reference committer: the committer's contract, done the obvious way with git's CLI.

Slow and plain on purpose, so that it is easy to believe: the tests run random
sequences of operations through it and through the fast
:class:`jpfs.infra.committer.core.Committer` and require the same commits. Each commit
is built in a scratch index (``git read-tree`` of the tip, ``git update-index``,
``git write-tree``, ``git commit-tree``); the work tree's index gets the committed
paths with ``git reset <commit> -- <paths>``, on a copy installed under ``index.lock``;
the branch moves with ``git update-ref <ref> <new> <old>``, git's own compare-and-swap.

It shares only the value types, the path rules (:func:`check_path`) and the lock files
(:mod:`jpfs.infra.committer.lockfile`, so that a lock a crashed jpfs left is broken
the same way) with the fast one; no group commit, caches or packfiles.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from jpfs.errors import ExistsError, GitError, NotFoundError, ScopeError
from jpfs.infra.committer.change import Change, Identity
from jpfs.infra.committer.lockfile import acquire
from jpfs.infra.committer.port import PENDING_SUBJECT, PENDING_TRAILERS, CommitterPort
from jpfs.infra.committer.worktree import check_path
from jpfs.infra.git import runner as git
from jpfs.infra.git.identity import FALLBACK_EMAIL, FALLBACK_NAME
from jpfs.infra.textfile import create_new

_ZERO = "0" * 40
_MAX_ATTEMPTS = 64
_LOCAL_DIR = ".jpfs/local"
_MODE_BLOB, _MODE_EXEC, _MODE_LINK = "100644", "100755", "120000"

Entry = tuple[str, str]  # (mode, blob id)


class ReferenceCommitter:
    """The committer's contract (:class:`jpfs.infra.committer.port.CommitterPort`) on
    the work tree at ``repo_root``; ``owned`` as for the fast committer."""

    def __init__(
        self, repo_root: Path, *, owned: Sequence[str] = (), index_lock_timeout: float = 2.0
    ) -> None:
        self._owned = tuple(prefix.strip("/") for prefix in owned)
        self._index_lock_timeout = index_lock_timeout
        self._closed = False
        try:
            top = self._git(["rev-parse", "--show-toplevel"], cwd=repo_root)
        except GitError as exc:
            raise GitError(f"{repo_root} is not a git work tree: {exc}") from exc
        self._root = Path(top.decode().strip())
        self._gitdir = Path(self._git(["rev-parse", "--absolute-git-dir"]).decode().strip())
        common = self._git(["rev-parse", "--path-format=absolute", "--git-common-dir"])
        self._owners = Path(common.decode().strip()) / "jpfs" / "locks"
        self._owners.mkdir(parents=True, exist_ok=True)
        self._scratch = self._gitdir / "jpfs-reference-index"
        filemode = self._config("--bool", "core.fileMode")
        self._filemode = filemode != "false"
        tree = self._git(["hash-object", "-t", "tree", "--stdin"])
        self._empty_tree = tree.decode().strip()

    # -- the contract ---------------------------------------------------------------------

    def commit(self, change: Change) -> str | None:
        if self._closed:
            raise GitError("the committer is closed")
        paths = tuple(check_path(self._owned, p) for p in change.paths)
        creates = [(check_path(self._owned, p), text) for p, text in change.creates]
        for path, _ in creates:
            if not any(not p or path == p or path.startswith(p + "/") for p in paths):
                raise ScopeError(f"{path!r} is created by a change that does not commit it")
        for path in paths:
            self._refuse_links(path)
        for path, text in creates:
            try:
                made = create_new(self._root / path, text, parents=False, root=self._root)
            except (FileNotFoundError, NotADirectoryError) as exc:
                raise NotFoundError(f"cannot create {path}: its directory is missing") from exc
            if not made:
                raise ExistsError(f"{path} already exists; nothing of the change was committed")
        if not paths:
            return None  # and no pathspec at all, which to git means everything
        for _ in range(_MAX_ATTEMPTS):
            ref, tip = self._head()
            tree = self._snapshot_tree(paths, tip)
            new = None if tree == (self._tree_of(tip) if tip else self._empty_tree) else tree
            commit = self._commit_object(new, tip, change) if new is not None else tip
            self._sync_index(commit, paths)
            if commit is None or commit == tip:
                return None
            if self._move(ref, tip, commit, change.subject):
                return commit
        raise GitError(f"could not move the branch: it kept moving under {_MAX_ATTEMPTS} attempts")

    def commit_pending(
        self,
        subject: str = PENDING_SUBJECT,
        trailers: tuple[tuple[str, str], ...] = PENDING_TRAILERS,
    ) -> str | None:
        return self.commit(Change(self._owned or ("",), subject, trailers))

    def close(self, *, wait: bool = False) -> None:
        self._closed = True

    def __enter__(self) -> ReferenceCommitter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- steps ----------------------------------------------------------------------------

    def _head(self) -> tuple[str, str | None]:
        """The ref to move (HEAD's branch, or HEAD when detached) and its commit."""
        symbolic = self._git(["symbolic-ref", "-q", "HEAD"], check=False).decode().strip()
        tip = self._git(["rev-parse", "-q", "--verify", "HEAD^{commit}"], check=False)
        return symbolic or "HEAD", tip.decode().strip() or None

    def _tree_of(self, commit: str) -> str:
        return self._git(["rev-parse", f"{commit}^{{tree}}"]).decode().strip()

    def _snapshot_tree(self, paths: tuple[str, ...], tip: str | None) -> str:
        """The tree of ``tip`` with ``paths`` replaced by their working-tree state."""
        env = {"GIT_INDEX_FILE": str(self._scratch)}
        self._scratch.unlink(missing_ok=True)
        self._git(["read-tree", *([tip] if tip else ["--empty"])], env=env)
        old = self._entries(tip, paths) if tip is not None else {}
        new: dict[str, Entry] = {}
        for path in paths:
            new.update(self._read(path, env, old))
        # Removals first: a file may take the place of a directory, or the other way round.
        tracked = self._git(["ls-files", "-z", "--", *_spec(paths)], env=env)
        self._git(["update-index", "-z", "--force-remove", "--stdin"], env=env, stdin=tracked)
        hashed = self._hash(new)
        info = "".join(f"{mode} {oid}\t{path}\0" for path, (mode, oid) in sorted(hashed.items()))
        self._git(["update-index", "-z", "--index-info"], env=env, stdin=info.encode())
        tree = self._git(["write-tree"], env=env).decode().strip()
        self._scratch.unlink(missing_ok=True)
        return tree

    def _read(self, path: str, env: dict[str, str], old: dict[str, Entry]) -> dict[str, Entry]:
        """The files the snapshot of ``path`` holds: the file, or what is under the
        directory (files of the tip, and others git does not ignore)."""
        try:
            is_dir = stat.S_ISDIR(os.lstat(self._root / path).st_mode)
        except (FileNotFoundError, NotADirectoryError):
            return {}
        if not is_dir:
            return self._file(path, old)
        args = ["ls-files", "-z", "--cached", "--others", "--exclude-standard"]
        names = self._git([*args, "--", *_spec((path,))], env=env)
        found: dict[str, Entry] = {}
        for raw in names.split(b"\0"):
            name = os.fsdecode(raw)
            if not raw or name == _LOCAL_DIR or name.startswith(_LOCAL_DIR + "/"):
                continue
            if any(part.lower() == ".git" for part in name.split("/")):
                continue
            found.update(self._file(name, old))
        return found

    def _file(self, path: str, old: dict[str, Entry]) -> dict[str, Entry]:
        full = self._root / path
        parts = path.split("/")
        if any((self._root / "/".join(parts[:n])).is_symlink() for n in range(1, len(parts))):
            return {}  # beyond a symbolic link: to git, a file there is gone
        try:
            st = os.lstat(full)
        except (FileNotFoundError, NotADirectoryError):
            return {}
        if stat.S_ISLNK(st.st_mode):
            mode, data = _MODE_LINK, os.fsencode(os.readlink(full))
        elif stat.S_ISREG(st.st_mode):
            mode = _MODE_EXEC if st.st_mode & stat.S_IXUSR else _MODE_BLOB
            if not self._filemode and old.get(path, ("",))[0] in (_MODE_BLOB, _MODE_EXEC):
                mode = old[path][0]
            return {path: (mode, "")}  # hashed with the others: see _hash
        else:
            return {}  # directories are walked by the caller; fifos git cannot store
        oid = self._git(["hash-object", "-w", "--no-filters", "--stdin"], stdin=data)
        return {path: (mode, oid.decode().strip())}

    def _hash(self, entries: dict[str, Entry]) -> dict[str, Entry]:
        """``entries`` with the regular files (no id yet) hashed, in one git command."""
        files = [path for path, (_, oid) in entries.items() if not oid]
        stdin = "".join(f"{path}\n" for path in files).encode()
        out = self._git(["hash-object", "-w", "--no-filters", "--stdin-paths"], stdin=stdin)
        oids = dict(zip(files, out.decode().split(), strict=True))
        return {path: (mode, oid or oids[path]) for path, (mode, oid) in entries.items()}

    def _entries(self, tip: str, paths: tuple[str, ...]) -> dict[str, Entry]:
        out = self._git(["ls-tree", "-r", "-z", "--full-tree", tip, "--", *_spec(paths)])
        entries: dict[str, Entry] = {}
        for line in out.split(b"\0"):
            if line:
                meta, _, name = line.partition(b"\t")
                mode, _kind, oid = meta.decode().split()
                entries[os.fsdecode(name)] = (mode, oid)
        return entries

    def _commit_object(self, tree: str, parent: str | None, change: Change) -> str:
        message = change.subject + "\n"
        if change.trailers:
            message += "\n" + "".join(f"{key}: {value}\n" for key, value in change.trailers)
        env: dict[str, str] = {}
        for kind, who in (("AUTHOR", change.author), ("COMMITTER", None)):
            name, email = self._identity(kind, who)
            env[f"GIT_{kind}_NAME"], env[f"GIT_{kind}_EMAIL"] = name, email
        args = ["commit-tree", tree, *(["-p", parent] if parent else []), "-F", "-"]
        return self._git(args, env=env, stdin=message.encode()).decode().strip()

    def _identity(self, kind: str, override: Identity | None) -> tuple[str, str]:
        if override is not None:
            return override.name, override.email
        name = os.environ.get(f"GIT_{kind}_NAME") or self._config("user.name") or FALLBACK_NAME
        email = os.environ.get(f"GIT_{kind}_EMAIL") or self._config("user.email")
        return name, email or FALLBACK_EMAIL

    def _sync_index(self, commit: str | None, paths: tuple[str, ...]) -> None:
        """Give the work tree's index ``commit``'s entries at ``paths`` (before the
        branch moves, as the fast committer does: see its ``_land``)."""
        index = self._gitdir / "index"
        lock = acquire(index, self._owners, self._index_lock_timeout, required=False)
        if lock is None:
            return  # a live git holds the index: leave it to git, as the fast one does
        try:
            if index.exists():
                shutil.copyfile(index, self._scratch)
            env = {"GIT_INDEX_FILE": str(self._scratch)}
            # Without -q, reset refreshes the stat data, so `git status` trusts it.
            self._git(["reset", commit or self._empty_tree, "--", *_spec(paths)], env=env)
            os.replace(self._scratch, index)
        finally:
            self._scratch.unlink(missing_ok=True)
            lock.release()

    def _move(self, ref: str, old: str | None, new: str, subject: str) -> bool:
        """Compare-and-swap ``ref`` from ``old`` to ``new``; False if it had moved."""
        message = f"commit{'' if old else ' (initial)'}: {subject}"
        deref = ["--no-deref"] if ref == "HEAD" else []
        args = ["update-ref", *deref, "-m", message, ref, new, old or _ZERO]
        return self._git_ok(args)

    def _refuse_links(self, path: str) -> None:
        parts = path.split("/")
        for depth in range(1, len(parts)):
            if (self._root / "/".join(parts[:depth])).is_symlink():
                raise ScopeError(f"{path!r} is beyond a symbolic link ({parts[depth - 1]})")

    # -- git ------------------------------------------------------------------------------

    def _config(self, *args: str) -> str:
        return self._git(["config", *args], check=False).decode().strip()

    def _git_ok(self, args: list[str]) -> bool:
        return self._run(args, None, None, None).returncode == 0

    def _git(
        self,
        args: list[str],
        *,
        env: dict[str, str] | None = None,
        stdin: bytes | None = None,
        cwd: Path | None = None,
        check: bool = True,
    ) -> bytes:
        result = self._run(args, env, stdin, cwd)
        if check and result.returncode != 0:
            raise git.failure(args, result.returncode, result.stderr)
        return result.stdout

    def _run(
        self, args: list[str], env: dict[str, str] | None, stdin: bytes | None, cwd: Path | None
    ) -> subprocess.CompletedProcess[bytes]:
        full_env = {"GIT_LITERAL_PATHSPECS": "1", **(env or {})}
        return git.run_bytes(cwd or self._root, args, input=stdin, env=full_env, check=False)


def _spec(paths: tuple[str, ...]) -> list[str]:
    """``paths`` as pathspecs: ``""`` (the whole tree) is ``.``, as git wants it."""
    return [path or "." for path in paths]


if TYPE_CHECKING:
    from jpfs.infra.committer.core import Committer

    # mypy holds both implementations to the interface.
    _IMPLEMENTATIONS: tuple[type[CommitterPort], ...] = (Committer, ReferenceCommitter)
