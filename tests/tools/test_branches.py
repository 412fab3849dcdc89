"""``merge``, ``branch_diff`` and ``branch_discard`` (jpfs.tools.branches), called as the
runtime calls them for a caller whose sub-agents work on branches. Best-of-N end to end,
nested branches and the user's uncommitted work are in tests/services/forks/."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from jpfs import api
from jpfs.core.conversation import Conversation
from jpfs.core.tool import check_arguments
from jpfs.core.workspace import Workspace, open_workspace
from jpfs.errors import JpfsError, ScopeError, ToolError
from jpfs.services.conversations.lifecycle import new_conversation
from jpfs.tools import branches
from jpfs.tools.registry import catalog
from tests.conftest import git, write_profile

IMPL = """
model = "script"
provider = "script"
description = "writes its task into shared.txt on its branch"
workspace = "branch"
[tools]
allow = ["fs_write_file"]
write = ["**"]
[[script.turns]]
text = "writing"
tool_calls = [{ name = "fs_write_file", input = { path = "shared.txt", content = "{task}\\n" } }]
[[script.turns]]
text = "wrote {task}"
"""

LEAD = """
model = "script"
provider = "script"
[tools]
allow = ["jp_query", "merge", "branch_diff", "branch_discard"]
agents = ["impl"]
[[script.turns]]
text = "lead"
"""


@pytest.fixture
def team(ws: Path) -> Workspace:
    """``lead`` (may start branch implementers) and a stranger, ``other``; shared.txt
    committed on main."""
    (ws / "shared.txt").write_text("original\n", encoding="utf-8")
    git(ws, "add", "shared.txt")
    git(ws, "commit", "-q", "-m", "shared.txt")
    write_profile(ws, "lead", LEAD, allowed=True)
    write_profile(ws, "impl", IMPL, allowed=True)
    w = open_workspace(ws)
    new_conversation(w, "lead", agent="lead")
    new_conversation(w, "other", agent="lead")
    return w


def call(w: Workspace, name: str, caller: str = "lead", **args: Any) -> str:
    conv = Conversation(w.conv_root, caller)
    tool = catalog(conv.config, w.agents_dir)[name]
    return tool.run(api.runner(w).tool_context(conv), check_arguments(tool, args))


def implementer(w: Workspace, task: str) -> str:
    """A branch sub-agent of lead that wrote ``task`` into shared.txt; its id."""
    answer = call(w, "jp_query", config="impl", query=task)
    found = re.match(r'<response conversation_id="([^"]+)">', answer)
    assert found and f"wrote {task}" in answer, answer
    return found.group(1)


def test_each_tool_takes_one_descendants_id() -> None:
    for tool in branches.TOOLS.values():
        assert tool.input_schema["required"] == ["id"]
        with pytest.raises(ToolError, match="id"):
            check_arguments(tool, {"id": ""})
    with pytest.raises(ToolError, match="stat"):
        check_arguments(branches.TOOLS["branch_diff"], {"id": "x", "stat": "yes"})


def test_diff_then_merge_a_branch_and_discard_another(team: Workspace) -> None:
    alpha, beta = implementer(team, "alpha"), implementer(team, "beta")
    diff = call(team, "branch_diff", id=alpha)
    assert "-original" in diff and "+alpha" in diff
    stat = call(team, "branch_diff", id=alpha, stat=True)
    assert "shared.txt" in stat and "+alpha" not in stat
    merged = call(team, "merge", id=alpha)
    assert merged.startswith(f"merged {alpha} (") and "shared.txt" in merged
    assert (team.root / "shared.txt").read_text(encoding="utf-8") == "alpha\n"
    # The calling agent authors its merge; the user stays the committer.
    author = git(team.root, "log", "-1", "--format=%an <%ae>|%cn").strip()
    assert author == "lead (jpfs agent) <lead@agents.jpfs.invalid>|Test User"
    assert call(team, "merge", id=alpha).endswith("is already merged into main")
    assert call(team, "branch_discard", id=beta) == f"discarded the branch and worktree of {beta}"
    with pytest.raises(JpfsError, match="discarded"):
        call(team, "merge", id=beta)


def test_a_branch_with_nothing_committed_says_so(team: Workspace) -> None:
    alpha = implementer(team, "alpha")
    call(team, "merge", id=alpha)
    assert call(team, "branch_diff", id=alpha) == f"{alpha}: no committed changes on its branch"


def test_only_the_callers_descendants_can_be_named(team: Workspace) -> None:
    alpha = implementer(team, "alpha")
    for name in ("merge", "branch_diff", "branch_discard"):
        with pytest.raises(ScopeError):
            call(team, name, caller="other", id=alpha)
        with pytest.raises(ScopeError):
            call(team, name, id="other")
    assert (team.root / "shared.txt").read_text(encoding="utf-8") == "original\n"
