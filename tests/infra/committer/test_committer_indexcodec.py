"""The index codec (indexfile, splitindex, cachetree) against git, on generated edits.

git prepares an index (split or not, with a cache-tree, a version-3 entry), jpfs sets
and removes entries and saves it (split or not); git must then list exactly the
entries and stat data jpfs wrote, and ``git write-tree`` must give the tree of those
entries (a cache-tree node left valid over a changed path would give a stale one).
Then git changes the index, and jpfs must read back exactly what git lists.
"""

from __future__ import annotations

import os
import re
import struct
import subprocess
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import jpfs.infra.committer.indexentries as indexentries
import jpfs.infra.committer.indexfile as indexfile
from jpfs.infra.committer.splitindex import NO_SPLIT, SplitPolicy
from tests.conftest import git

SEEDED = ("a", "d0/x", "d0/y", "d0/e/f", "d1/z", "d1/q/r/s", "d2/w")
NEW = ("n", "m/x", "d0", "d0/e", "d1/q/r/s/t", "d2/w2")
CONTENTS = (b"zero\n", b"one\n", b"two\n")
MODES = (0o100644, 0o100755)
POLICIES = (
    NO_SPLIT,
    SplitPolicy(enabled=True, max_percent=0, clean=True),
    SplitPolicy(enabled=True, max_percent=20, clean=True),
    SplitPolicy(enabled=True, max_percent=100, clean=True),
)
_DEBUG = re.compile(
    r"^(\d+) ([0-9a-f]{40}) (\d)\t(.*)\n  ctime: (\d+):(\d+)\n  mtime: (\d+):(\d+)\n"
    r"  dev: (\d+)\tino: (\d+)\n  uid: (\d+)\tgid: (\d+)\n  size: (\d+)\tflags: [0-9a-f]+$",
    re.MULTILINE,
)

View = dict[str, tuple[int, ...]]


def git_view(repo: Path) -> View:
    """path -> (mode, stage, ctime s/ns, mtime s/ns, dev, ino, uid, gid, size) and oid,
    as ``git ls-files --stage --debug`` reads the index."""
    out = git(repo, "ls-files", "--stage", "--debug")
    found: View = {}
    for match in _DEBUG.finditer(out):
        mode, oid, stage, path, *stat = match.groups()
        found[path] = (int(mode, 8), int(oid, 16), int(stage), *map(int, stat))
    assert len(found) == len(git(repo, "ls-files", "--stage").splitlines())
    return found


def jpfs_view(index: indexfile.FastIndex) -> View:
    found: View = {}
    for chunk in index.chunks:
        for raw in chunk.raws:
            key = indexentries.key_of(raw)
            ctime, ctime_ns, mtime, mtime_ns, dev, ino, mode, uid, gid, size = struct.unpack_from(
                ">10I", raw
            )
            oid = int.from_bytes(raw[40:60], "big")
            stat = (ctime, ctime_ns, mtime, mtime_ns, dev, ino, uid, gid, size)
            found[key[:-2].decode()] = (mode, oid, key[-1], *stat)
    return found


def load(repo: Path) -> indexfile.FastIndex:
    path = repo / ".git/index"
    return indexfile.FastIndex.parse(path.read_bytes(), path.stat(), repo / ".git")


def seeded(base: Path) -> tuple[Path, list[str]]:
    repo = base / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "splitIndex.sharedIndexExpire", "now")
    for n, path in enumerate(SEEDED):
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_bytes(CONTENTS[n % len(CONTENTS)])
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "seed")
    blobs = git(repo, "hash-object", "-w", *SEEDED[: len(CONTENTS)]).split()
    return repo, blobs


def model_set(model: dict[str, tuple[int, str]], path: str, entry: tuple[int, str]) -> None:
    """What setting ``path`` does to an index: the directory it replaces and the files
    in the way of its directories go, as git's add_index_entry_with_check does."""
    for other in [p for p in model if p.startswith(path + "/")]:
        del model[other]
    parts = path.split("/")
    for depth in range(1, len(parts)):
        model.pop("/".join(parts[:depth]), None)
    model[path] = entry


def tree_of(repo: Path, model: dict[str, tuple[int, str]]) -> str:
    """The tree git writes from a fresh index holding ``model``."""
    scratch = {**os.environ, "GIT_INDEX_FILE": str(repo / ".git/scratch-index")}
    info = "".join(f"{mode:o} {oid}\t{path}\n" for path, (mode, oid) in model.items())
    subprocess.run(
        ["git", "update-index", "--index-info"], cwd=repo, env=scratch, input=info, check=True,
        text=True,
    )  # fmt: skip
    tree = subprocess.run(
        ["git", "write-tree"], cwd=repo, env=scratch, capture_output=True, text=True, check=True
    ).stdout
    os.unlink(scratch["GIT_INDEX_FILE"])
    return tree


edits = st.lists(
    st.one_of(
        st.tuples(
            st.just("set"),
            st.sampled_from(SEEDED + NEW),
            st.integers(0, len(CONTENTS) - 1),
            st.sampled_from(MODES),
            st.booleans(),
        ),
        st.tuples(st.just("remove"), st.sampled_from(SEEDED + NEW)),
    ),
    min_size=1,
    max_size=8,
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    git_split=st.booleans(),
    cache_tree=st.booleans(),
    skip_worktree=st.booleans(),
    ops=edits,
    policy=st.sampled_from(POLICIES),
    git_edit=st.tuples(st.sampled_from((*SEEDED, "n", "m/x")), st.integers(0, len(CONTENTS) - 1)),
)
# Bug: jpfs refused (and so never synced) a split index whose part is of version 3 over
# a version-2 base, which git writes once an entry gets an extended flag.
@example(
    git_split=True,
    cache_tree=False,
    skip_worktree=True,
    ops=[("remove", "a")],
    policy=NO_SPLIT,
    git_edit=("a", 0),
)
# A test case, not a bug: git's own add refused the skip-worktree entry git_edit picked.
@example(
    git_split=False,
    cache_tree=False,
    skip_worktree=True,
    ops=[("set", "a", 0, 33188, False)],
    policy=NO_SPLIT,
    git_edit=("d1/z", 0),
)
def test_git_and_jpfs_read_each_others_index(
    tmp_path: Path,
    git_split: bool,
    cache_tree: bool,
    skip_worktree: bool,
    ops: list[tuple[object, ...]],
    policy: SplitPolicy,
    git_edit: tuple[str, int],
) -> None:
    repo, blobs = seeded(Path(tempfile.mkdtemp(dir=tmp_path)))
    if git_split:
        git(repo, "update-index", "--split-index")
    if cache_tree:
        git(repo, "write-tree")
    if skip_worktree:  # an extended flag: an index of version 3
        git(repo, "update-index", "--skip-worktree", "d1/z")
    index = load(repo)
    assert jpfs_view(index) == git_view(repo)
    model = {path: (mode, f"{oid:040x}") for path, (mode, oid, *_) in git_view(repo).items()}
    stats: dict[str, os.stat_result] = {}
    for op in ops:
        path = str(op[1])
        if op[0] == "remove":
            index.remove(path.encode())
            model.pop(path, None)
            stats.pop(path, None)
            continue
        _, _, content, mode, with_stat = op
        assert isinstance(content, int) and isinstance(mode, int)
        st_ = os.stat(repo / SEEDED[content]) if with_stat else None
        index.set(path.encode(), bytes.fromhex(blobs[content]), mode, st_)
        model_set(model, path, (mode, blobs[content]))
        for gone in [p for p in stats if p not in model or p == path]:
            del stats[gone]
        if st_ is not None:
            stats[path] = st_
    index.save(repo / ".git/index", repo / ".git", lambda path, raw: False, fsync=False,
               skip_hash=False, split=policy)  # fmt: skip
    seen = git_view(repo)
    assert {path: (entry[0], f"{entry[1]:040x}") for path, entry in seen.items()} == model
    for path, st_ in stats.items():
        ctime, mtime = divmod(st_.st_ctime_ns, 10**9), divmod(st_.st_mtime_ns, 10**9)
        assert seen[path][3:] == (*ctime, *mtime, st_.st_dev, st_.st_ino, st_.st_uid,
                                  st_.st_gid, st_.st_size)  # fmt: skip
    assert git(repo, "write-tree") == tree_of(repo, model)
    assert jpfs_view(load(repo)) == seen
    # And back: git changes the index jpfs wrote (and writes a cache-tree), jpfs reads it.
    path, content = git_edit
    (repo / path).parent.mkdir(parents=True, exist_ok=True)
    (repo / path).write_bytes(CONTENTS[content])
    # --sparse: the path may still be the skip-worktree entry, which a plain add refuses.
    git(repo, "add", "--sparse", "--", path)
    git(repo, "update-index", "-q", "--refresh", check=False)
    git(repo, "write-tree")
    assert jpfs_view(load(repo)) == git_view(repo)
