from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from jpfs.core.tool import ToolContext, check_arguments
from jpfs.errors import ScopeError, ToolError
from jpfs.tools.fs import FS_TOOLS
from jpfs.tools.fsaccess import path_is_writable


def ctx_for(root: Path, writable: Sequence[str] = ()) -> ToolContext:
    return ToolContext(workspace_root=root, conversation="", files_root=root, writable=writable)


def call(ctx: ToolContext, name: str, **args: Any) -> str:
    tool = FS_TOOLS[name]
    return tool.run(ctx, check_arguments(tool, args))


def test_schemas_are_strict() -> None:
    assert set(FS_TOOLS) == {
        "fs_read_file",
        "fs_list_files",
        "fs_grep_files",
        "fs_write_file",
        "fs_modify_file",
    }
    for tool in FS_TOOLS.values():
        schema = tool.input_schema
        assert schema["type"] == "object" and schema["additionalProperties"] is False
        assert set(schema["required"]) <= set(schema["properties"])
        assert all(p.get("description") for p in schema["properties"].values())
        assert len(tool.description) > 80
    with pytest.raises(ToolError, match="unknown"):
        check_arguments(FS_TOOLS["fs_read_file"], {"path": "x", "bogus": 1})


@pytest.mark.parametrize(
    ("path", "patterns", "ok"),
    [
        ("files/a.md", ["files/**"], True),
        ("files/deep/a.md", ["files/**"], True),
        ("files/deep/a.md", ["files/*"], False),
        ("files/a.md", ["files/*"], True),
        ("files/deep/a.md", ["files/"], True),
        ("a.md", ["**/*.md"], True),
        ("x/y/a.md", ["**/*.md"], True),
        ("x/y/a.py", ["**/*.md"], False),
        ("src/a1.py", ["src/a[0-9].py"], True),
        ("src/ab.py", ["src/a[!b].py"], False),
        ("notes.txt", ["./notes.txt"], True),
        ("anything/at/all", ["**"], True),
        ("files/a.md", [], False),
    ],
)
def test_writable_globs(path: str, patterns: list[str], ok: bool) -> None:
    assert path_is_writable(path, patterns) is ok


def test_read_only_profile_refuses_and_creates_nothing(tmp_path: Path) -> None:
    ctx = ctx_for(tmp_path)
    with pytest.raises(ToolError, match="does not allow writing files"):
        call(ctx, "fs_write_file", path="new/x.txt", content="hi")
    (tmp_path / "f.txt").write_text("a\n")
    with pytest.raises(ToolError, match="does not allow writing files"):
        call(ctx, "fs_modify_file", path="f.txt", old="a", new="b")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.txt"]
    assert (tmp_path / "f.txt").read_text() == "a\n"


def test_write_outside_globs_refused(tmp_path: Path) -> None:
    ctx = ctx_for(tmp_path, ["files/**"])
    with pytest.raises(ToolError, match="not allowed by this agent's profile"):
        call(ctx, "fs_write_file", path="src/x.py", content="hi")
    with pytest.raises(ToolError, match="not allowed"):
        call(ctx, "fs_write_file", path="filesx/y", content="hi")
    with pytest.raises(ScopeError):
        call(ctx, "fs_write_file", path="files/../src/x.py", content="hi")
    assert list(tmp_path.iterdir()) == []


def test_git_and_local_never_writable(tmp_path: Path) -> None:
    ctx = ctx_for(tmp_path, ["**"])
    for path in (".git/config", ".GIT/hooks/pre-commit", ".jpfs/local/x", ".Jpfs/LOCAL/x"):
        with pytest.raises(ScopeError):
            call(ctx, "fs_write_file", path=path, content="pwned")
    assert list(tmp_path.iterdir()) == []


def test_round_trip(tmp_path: Path) -> None:
    ctx = ctx_for(tmp_path, ["files/**"])
    out = call(ctx, "fs_write_file", path="./files/plan.md", content="# Plan\nstep one\n")
    assert out == "created files/plan.md (16 bytes)"
    out = call(ctx, "fs_modify_file", path="files/plan.md", old="one", new="1")
    assert "replaced 1 occurrence" in out
    assert call(ctx, "fs_read_file", path="files/plan.md") == "# Plan\nstep 1"
    assert "replaced files/plan.md" in call(ctx, "fs_write_file", path="files/plan.md", content="")
    assert call(ctx, "fs_read_file", path="files/plan.md") == "[empty file]"


def test_modify_ambiguous_changes_nothing(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("x = 1\nx = 1\n")
    ctx = ctx_for(tmp_path, ["*.txt"])
    with pytest.raises(ToolError, match="occurs 2 times"):
        call(ctx, "fs_modify_file", path="f.txt", old="x = 1", new="x = 2")
    assert (tmp_path / "f.txt").read_text() == "x = 1\nx = 1\n"


def test_read_offset_limit_and_notes(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    ctx = ctx_for(tmp_path)
    out = call(ctx, "fs_read_file", path="f.txt", offset=3, limit=2)
    assert out == "line 3\nline 4\n[showing lines 3-4 of 10; pass offset=5 to read on]"
    assert call(ctx, "fs_read_file", path="f.txt", offset=9).endswith(
        "line 10\n[showing lines 9-10 of 10]"
    )
    with pytest.raises(ToolError, match="past the end"):
        call(ctx, "fs_read_file", path="f.txt", offset=11)
    with pytest.raises(ToolError, match="must be of type integer"):
        call(ctx, "fs_read_file", path="f.txt", offset="3")


def test_read_large_file_is_cut_with_note(tmp_path: Path) -> None:
    (tmp_path / "big.txt").write_text("x" * 99 + "\n" + ("y" * 99 + "\n") * 4000)
    out = call(ctx_for(tmp_path), "fs_read_file", path="big.txt")
    assert out.endswith("[showing lines 1-1,000 of 4,001; pass offset=1001 to read on]")


def test_list_output(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.py").write_text("abc")
    (tmp_path / ".git").mkdir()
    ctx = ctx_for(tmp_path)
    assert call(ctx, "fs_list_files") == "src/"
    assert call(ctx, "fs_list_files", recursive=True) == "src/\nsrc/a.py  (3 bytes)"
    for i in range(1100):
        (tmp_path / "src" / f"m{i:04}.py").write_text("")
    out = call(ctx, "fs_list_files", path="src")
    assert out.endswith("[truncated: showing 1,000 of 1,101 entries]")


def test_grep_output(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("needle\n" * 300)
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "config").write_text("needle\n")
    ctx = ctx_for(tmp_path)
    out = call(ctx, "fs_grep_files", pattern="needle")
    lines = out.splitlines()
    assert lines[0] == "a.txt:1: needle"
    assert lines[-1] == "[truncated: showing 200 of 300 matches]"
    assert ".git" not in out
    assert "no matches" in call(ctx, "fs_grep_files", pattern="haystack")


def test_symlink_escapes_refused_through_tools(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret").write_text("s3cret\n")
    (root / "out").symlink_to(outside)
    ctx = ctx_for(root, ["**"])
    for name, args in [
        ("fs_read_file", {"path": "out/secret"}),
        ("fs_list_files", {"path": "out"}),
        ("fs_grep_files", {"pattern": "s3cret", "path": "out"}),
        ("fs_write_file", {"path": "out/secret", "content": "pwned"}),
        ("fs_modify_file", {"path": "out/secret", "old": "s3cret", "new": "pwned"}),
    ]:
        with pytest.raises(ScopeError):
            call(ctx, name, **args)
    assert call(ctx, "fs_grep_files", pattern="s3cret").startswith("no matches")
    assert (outside / "secret").read_text() == "s3cret\n"
