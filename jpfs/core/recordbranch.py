"""The record branch: conversations live on ``jpfs-record``, checked out at ``conversations/``.

The record is a branch of its own so that jpfs never writes the user's branch, index or
locks while the user works: jpfs is the only writer of the record's branch and of the
record worktree's index (a human may still commit there by hand; jpfs picks up from
the new tip). The record's tree root is the conversation root, so
``conversations/refactor/task.md`` is ``refactor/task.md`` on the branch.

:func:`ensure` finds the record worktree, or creates or repairs it:

* the fast path reads two small files (the worktree's ``.git`` and its ``HEAD``);
* a moved repository is mended with ``git worktree repair``, a deleted ``conversations/``
  with ``git worktree prune`` and a fresh ``git worktree add``;
* a missing branch is taken from a remote's ``jpfs-record`` (a fresh clone) or started
  as a root commit holding the record's ``README.md`` and ``.gitignore``;
* if the branch is already checked out by another worktree of the repository, that
  checkout *is* the record (one record per repository);
* the record worktree gets its own settings through per-worktree config
  (``extensions.worktreeConfig``): a sparse checkout, split or sparse index configured
  for the user's repository must not apply to it.

SHA-256 repositories are refused (libgit2, under pygit2, reads SHA-1 object ids only); a
workspace whose conversations are still tracked on the user's branch (the layout before
the record branch) gets an error naming ``jpfs migrate``.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import time
from pathlib import Path

from jpfs.errors import GitError, WorkspaceError
from jpfs.infra import git
from jpfs.infra.git import identity
from jpfs.infra.git.dirs import common_dir, git_dir

DEFAULT_BRANCH = "jpfs-record"
_BRANCH_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*(?:/[A-Za-z0-9_][A-Za-z0-9._-]*)*")
README = """# Conversations

Each directory here is a jpfs conversation; a sub-agent's conversation is a
subdirectory of its caller's. Write `task.md` in a new directory to start one.

This directory is a git worktree of the branch `jpfs-record`, the record: jpfs commits
every change here, so `git log` in this directory is the audit trail.
"""
IGNORE = """# jpfs: editors' swap/backup files and jpfs's temporary files
*.jpfs-tmp
.*.sw?
*~
4913
.#*
\\#*#
*___jb_tmp___
*___jb_old___
.goutputstream-*
"""
# What the record's worktree must not inherit from the user's repository config.
WORKTREE_SETTINGS = (
    ("core.sparseCheckout", "false"),
    ("core.sparseCheckoutCone", "false"),
    ("index.sparse", "false"),
)


def _head_is(gitdir: Path, branch: str) -> bool:
    try:
        head = (gitdir / "HEAD").read_text(encoding="utf-8").strip()
    except OSError:
        return False
    return head == f"ref: refs/heads/{branch}"


def is_record(path: Path, branch: str) -> bool:
    """Whether ``path`` is a live worktree with the record branch checked out."""
    gitdir = git_dir(path)
    return gitdir is not None and gitdir.is_dir() and _head_is(gitdir, branch)


def checked_out_at(commondir: Path, branch: str) -> Path | None:
    """Where a linked worktree of the repository has ``branch`` checked out, if anywhere."""
    try:
        entries = list(os.scandir(commondir / "worktrees"))
    except OSError:
        return None
    for entry in entries:
        gitdir = Path(entry.path)
        if not _head_is(gitdir, branch):
            continue
        try:
            dotgit = Path((gitdir / "gitdir").read_text(encoding="utf-8").strip())
        except OSError:
            continue
        if dotgit.is_file() and git_dir(dotgit.parent) == gitdir:
            return dotgit.parent
    return None


def locate(root: Path, rel: str, branch: str) -> Path:
    """The record worktree's path without creating anything (read-only commands)."""
    path = root / rel
    if is_record(path, branch):
        return path
    gitdir = git_dir(root)
    if gitdir is not None:
        elsewhere = checked_out_at(common_dir(gitdir), branch)
        if elsewhere is not None:
            return elsewhere
    return path


def ensure(root: Path, rel: str, branch: str, local_dir: Path) -> Path:
    """The record worktree for the workspace at ``root``, created or repaired if needed."""
    path = root / rel
    if is_record(path, branch):
        return path
    check_branch(branch)
    gitdir = git_dir(root)
    if gitdir is None:
        raise WorkspaceError(f"{root} is not a git work tree; run `git init` there first")
    # Two commands repairing at once (`jpfs init` and a query, say) take turns.
    local_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(local_dir / "record.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if is_record(path, branch):
            return path
        return _attach(root, rel, branch, local_dir, common_dir(gitdir))
    finally:
        os.close(fd)


def _attach(root: Path, rel: str, branch: str, local_dir: Path, commondir: Path) -> Path:
    path = root / rel
    _refuse_sha256(root)
    if (path / ".git").is_file():
        # A moved repository: both links of the worktree point at the old place.
        git.run(root, ["worktree", "repair", str(path)], check=False)
        if is_record(path, branch):
            return path
    elsewhere = checked_out_at(commondir, branch)
    if elsewhere is not None:
        return elsewhere
    _refuse_old_layout(root, rel)
    # Registrations whose directory is gone (a deleted conversations/) block `add`.
    git.run(root, ["worktree", "prune"], check=False)
    _ensure_branch(root, branch)
    _enable_worktree_config(root, commondir)
    aside = _move_aside(path, local_dir)
    try:
        git.run(root, ["worktree", "add", "--no-checkout", "-q", str(path), branch])
        for key, value in WORKTREE_SETTINGS:
            git.run(path, ["config", "--worktree", key, value])
        git.run(path, ["read-tree", "-u", "--reset", "HEAD"])
    finally:
        if aside is not None:
            _move_back(aside, path)
    return path


def check_branch(branch: str) -> None:
    """``record.branch`` must be a plain branch name outside writers' ``jpfs/`` namespace."""
    if (
        not _BRANCH_RE.fullmatch(branch)
        or ".." in branch
        or branch.endswith((".lock", "."))
        or branch.startswith("jpfs/")
    ):
        raise WorkspaceError(
            f"record.branch = {branch!r} is not usable: give a branch name such as"
            f" {DEFAULT_BRANCH!r} (letters, digits, '.', '_', '-', '/'; not under jpfs/,"
            " where writers' branches live)"
        )


def _refuse_sha256(root: Path) -> None:
    fmt = git.run(root, ["rev-parse", "--show-object-format"], check=False).stdout.strip()
    if fmt and fmt != "sha1":
        raise WorkspaceError(
            f"{root} is a {fmt.upper()} repository; jpfs supports SHA-1 repositories only"
            " (its git layer, libgit2 through pygit2, cannot read other object ids yet)"
        )


def _refuse_old_layout(root: Path, rel: str) -> None:
    # The index, not HEAD: after `jpfs migrate` the removal is staged, not yet committed.
    proc = git.run(root, ["ls-files", "--cached", "-z", "--", rel], check=False)
    if proc.returncode == 0 and proc.stdout.strip("\0"):
        raise WorkspaceError(
            f"{rel}/ is tracked on your branch (the layout of jpfs before the record branch);"
            f" run `jpfs migrate` to move the conversations, with their history, onto the"
            f" record branch {DEFAULT_BRANCH}"
        )


def _ensure_branch(root: Path, branch: str) -> None:
    ref = f"refs/heads/{branch}"
    if git.run(root, ["rev-parse", "--verify", "-q", ref], check=False).returncode == 0:
        return
    remote = git.run(
        root, ["for-each-ref", "--format=%(refname)", f"refs/remotes/*/{branch}"], check=False
    ).stdout.split()
    if remote:
        # A fresh clone: re-attach the record the remote holds.
        git.run(root, ["branch", "-q", branch, remote[0]])
        return
    readme = _run_id(root, ["hash-object", "-w", "--stdin"], README)
    ignore = _run_id(root, ["hash-object", "-w", "--stdin"], IGNORE)
    tree = _run_id(
        root, ["mktree"], f"100644 blob {ignore}\t.gitignore\n100644 blob {readme}\tREADME.md\n"
    )
    message = "jpfs: start the record\n\nJpfs-Event: init\n"
    commit = _run_id(root, ["commit-tree", tree], message, identity=True)
    # The empty old value makes this a create: a concurrent init keeps its own root.
    git.run(root, ["update-ref", "-m", "jpfs: start the record", ref, commit, ""], check=False)


def identity_env(root: Path) -> dict[str, str] | None:
    """The environment for a git command that writes a commit of jpfs's own: None when
    git knows who the user is, else one with jpfs's fallback identity."""
    if git.run(root, ["var", "GIT_COMMITTER_IDENT"], check=False).returncode == 0:
        return None
    return {**os.environ, **identity.FALLBACK_ENV}


def _run_id(root: Path, args: list[str], stdin: str, *, identity: bool = False) -> str:
    env = identity_env(root) if identity else None
    out = git.run(root, args, input=stdin, env=env).stdout.strip()
    if not out:
        raise GitError(f"git {args[0]} printed no object id")
    return out


def _enable_worktree_config(root: Path, commondir: Path) -> None:
    """Turn on per-worktree config the way git's own ``init_worktree_config`` does."""
    enabled = git.run(root, ["config", "--bool", "extensions.worktreeConfig"], check=False)
    if enabled.stdout.strip() == "true":
        return
    common = str(commondir / "config")
    main = str(commondir / "config.worktree")
    # With the extension on, core.bare and core.worktree of the shared config would
    # apply to every worktree: git moves them to the main worktree's own file.
    for key in ("core.bare", "core.worktree"):
        value = git.run(root, ["config", "--file", common, key], check=False).stdout.strip()
        if value:
            git.run(root, ["config", "--file", main, key, value])
            git.run(root, ["config", "--file", common, "--unset", key], check=False)
    version = git.run(root, ["config", "--file", common, "core.repositoryformatversion"],
                         check=False).stdout.strip()  # fmt: skip
    if version in ("", "0"):
        git.run(root, ["config", "--file", common, "core.repositoryformatversion", "1"])
    git.run(root, ["config", "--file", common, "extensions.worktreeConfig", "true"])


def _move_aside(path: Path, local_dir: Path) -> Path | None:
    """Move a plain ``conversations/`` out of the way of ``git worktree add``."""
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise WorkspaceError(f"{path} exists and is not a directory; move it away and retry")
    if not path.exists():
        return None
    if not any(path.iterdir()):
        path.rmdir()
        return None
    local_dir.mkdir(parents=True, exist_ok=True)
    aside = local_dir / f"pre-record-{time.time_ns()}"
    path.rename(aside)
    return aside


def _move_back(aside: Path, path: Path) -> None:
    """Put files that existed before the record was attached back (they are edits)."""
    path.mkdir(parents=True, exist_ok=True)
    for top, dirs, files in os.walk(aside):
        dirs[:] = [d for d in dirs if d != ".git"]
        rel = Path(top).relative_to(aside)
        for name in files:
            target = path / rel / name
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(Path(top) / name, target)
    shutil.rmtree(aside, ignore_errors=True)
