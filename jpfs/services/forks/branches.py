"""Branches model forks: a ``workspace = "branch"`` conversation edits project files on
its own git branch, in its own worktree, forked from its caller's workspace.

    id        profile   branch         worktree (under .jpfs/local/worktrees/)
    a         branch    jpfs/a/_       a
    a/b       branch    jpfs/a/b/_     a+b          forked from jpfs/a/_
    a/b/c     shared    (none)         works in a+b, commits onto jpfs/a/b/_
    d         shared    (none)         works in the main work tree

*Naming.* The branch of ``a/b`` is ``jpfs/a/b/_``: the ref hierarchy mirrors the
conversation tree, and the ``_`` leaf (never a slug, which starts with [a-z0-9]) avoids
the directory/file clash of loose refs (``jpfs/a`` and ``jpfs/a/b`` cannot coexist). A
segment ending in ``.lock`` (legal for an id, not for a ref component) gets a ``+``
(never in a slug), so the mapping stays injective. Names past ``MAX_REF`` characters
become ``jpfs/_long/<hash>-<last segment>`` (``_long`` is not a slug either). Worktree
directories are flat (``a+b``; hashed past ``MAX_DIR``) so no worktree lies inside another.

*Worktrees* are sparse: everything except the conversation root, which stays in the main
work tree where every conversation record lives; an agent's commits on its branch never
carry conversation files (they are excluded from ``git add``), so merging a branch can
never rewrite the shared record. A worktree is (re)created on demand from the recorded
branch and ``base``, so a crash mid-creation or a gc'ed worktree heals on the next run.

Merging is in :mod:`jpfs.services.forks.merge`; discard and gc in :mod:`jpfs.services.forks.worktrees`;
what a branch changed in :mod:`jpfs.services.forks.diffs`.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jpfs.core import agentconfig, ids, record
from jpfs.core.conversation import Conversation
from jpfs.core.workspace import WORKTREES_DIR, Workspace
from jpfs.errors import GitError, ScopeError, StateError
from jpfs.infra import git
from jpfs.infra.git.identity import FALLBACK_EMAIL, FALLBACK_NAME

if TYPE_CHECKING:
    from jpfs.infra.committer import Identity

PREFIX = "jpfs"
LEAF = "_"
MAX_REF = 400
MAX_DIR = 120
READY_MARK = "jpfs-ready"


# -- naming ------------------------------------------------------------------------


def _digest(conv_id: str) -> str:
    return ids.file_key(conv_id, 16)


def branch_name(conv_id: str) -> str:
    """The git branch (short name) of branch conversation ``conv_id``."""
    segs = [s + "+" if s.endswith(".lock") else s for s in ids.segments(ids.validate(conv_id))]
    name = "/".join([PREFIX, *segs, LEAF])
    if len(name) <= MAX_REF:
        return name
    return f"{PREFIX}/_long/{_digest(conv_id)}-{segs[-1][:64]}"


def worktree_name(conv_id: str) -> str:
    """The directory under ``.jpfs/local/worktrees/`` of branch conversation ``conv_id``."""
    name = "+".join(ids.segments(ids.validate(conv_id)))
    if len(name) <= MAX_DIR:
        return name
    return f"_{_digest(conv_id)}-{ids.segments(conv_id)[-1][:64]}"


# -- running git ---------------------------------------------------------------------


def rev(cwd: Path, name: str) -> str | None:
    proc = git.run(cwd, ["rev-parse", "--verify", "-q", f"{name}^{{commit}}"], ok=(0, 1))
    return proc.stdout.strip() if proc.returncode == 0 else None


@functools.lru_cache(maxsize=16)
def _has_committer(root: str) -> bool:
    return git.run(Path(root), ["var", "GIT_COMMITTER_IDENT"], ok=(0, 128)).returncode == 0


def identity_env(root: Path, author: Identity | None) -> dict[str, str]:
    """Environment for commit-tree: the author given, the committer from git (or jpfs)."""
    env: dict[str, str] = {}
    if author is not None:
        env.update(GIT_AUTHOR_NAME=author.name, GIT_AUTHOR_EMAIL=author.email)
    if not _has_committer(str(root)):
        # Like jpfs.infra.committer: a repository without an identity still gets commits.
        env.update(GIT_COMMITTER_NAME=FALLBACK_NAME, GIT_COMMITTER_EMAIL=FALLBACK_EMAIL)
        env.setdefault("GIT_AUTHOR_NAME", FALLBACK_NAME)
        env.setdefault("GIT_AUTHOR_EMAIL", FALLBACK_EMAIL)
    return env


def commit_tree(
    root: Path,
    tree: str,
    parents: Sequence[str],
    subject: str,
    trailers: Sequence[tuple[str, str]],
    *,
    body: str = "",
    author: Identity | None = None,
) -> str:
    """A commit object (no ref moves, no hooks, no signing: jpfs commits never prompt)."""
    args = ["commit-tree", "--no-gpg-sign", tree]
    for parent in parents:
        args += ["-p", parent]
    args += ["-m", subject]
    if body:
        args += ["-m", body]
    if trailers:
        args += ["-m", "\n".join(f"{k}: {v}" for k, v in trailers)]
    return git.run(root, args, env=identity_env(root, author)).stdout.strip()


@contextlib.contextmanager
def flock(ws: Workspace, key: str) -> Iterator[None]:
    """A short exclusive section across threads and processes (kernel drops it on death)."""
    path = ws.local_dir / "locks" / f"branches-{ids.file_key(key)}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


# -- the record ----------------------------------------------------------------------


@dataclass(frozen=True)
class Fork:
    """A conversation with its own branch and worktree, as conversation.toml records it."""

    conv_id: str
    branch: str
    worktree: Path
    base: str | None
    merged: str | None = None
    discarded: bool = False

    @property
    def ref(self) -> str:
        return f"refs/heads/{self.branch}"


def fork_of(ws: Workspace, conv_id: str, meta: Mapping[str, Any] | None = None) -> Fork | None:
    """The fork of ``conv_id`` itself, or None when it has no branch of its own."""
    meta = Conversation(ws.conv_root, conv_id).meta() if meta is None else meta
    branch, worktree = meta.get("branch"), meta.get("worktree")
    if not isinstance(branch, str) or not isinstance(worktree, str):
        return None
    # Derived from the id, and checked: an edited record must not make jpfs delete or
    # merge some other branch, or run an agent's file tools in some other directory.
    rel = f"{WORKTREES_DIR}/{worktree_name(conv_id)}"
    if branch != branch_name(conv_id) or worktree.strip("/") != rel:
        raise ScopeError(
            f"conversation {conv_id!r} records branch {branch!r} and worktree {worktree!r};"
            f" jpfs uses {branch_name(conv_id)!r} and {rel!r}: restore those in its"
            " conversation.toml"
        )
    base = meta.get("base")
    merged = meta.get("merged")
    return Fork(
        conv_id,
        branch,
        ws.root / rel,
        str(base) if base else None,
        str(merged) if merged else None,
        bool(meta.get("discarded")),
    )


def require_fork(ws: Workspace, conv_id: str) -> Fork:
    fork = fork_of(ws, conv_id)
    if fork is None:
        raise StateError(
            f'conversation {conv_id!r} has no branch (its profile\'s workspace is not "branch")'
        )
    return fork


def enclosing_fork(ws: Workspace, conv_id: str | None) -> Fork | None:
    """The workspace ``conv_id`` works in: its own fork or its nearest ancestor's."""
    cur = conv_id
    while cur:
        fork = fork_of(ws, cur)
        if fork is not None:
            return fork
        cur = ids.parent(cur)
    return None


def target_of(ws: Workspace, conv_id: str) -> tuple[Path, Fork | None]:
    """Where ``conv_id``'s branch merges: its parent's workspace (a fork, or the main tree)."""
    parent = enclosing_fork(ws, ids.parent(conv_id))
    if parent is None:
        return ws.root, None
    return ensure_worktree(ws, parent), parent


def plan(ws: Workspace, conv_id: str, config: Mapping[str, Any]) -> dict[str, Any]:
    """The fields a new conversation records: ``base``, and its branch for branch profiles.

    ``base`` is the tip of the workspace it forks from: the parent's (inherited) branch,
    or HEAD of the main work tree at the top. Empty for shared conversations at the top
    (the caller records HEAD).
    """
    parent = enclosing_fork(ws, ids.parent(conv_id))
    branch_profile = agentconfig.view(config).workspace == "branch"
    if parent is None and not branch_profile:
        return {}
    if parent is not None:
        if parent.discarded:
            raise StateError(f"the branch of {parent.conv_id!r} was discarded; it cannot fork")
        base = rev(ws.root, parent.ref) or parent.base
    else:
        base = rev(ws.root, "HEAD")
    if base is None:
        raise GitError("the repository has no commit yet: commit something, then retry")
    if not branch_profile:
        return {"base": base}
    name = branch_name(conv_id)
    if rev(ws.root, f"refs/heads/{name}") is not None:
        raise GitError(
            f"branch {name} already exists (left by an earlier conversation {conv_id!r}):"
            f" delete it with `git branch -D {name}` or use another id"
        )
    return {"base": base, "branch": name, "worktree": f"{WORKTREES_DIR}/{worktree_name(conv_id)}"}


# -- worktrees -------------------------------------------------------------------------


def admin_dir(worktree: Path) -> Path | None:
    """The worktree's private gitdir (``<common>/worktrees/<name>``), if it is one."""
    try:
        text = (worktree / ".git").read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None
    if not text.startswith("gitdir:"):
        return None
    path = Path(text[len("gitdir:") :].strip())
    return path if path.is_absolute() else (worktree / path).resolve()


def is_ready(worktree: Path) -> bool:
    admin = admin_dir(worktree)
    return admin is not None and (admin / READY_MARK).is_file()


def ensure_worktree(ws: Workspace, fork: Fork) -> Path:
    """The fork's worktree, creating the branch (at ``base``) and worktree if missing."""
    if fork.discarded:
        raise StateError(
            f"the branch of {fork.conv_id!r} was discarded; start or fork a new conversation"
        )
    if is_ready(fork.worktree):
        return fork.worktree
    with flock(ws, "layout"):
        if is_ready(fork.worktree):
            return fork.worktree
        if rev(ws.root, fork.ref) is None:
            if fork.base is None:
                raise GitError(f"conversation {fork.conv_id!r} records no base commit to fork from")
            git.run(ws.root, ["branch", "--no-track", fork.branch, fork.base])
        if admin_dir(fork.worktree) is None:
            # A registration whose directory vanished would make `worktree add` refuse.
            git.run(ws.root, ["worktree", "prune"])
            if fork.worktree.exists():
                shutil.rmtree(fork.worktree)  # debris of a creation that crashed
            fork.worktree.parent.mkdir(parents=True, exist_ok=True)
            git.run(ws.root, ["worktree", "add", "--no-checkout", str(fork.worktree), fork.branch])
        # Sparse: the conversation records stay in the main work tree only.
        git.run(
            fork.worktree, ["sparse-checkout", "set", "--no-cone", "/*", f"!/{ws.conv_root_rel}/"]
        )
        git.run(fork.worktree, ["read-tree", "-mu", "HEAD"])
        admin = admin_dir(fork.worktree)
        assert admin is not None
        (admin / READY_MARK).write_text(f"{fork.conv_id}\n", encoding="utf-8")
    return fork.worktree


def adopt(ws: Workspace, conv: Conversation) -> Fork | None:
    """Give a branch-profile conversation created without its fork its branch now.

    Every conversation jpfs creates gets its branch at once
    (:mod:`jpfs.services.conversations.creation`); one a person started with a
    hand-written task.md, adopted by the daemon, does not, so the runtime calls this
    before the first tool runs: the branch then forks from the parent's workspace as it
    is at that moment.
    """
    fields = plan(ws, conv.id, conv.config)
    if "branch" not in fields:
        return None
    conv.update(**fields)
    fork = require_fork(ws, conv.id)
    ensure_worktree(ws, fork)
    agent = str(conv.meta().get("agent", "")) or None
    record.commit(ws, conv.id, "branch", agent=agent, note=fork.branch)
    return fork


def files_root(ws: Workspace, conv: Conversation) -> Path:
    """Where ``conv``'s file tools work: its (inherited) worktree, else the main work tree."""
    fork = enclosing_fork(ws, conv.id)
    if (fork is None or fork.conv_id != conv.id) and conv.settings.workspace == "branch":
        fork = adopt(ws, conv)
    return ws.root if fork is None else ensure_worktree(ws, fork)


# Tools that never change files in the caller's worktree: a batch of only these needs
# no commit (git add + write-tree cost tens of ms in a large repository). jp_query and
# merge commit what they change themselves.
READ_ONLY_TOOLS = frozenset(
    {
        "fs_read_file", "fs_list_files", "fs_grep_files", "jp_query", "jp_await",
        "jp_conversation_list", "jp_conversation_print", "jp_conversation_grep", "jp_blame",
        "mail_send", "mail_check", "mail_read", "mail_delete", "mail_filter",
        "fork", "kill", "merge", "branch_diff", "branch_discard", "ask_caller", "start_work",
    }
)  # fmt: skip


def commit_edits(
    ws: Workspace,
    conv_id: str,
    *,
    agent: str | None = None,
    author: Identity | None = None,
    note: str | None = None,
    tools: Sequence[str] | None = None,
    links: Callable[[], Sequence[tuple[str, str]]] | None = None,
) -> str | None:
    """Commit the project files changed in ``conv_id``'s worktree onto its branch.

    No-op (None) outside a fork, when nothing changed, or when ``tools`` (the batch just
    run) are all read-only. The conversation root is never staged: the record lives
    (and is committed) in the main work tree. ``links``: the provenance trailers
    (``Jpfs-Event-Path``, ...), asked for only when there is something to commit.
    """
    if tools is not None and all(t in READ_ONLY_TOOLS for t in tools):
        return None
    fork = enclosing_fork(ws, conv_id)
    if fork is None or fork.discarded or not is_ready(fork.worktree):
        return None
    trailers = [("Jpfs-Conversation", conv_id), ("Jpfs-Event", "edit")]
    if agent:
        trailers.append(("Jpfs-Agent", agent))
    subject = f"jpfs({conv_id}): edit" + (f" {note}" if note else "")
    wt = fork.worktree
    with flock(ws, f"worktree:{fork.branch}"):
        git.run(wt, ["add", "-A", "--", ".", f":(exclude,literal){ws.conv_root_rel}"])
        tree = git.output(wt, "write-tree")
        head = git.output(wt, "rev-parse", "--verify", "HEAD")
        if tree == git.output(wt, "rev-parse", f"{head}^{{tree}}"):
            return None
        if links is not None:
            trailers += links()
        sha = commit_tree(wt, tree, [head], subject, trailers, author=author)
        git.run(wt, ["update-ref", "-m", f"commit: {subject}", "HEAD", sha, head])
    return sha
