"""The plan of a batch: the commits that a group of snapshots becomes on top of a tip.

Each change is diffed against the tip (and the changes before it in the batch); what
differs goes into one commit per run of consecutive changes by the same author, each
commit's tree the previous one with only the trees along its changed paths rewritten
(:mod:`jpfs.infra.committer.trees`). Unchanged blobs are recognised by hash and never
rewritten. Nothing is written here: the plan lists the objects it needs, and the
committer writes them and moves the ref (:mod:`jpfs.infra.committer.core`), planning
again on the new tip if the ref moved meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pygit2

from jpfs.infra.committer.batch import Pending
from jpfs.infra.committer.change import Identity
from jpfs.infra.committer.objects import BLOB, COMMIT, TREE, Objects, commit_object
from jpfs.infra.committer.trees import TreeCache, TreeView, same
from jpfs.infra.committer.worktree import Blob, Dir, Worktree

Signer = Callable[[str, Identity | None], pygit2.Signature]


@dataclass
class Plan:
    new_tip: str | None
    shas: list[str]
    entries: dict[str, Blob | None]
    log_msg: str
    tree: TreeView  # the tree new_tip (or the unchanged tip) holds
    objects: Objects


@dataclass
class _Run:
    author: Identity | None
    changes: dict[str, Blob | None] = field(default_factory=dict)
    items: list[Pending] = field(default_factory=list)


class Planner:
    """Plans batches on one repository; ``sign`` makes the author and committer lines."""

    def __init__(self, worktree: Worktree, trees: TreeCache, sign: Signer) -> None:
        self._worktree = worktree
        self._trees = trees
        self._sign = sign

    def plan(
        self, repo: pygit2.Repository, live: list[Pending], tip: str | None, base_tree: bytes | None
    ) -> Plan:
        """The commits of ``live`` (snapshots taken) on ``tip``, whose tree is ``base_tree``."""
        base = self._trees.view(repo, base_tree)
        runs, all_entries = _runs(live, base)
        parent = tip
        tree_oid = base_tree
        objects = Objects()
        shas: list[str] = []
        log_msg = ""
        for run in runs:
            for path, blob in run.changes.items():
                data = self._worktree.data(repo, path, blob) if blob is not None else None
                if blob is not None and data is not None:
                    objects.add(BLOB, data, blob.oid.raw)
            new_tree = self._trees.build(repo, tree_oid, run.changes, objects)
            tree_oid = new_tree if new_tree is not None else objects.add(TREE, b"")
            message, subject = _message(run.items)
            data = commit_object(
                tree_oid,
                [parent] if parent else [],
                self._sign("AUTHOR", run.author),
                self._sign("COMMITTER", None),
                message,
            )
            log_msg = f"commit{'' if parent else ' (initial)'}: {subject}"
            parent = objects.add(COMMIT, data).hex()
            shas.append(parent)
        tree = self._trees.view(repo, tree_oid) if runs else base
        return Plan(shas[-1] if shas else None, shas, all_entries, log_msg, tree, objects)


def _runs(live: list[Pending], base: TreeView) -> tuple[list[_Run], dict[str, Blob | None]]:
    """``live``'s changes against ``base`` and each other, grouped into runs by author;
    and every changed path with its new state."""
    current: dict[str, Blob | None] = {}
    owner: dict[str, int] = {}
    runs: list[_Run] = []
    all_entries: dict[str, Blob | None] = {}
    for item in live:
        entries: dict[str, Blob | None] = {}
        for path, snap in zip(item.paths, item.snapshot, strict=True):
            if isinstance(snap, Dir):
                for gone in base.files(path):
                    entries[gone] = None
                entries.update(snap.files)
            else:
                if snap is None:
                    for gone in base.files(path):
                        entries[gone] = None
                if path:
                    entries[path] = snap
        diff = {
            p: blob
            for p, blob in entries.items()
            if not same(current[p] if p in current else base.get(p), blob)
        }
        # Only what changed goes on to the index: a conversation's unchanged events
        # are in it already, and syncing them all made a commit O(events).
        all_entries.update(diff)
        author = item.change.author
        if diff:
            if not runs or runs[-1].author != author:
                runs.append(_Run(author))
            run_no = len(runs) - 1
            runs[run_no].changes.update(diff)
            runs[run_no].items.append(item)
            current.update(diff)
            owner.update(dict.fromkeys(diff, run_no))
            item.run = run_no
        else:
            owning = [owner[p] for p in entries if p in owner]
            item.run = max(owning) if owning else None
            if item.run is not None:
                runs[item.run].items.append(item)
    return runs, all_entries


def _message(items: list[Pending]) -> tuple[str, str]:
    """The commit message for ``items`` (folded if several) and its subject."""
    trailers = [f"{key}: {value}" for item in items for key, value in item.change.trailers]
    if len(items) == 1:
        subject = items[0].change.subject
        body = ""
    else:
        subject = f"jpfs: {len(items)} changes"
        # The "- " prefix keeps a subject like "Fix: x" from parsing as a trailer.
        body = "\n".join(f"- {item.change.subject}" for item in items) + "\n"
    message = subject + "\n"
    if body:
        message += "\n" + body
    if trailers:
        message += "\n" + "\n".join(trailers) + "\n"
    return message, subject
