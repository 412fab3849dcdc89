"""Branches model forks, end to end on real repositories with scripted agents.

Best-of-N (two implementers edit one file in parallel, one merges, the other conflicts),
nested forks (a grandchild merges into its parent's branch, then both into main), and
the user's uncommitted work surviving every merge.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from jpfs import api
from jpfs.core import ids, tree
from jpfs.core.conversation import Conversation
from jpfs.core.workspace import open_workspace
from jpfs.services.forks import branches, diffs
from jpfs.tools.registry import catalog
from tests.conftest import Result, git, rgit, write_profile

IMPL = """
model = "script"
provider = "script"
description = "edits shared.txt on its branch"
workspace = "branch"
[tools]
allow = ["fs_read_file", "fs_write_file", "fs_modify_file"]
write = ["**"]
[[script.turns]]
text = "editing"
tool_calls = [
  { name = "fs_modify_file", input = { path = "shared.txt", old = "line1", new = "{task}" } },
  { name = "fs_write_file", input = { path = "notes/{task}.txt", content = "by {task}\\n" } },
]
[[script.turns]]
text = "changed shared.txt to {task}"
"""

LEAD = """
model = "script"
provider = "script"
[tools]
allow = ["jp_query", "merge", "branch_diff", "branch_discard"]
agents = ["impl"]
[[script.turns]]
text = "two implementers in parallel"
tool_calls = [
  { name = "jp_query", input = { config = "impl", query = "alpha" } },
  { name = "jp_query", input = { config = "impl", query = "beta" } },
]
[[script.turns]]
text = "both done"
"""

# A branch agent that writes a file, then forks a grandchild implementer.
OUTER = """
model = "script-outer"
provider = "script"
workspace = "branch"
[tools]
allow = ["fs_write_file", "jp_query", "merge", "branch_diff"]
agents = ["impl"]
write = ["**"]
[[script.turns]]
text = "my own file first"
tool_calls = [{ name = "fs_write_file", input = { path = "outer.txt", content = "outer\\n" } }]
[[script.turns]]
text = "now a helper on a branch of my branch"
tool_calls = [{ name = "jp_query", input = { config = "impl", query = "gamma" } }]
[[script.turns]]
text = "outer done"
"""

TOP = """
model = "script"
provider = "script"
[tools]
allow = ["jp_query"]
agents = ["outer"]
[[script.turns]]
text = "delegating"
tool_calls = [{ name = "jp_query", input = { config = "outer", query = "outer work" } }]
[[script.turns]]
text = "top done"
"""


@pytest.fixture
def project(ws: Path) -> Path:
    (ws / "shared.txt").write_text("line1\nline2\nline3\n", encoding="utf-8")
    git(ws, "add", "shared.txt")
    git(ws, "commit", "-q", "-m", "add shared.txt")
    for name, text in {"impl": IMPL, "lead": LEAD, "outer": OUTER, "top": TOP}.items():
        # Only the top-level ones are named in agents.allowed: the others are started
        # by agents.
        write_profile(ws, name, text, allowed=name in ("lead", "top"))
    return ws


def user_git(repo: Path, *args: str) -> str:
    """A user's git command: never retried, jpfs commits never take the user's index.lock."""
    proc = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)
    assert proc.returncode == 0, f"git {' '.join(args)} failed: {proc.stderr}"
    return proc.stdout


def dirty_user_work(repo: Path) -> None:
    """Uncommitted work of every kind: modified, staged, untracked."""
    with (repo / "README.md").open("a", encoding="utf-8") as fh:
        fh.write("my unsaved thoughts\n")
    (repo / "staged.txt").write_text("staged by the user\n", encoding="utf-8")
    user_git(repo, "add", "staged.txt")
    (repo / "scratch.txt").write_text("untracked\n", encoding="utf-8")


def assert_user_work_intact(repo: Path) -> None:
    # The whole index: conversation files live on the record (conversations/, branch
    # jpfs-record), never in the user's index or on the user's branch.
    assert (repo / "README.md").read_text(encoding="utf-8").endswith("my unsaved thoughts\n")
    assert git(repo, "diff", "--cached", "--name-only").split() == ["staged.txt"]
    assert git(repo, "diff", "--name-only").split() == ["README.md"]
    assert (repo / "scratch.txt").read_text(encoding="utf-8") == "untracked\n"
    assert git(repo, "ls-files", "conversations") == ""
    assert git(repo, "log", "--format=%H", "HEAD", "--", "conversations") == ""


def run_top(cli: Callable[..., Result], agent: str) -> str:
    result = cli("query", "--new", "--agent", agent, "--non-interactive", "go")
    assert result.code == 0, result.stderr
    return result.stderr.split("conversation ")[-1].split()[0]


def children_by_task(repo: Path, parent: str) -> dict[str, str]:
    ws = open_workspace(repo)
    out = {}
    for conv_id in tree.walk(ws.conv_root, parent):
        if ids.parent(conv_id) != parent:
            continue
        task = Conversation(ws.conv_root, conv_id).read("task.md") or ""
        out[task.strip()] = conv_id
    return out


def tool_call(repo: Path, caller: str, name: str, args: dict[str, object]) -> str:
    """Call a tool the way the runtime does for conversation ``caller``."""
    ws = open_workspace(repo)
    runner = api.runner(ws)
    conv = Conversation(ws.conv_root, caller)
    return catalog(conv.config).get(name).run(runner.tool_context(conv), args)  # type: ignore[union-attr]


def test_best_of_n_parallel_branches_merge_one_conflict_other(
    project: Path, cli: Callable[..., Result]
) -> None:
    dirty_user_work(project)
    lead = run_top(cli, "lead")
    kids = children_by_task(project, lead)
    alpha, beta = kids["alpha"], kids["beta"]
    ws = open_workspace(project)

    # Each child recorded its fork and edited only its own worktree, on its own branch.
    for conv_id, word in ((alpha, "alpha"), (beta, "beta")):
        meta = Conversation(ws.conv_root, conv_id).meta()
        assert meta["branch"] == f"jpfs/{conv_id}/_"
        assert meta["worktree"] == f".jpfs/local/worktrees/{conv_id.replace('/', '+')}"
        assert git(project, "merge-base", "--is-ancestor", meta["base"], "main") == ""
        assert git(project, "show", f"{meta['branch']}:shared.txt").startswith(f"{word}\n")
        assert (project / meta["worktree"] / f"notes/{word}.txt").is_file()
        # The record stays in the shared tree: the sparse worktree has no conversations.
        assert not (project / meta["worktree"] / "conversations").exists()
        log = git(project, "log", "-1", "--format=%an%n%B", meta["branch"])
        assert log.startswith("impl (jpfs agent)\n")
        assert f"Jpfs-Conversation: {conv_id}" in log and "Jpfs-Event: edit" in log
    assert (project / "shared.txt").read_text(encoding="utf-8") == "line1\nline2\nline3\n"
    assert_user_work_intact(project)

    # The status mail carries the branch's diff stat.
    inbox = list((ws.conv_root / lead / "inbox").glob("*.md"))
    mails = "".join(p.read_text(encoding="utf-8") for p in inbox)
    assert "shared.txt" in mails and "notes/alpha.txt" in mails

    # The caller compares the candidates...
    stat = tool_call(project, lead, "branch_diff", {"id": alpha, "stat": True})
    assert "shared.txt" in stat and "notes/alpha.txt" in stat
    assert "+beta" in cli("diff", beta).stdout

    # ...merges one (tool, caller only)...
    merged = tool_call(project, lead, "merge", {"id": alpha})
    assert merged.startswith(f"merged {alpha} (jpfs/{alpha}/_) into main")
    assert (project / "shared.txt").read_text(encoding="utf-8") == "alpha\nline2\nline3\n"
    assert (project / "notes" / "alpha.txt").read_text(encoding="utf-8") == "by alpha\n"
    assert_user_work_intact(project)
    head = git(project, "rev-parse", "HEAD").strip()
    merge_commit = Conversation(ws.conv_root, alpha).meta()["merged"]
    assert (
        git(project, "rev-parse", f"{merge_commit}^2").strip()
        == git(project, "rev-parse", f"jpfs/{alpha}/_").strip()
    )

    # ...and sees the conflict of the other: nothing changes.
    index_before = git(project, "ls-files", "-s")
    failed = cli("merge", beta)
    assert failed.code == 1
    assert "conflict in shared.txt" in failed.stderr and "nothing was changed" in failed.stderr
    assert git(project, "rev-parse", "HEAD").strip() == head
    assert git(project, "ls-files", "-s") == index_before
    assert (project / "shared.txt").read_text(encoding="utf-8") == "alpha\nline2\nline3\n"
    assert_user_work_intact(project)

    # The loser is discarded; gc removes the merged worktree; the records stay.
    assert cli("discard", beta).stdout.split() == [beta]
    assert git(project, "branch", "--list", f"jpfs/{beta}/_") == ""
    assert Conversation(ws.conv_root, beta).meta()["discarded"]
    gc = cli("gc")
    assert f"removed worktree {alpha} (merged)" in gc.stdout
    worktrees = git(project, "worktree", "list", "--porcelain")
    # The main work tree and the record's (conversations/, branch jpfs-record).
    assert worktrees.count("worktree ") == 2 and "prunable" not in worktrees
    assert "branch refs/heads/jpfs-record" in worktrees
    assert Conversation(ws.conv_root, alpha).exists() and Conversation(ws.conv_root, beta).exists()

    graph = git(project, "log", "--graph", "--all", "--format=%s")
    assert f"merge jpfs/{alpha}/_ into main" in graph
    assert "|\\" in graph  # the join
    assert_user_work_intact(project)
    # The record holds both children's histories, the merge and the discard included.
    for conv_id, last in (
        (alpha, f"merged into main as {merge_commit[:12]}"),
        (beta, f"discard jpfs/{beta}/_"),
    ):
        assert rgit(project, "log", "-1", "--format=%s", "--", conv_id) == (
            f"jpfs({conv_id}): {last}\n"
        )
        # Parallel children's steps may share a group commit, which lists them all.
        history = rgit(project, "log", "--format=%B", "--", conv_id)
        assert f"jpfs({conv_id}): task\n" in history
        assert f"jpfs({conv_id}): tool fs_modify_file\n" in history
    assert rgit(project, "status", "--porcelain") == ""


def test_nested_fork_merges_into_parent_branch_then_main(
    project: Path, cli: Callable[..., Result]
) -> None:
    dirty_user_work(project)
    top = run_top(cli, "top")
    (outer,) = children_by_task(project, top).values()
    (inner,) = children_by_task(project, outer).values()
    ws = open_workspace(project)
    outer_branch, inner_branch = f"jpfs/{outer}/_", f"jpfs/{inner}/_"
    # Branches of branches: the ref tree mirrors the conversation tree.
    assert Conversation(ws.conv_root, inner).meta()["branch"] == inner_branch
    assert inner_branch.startswith(outer_branch.removesuffix("_"))
    inner_base = Conversation(ws.conv_root, inner).meta()["base"]
    assert git(project, "show", f"{inner_base}:outer.txt") == "outer\n"  # forked from outer
    assert git(project, "show", f"{inner_branch}:shared.txt").startswith("gamma\n")
    assert git(project, "show", f"{outer_branch}:shared.txt").startswith("line1\n")

    # Scope: the outer agent may merge its child, never itself or a stranger.
    with pytest.raises(Exception, match="outside the allowed subtree"):
        tool_call(project, inner, "merge", {"id": outer})
    result = tool_call(project, outer, "merge", {"id": inner})
    assert result.startswith(f"merged {inner} ({inner_branch}) into {outer_branch}")
    outer_wt = project / str(Conversation(ws.conv_root, outer).meta()["worktree"])
    assert (outer_wt / "shared.txt").read_text(encoding="utf-8").startswith("gamma\n")
    assert git(outer_wt, "status", "--porcelain") == ""
    assert (project / "shared.txt").read_text(encoding="utf-8").startswith("line1\n")
    assert_user_work_intact(project)

    # Then the parent, with its child's work, into the top branch.
    merged = cli("merge", outer)
    assert merged.code == 0, merged.stderr
    assert (project / "shared.txt").read_text(encoding="utf-8") == "gamma\nline2\nline3\n"
    assert (project / "outer.txt").read_text(encoding="utf-8") == "outer\n"
    assert (project / "notes" / "gamma.txt").is_file()
    assert_user_work_intact(project)

    # git log --graph --all shows both forks and both joins.
    subjects = git(project, "log", "--all", "--merges", "--format=%s").splitlines()
    assert f"jpfs({outer}): merge {outer_branch} into main" in subjects
    assert f"jpfs({inner}): merge {inner_branch} into {outer_branch}" in subjects
    top_merge = merged.stdout.strip()
    assert git(project, "merge-base", "--is-ancestor", inner_branch, top_merge) == ""
    assert diffs.diffstat(ws, outer) == "no changes"  # everything is merged


def test_merge_never_overwrites_uncommitted_changes(ws: Path, cli: Callable[..., Result]) -> None:
    from jpfs.services.conversations import lifecycle

    write_profile(ws, "impl", IMPL, allowed=True)
    workspace = open_workspace(ws)
    conv = lifecycle.new_conversation(workspace, "fix", agent="impl")
    wt = branches.files_root(workspace, conv)
    (wt / "README.md").write_text("# project, fixed\n", encoding="utf-8")
    (wt / "new.txt").write_text("new file\n", encoding="utf-8")
    assert branches.commit_edits(workspace, "fix") is not None
    head = git(ws, "rev-parse", "HEAD")

    cases: list[tuple[Callable[[], object], Callable[[], object], str]] = [
        (  # modified, not staged
            lambda: (ws / "README.md").write_text("mine\n", encoding="utf-8"),
            lambda: user_git(ws, "checkout", "README.md"),
            "README.md",
        ),
        (  # staged
            lambda: (
                (ws / "README.md").write_text("mine\n", encoding="utf-8"),
                user_git(ws, "add", "README.md"),
            ),
            lambda: user_git(ws, "reset", "-q", "--hard"),
            "README.md",
        ),
        (  # an untracked file where the merge would create one
            lambda: (ws / "new.txt").write_text("mine\n", encoding="utf-8"),
            lambda: (ws / "new.txt").unlink(),
            "new.txt",
        ),
    ]
    for make, undo, path in cases:
        make()
        before = (ws / path).read_text(encoding="utf-8")
        index = git(ws, "ls-files", "-s")
        result = cli("merge", "fix")
        assert result.code == 1 and "would overwrite uncommitted changes" in result.stderr
        assert path in result.stderr
        assert (ws / path).read_text(encoding="utf-8") == before
        assert git(ws, "ls-files", "-s") == index
        assert git(ws, "rev-parse", "HEAD") == head
        undo()
    ok = cli("merge", "fix")
    assert ok.code == 0, ok.stderr
    assert (ws / "README.md").read_text(encoding="utf-8") == "# project, fixed\n"
    assert git(ws, "status", "--porcelain", "-uno") == ""
    assert git(ws, "log", "--format=%H", "HEAD", "--", "conversations") == ""
