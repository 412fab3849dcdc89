"""Branch forks in detail: naming, worktree safety, gc, discard, a merge while the record is busy."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from jpfs.core import ids, locks, record
from jpfs.core.conversation import Conversation
from jpfs.core.tool import ToolContext
from jpfs.core.workspace import Workspace, open_workspace
from jpfs.errors import LockError, MergeConflict, ScopeError, StateError
from jpfs.services.conversations import lifecycle
from jpfs.services.forks import branches, worktrees
from jpfs.services.forks.merge import merge
from jpfs.tools import fs
from tests.conftest import Result, git, rgit, wait_until, write_profile

BRANCH = """
model = "script"
provider = "script"
workspace = "branch"
[tools]
allow = ["fs_read_file", "fs_write_file"]
write = ["**"]
"""
SHARED = """
model = "script"
provider = "script"
[tools]
allow = ["fs_write_file"]
write = ["**"]
"""


@pytest.fixture
def wsp(ws: Path) -> Workspace:
    write_profile(ws, "impl", BRANCH, allowed=True)
    write_profile(ws, "plain", SHARED, allowed=True)
    return open_workspace(ws)


def fork(wsp: Workspace, conv_id: str, agent: str = "impl") -> Path:
    parent, _, seg = conv_id.rpartition("/")
    conv = lifecycle.new_conversation(wsp, seg, parent=parent or None, agent=agent)
    return branches.files_root(wsp, conv)


def edit(wsp: Workspace, conv_id: str, path: str, text: str) -> str | None:
    root = branches.files_root(wsp, Conversation(wsp.conv_root, conv_id))
    (root / path).parent.mkdir(parents=True, exist_ok=True)
    (root / path).write_text(text, encoding="utf-8")
    return branches.commit_edits(wsp, conv_id, agent="impl")


@pytest.mark.parametrize(
    "conv_id",
    ["a", "a/b", "a/b/c", "x.lock/y.lock", "a./b-", "/".join(["s" * 128] * 32)],
)
def test_branch_names_are_valid_git_refs_and_injective(conv_id: str) -> None:
    name = branches.branch_name(ids.validate(conv_id))
    check = subprocess.run(["git", "check-ref-format", "--branch", name], capture_output=True)
    assert check.returncode == 0, name
    assert len(branches.worktree_name(conv_id)) <= branches.MAX_DIR + 20
    assert "/" not in branches.worktree_name(conv_id)


def test_branch_and_worktree_names_are_injective() -> None:
    tricky = ["a", "a/b", "a-b", "a+b", "x.lock", "x.lock_", "x.lock-", "a/x.lock", "a/x.lock_"]
    valid = [c for c in tricky if "+" not in c]
    assert len({branches.branch_name(c) for c in valid}) == len(valid)
    assert len({branches.worktree_name(c) for c in valid}) == len(valid)


def test_nested_branches_coexist_and_mirror_the_tree(wsp: Workspace) -> None:
    fork(wsp, "a")
    edit(wsp, "a", "a.txt", "a\n")
    fork(wsp, "a/b")
    fork(wsp, "a/b/c")
    refs = git(wsp.root, "for-each-ref", "--format=%(refname:short)", "refs/heads/jpfs").split()
    assert refs == ["jpfs/a/_", "jpfs/a/b/_", "jpfs/a/b/c/_"]
    # Forked from the parent's branch, with the parent's committed edit.
    assert (branches.files_root(wsp, Conversation(wsp.conv_root, "a/b/c")) / "a.txt").is_file()
    listed = git(wsp.root, "worktree", "list", "--porcelain")
    assert listed.count("worktree ") == 5  # 3 writers, the main work tree, the record
    assert f"worktree {wsp.root / 'conversations'}\n" in listed
    assert "branch refs/heads/jpfs-record" in listed
    # Worktrees are flat siblings, never inside one another.
    assert sorted(p.name for p in (wsp.root / ".jpfs/local/worktrees").iterdir()) == [
        "a",
        "a+b",
        "a+b+c",
    ]


def test_shared_child_of_a_branch_works_in_its_parents_worktree(wsp: Workspace) -> None:
    wt = fork(wsp, "a")
    inner = fork(wsp, "a/helper", agent="plain")
    assert inner == wt
    assert "branch" not in Conversation(wsp.conv_root, "a/helper").meta()
    sha = edit(wsp, "a/helper", "h.txt", "helped\n")
    assert sha is not None
    assert git(wsp.root, "log", "-1", "--format=%s", "jpfs/a/_").strip() == "jpfs(a/helper): edit"


def test_agent_file_tools_cannot_touch_git_in_a_worktree(wsp: Workspace) -> None:
    wt = fork(wsp, "a")
    assert (wt / ".git").is_file()  # a linked worktree's .git is a file
    ctx = ToolContext(wsp.root, "a", wt, writable=("**",))
    for path in (".git", ".git/config", "sub/../.git", ".GIT"):
        with pytest.raises(ScopeError):
            fs.FS_TOOLS["fs_write_file"].run(ctx, {"path": path, "content": "x"})
        with pytest.raises(ScopeError):
            fs.FS_TOOLS["fs_read_file"].run(ctx, {"path": path})
    assert (wt / ".git").read_text(encoding="utf-8").startswith("gitdir:")


def test_conversation_files_written_in_a_worktree_never_reach_the_branch(wsp: Workspace) -> None:
    fork(wsp, "a")
    sha = edit(wsp, "a", "conversations/a/result.md", "forged\n")
    assert sha is None  # nothing else changed, and the record path is never staged
    edit(wsp, "a", "ok.txt", "fine\n")
    changed = git(wsp.root, "diff", "--name-only", "main...jpfs/a/_").split()
    assert changed == ["ok.txt"]


def test_a_merge_while_the_record_is_busy_loses_nothing_on_either_branch(
    wsp: Workspace,
) -> None:
    fork(wsp, "a")
    edit(wsp, "a", "feature.txt", "feature\n")
    lifecycle.new_conversation(wsp, "busy", agent="plain")
    main_before = git(wsp.root, "rev-parse", "main").strip()
    stop = threading.Event()
    done: list[str] = []

    def churn() -> None:
        conv = Conversation(wsp.conv_root, "busy")
        n = 0
        while not stop.is_set() and n < 200:
            n += 1
            conv.write("files/note.md", f"{n}\n")
            record.commit(wsp, "busy", "edit", note=str(n))
            done.append(str(n))

    worker = threading.Thread(target=churn)
    worker.start()
    try:
        # The merge starts while the committer is busy writing the record.
        wait_until(lambda: len(done) >= 3, message="the record's committer to be busy")
        result = merge(wsp, "a")
        after = len(done)
        # ...and it keeps writing after the merge is done.
        wait_until(lambda: len(done) >= min(after + 3, 200), message="more record commits")
    finally:
        stop.set()
        worker.join()
    assert not result.already
    # The record got every change (group commits list theirs), the merge's own event
    # included, and holds the last write: jpfs commits on jpfs-record.
    log = rgit(wsp.root, "log", "--format=%B")
    for n in done:
        assert f"jpfs(busy): edit {n}\n" in log
    assert f"jpfs(a): merged into main as {result.commit[:12]}\n" in log
    assert rgit(wsp.root, "show", "HEAD:busy/files/note.md") == f"{done[-1]}\n"
    assert f'merged = "{result.commit}"' in rgit(wsp.root, "show", "HEAD:a/conversation.toml")
    assert rgit(wsp.root, "status", "--porcelain") == ""
    # The user's branch got the merge and nothing of the record: its old tip is the merge's
    # first parent, no commit on it touches conversations/, no jpfs(busy) commit is there.
    assert git(wsp.root, "rev-parse", "main").strip() == result.commit
    assert git(wsp.root, "rev-parse", f"{result.commit}^1").strip() == main_before
    assert "jpfs(busy)" not in git(wsp.root, "log", "--format=%B", "main")
    assert git(wsp.root, "log", "--format=%H", "main", "--", "conversations") == ""
    assert git(wsp.root, "show", "main:feature.txt") == "feature\n"
    assert (wsp.root / "feature.txt").read_text(encoding="utf-8") == "feature\n"
    assert git(wsp.root, "status", "--porcelain", "--untracked-files=no") == ""
    assert git(wsp.root, "ls-files", "conversations") == ""


def test_merge_refusals(wsp: Workspace) -> None:
    fork(wsp, "a")
    fork(wsp, "a/b")
    lifecycle.new_conversation(wsp, "s", agent="plain")
    with pytest.raises(StateError, match="has no branch"):
        merge(wsp, "s")
    with pytest.raises(ScopeError):
        merge(wsp, "a", within="a")  # only strict descendants
    with locks.conversation_lock(wsp.local_dir, "a/b"), pytest.raises(LockError):
        merge(wsp, "a/b")
    assert merge(wsp, "a/b").already  # no commits: nothing to merge
    # Both sides edit the same line: a conflict that names the path, nothing changed.
    edit(wsp, "a", "README.md", "from a\n")
    edit(wsp, "a/b", "README.md", "from b\n")
    tip = git(wsp.root, "rev-parse", "jpfs/a/_")
    with pytest.raises(MergeConflict) as err:
        merge(wsp, "a/b")
    assert err.value.paths == ["README.md"]
    assert git(wsp.root, "rev-parse", "jpfs/a/_") == tip
    assert worktrees.discard(wsp, "a") == ["a/b", "a"]  # deepest first, cascading
    with pytest.raises(StateError, match="discarded"):
        merge(wsp, "a")
    with pytest.raises(StateError, match="discarded"):
        branches.files_root(wsp, Conversation(wsp.conv_root, "a/b"))


def test_gc_removes_killed_merged_and_orphaned_worktrees_and_reports_the_rest(
    wsp: Workspace, cli: Callable[..., Result]
) -> None:
    for name in ("killed", "merged", "idle", "orphan", "vanished", "running"):
        fork(wsp, name)
    # A killed child's uncommitted work is committed onto its branch before removal.
    (branches.files_root(wsp, Conversation(wsp.conv_root, "killed")) / "wip.txt").write_text(
        "wip\n"
    )
    Conversation(wsp.conv_root, "killed").update(status="killed")
    edit(wsp, "merged", "m.txt", "m\n")
    merge(wsp, "merged")
    edit(wsp, "idle", "i.txt", "i\n")
    lifecycle.remove_conversation(wsp, "orphan")
    # A worktree deleted by hand leaves a dangling registration behind.
    import shutil

    shutil.rmtree(wsp.root / ".jpfs/local/worktrees/vanished")
    assert "prunable" in git(wsp.root, "worktree", "list", "--porcelain")

    with locks.conversation_lock(wsp.local_dir, "running"):
        result = cli("gc")
    assert result.code == 0, result.stderr
    assert "removed worktree killed (killed)" in result.stdout
    assert "removed worktree merged (merged)" in result.stdout
    assert (
        "removed worktree .jpfs/local/worktrees/orphan (no conversation uses it)" in result.stdout
    )
    assert "kept worktree idle (active, not merged)" in result.stderr
    assert "kept worktree running (in use by a run)" in result.stderr
    listed = git(wsp.root, "worktree", "list", "--porcelain")
    assert "prunable" not in listed
    kept = sorted(
        Path(line.split()[1]).name for line in listed.splitlines() if line.startswith("worktree ")
    )
    assert kept == sorted([wsp.root.name, "conversations", "idle", "running"])
    assert git(wsp.root, "show", "jpfs/killed/_:wip.txt") == "wip\n"  # branch kept, work saved
    # A merged child that is continued gets its worktree back.
    wt = branches.files_root(wsp, Conversation(wsp.conv_root, "merged"))
    assert (wt / "m.txt").read_text(encoding="utf-8") == "m\n"
    edit(wsp, "merged", "m.txt", "m2\n")
    assert not merge(wsp, "merged").already
    assert (wsp.root / "m.txt").read_text(encoding="utf-8") == "m2\n"


def test_forks_made_outside_new_conversation_get_their_branch(wsp: Workspace) -> None:
    from jpfs.core.conversation import create
    from jpfs.services.run.runtime import Runner

    fork(wsp, "a")
    tip = edit(wsp, "a", "a.txt", "a\n")
    # A fork of a branch conversation forks its branch too.
    copy = lifecycle.fork_conversation(wsp, "a")
    meta = copy.meta()
    assert meta["branch"] == f"jpfs/{copy.id}/_" and meta["base"] == tip
    # One created without its fork (daemon adoption, batch onboarding) gets it on its
    # first run, from its parent's workspace as it is then.
    late = create(wsp.conv_root, "a/late", agent="impl", config=lifecycle.agent_config(wsp, "impl"))
    assert "branch" not in late.meta()
    root = Runner(wsp).files_root(late)
    assert late.meta()["branch"] == "jpfs/a/late/_"
    assert (root / "a.txt").read_text(encoding="utf-8") == "a\n"
    assert rgit(wsp.root, "log", "-1", "--format=%s") == "jpfs(a/late): branch jpfs/a/late/_\n"
    assert "jpfs(a/late)" in rgit(wsp.root, "log", "-1", "--format=%B", "--", "a/late")
    # The user's branch did not get that commit (nor any other of jpfs's).
    assert git(wsp.root, "log", "--format=%s", "main") == "initial\n"


def test_an_edited_record_cannot_redirect_branch_operations(wsp: Workspace) -> None:
    git(wsp.root, "branch", "precious")
    fork(wsp, "a")
    conv = Conversation(wsp.conv_root, "a")
    conv.update(branch="precious")
    with pytest.raises(ScopeError, match="restore those"):
        worktrees.discard(wsp, "a")
    conv.update(branch="jpfs/a/_", worktree="../../outside")
    with pytest.raises(ScopeError):
        branches.files_root(wsp, conv)
    assert git(wsp.root, "branch", "--list", "precious").strip() == "precious"
