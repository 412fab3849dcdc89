"""Hostile input to ``jpfs blame`` and ``jp_blame``: one clear line, nothing written.

A rev is handed to git, so one that starts with ``-`` would be an option (git blame's
``--output=FILE`` writes a file); paths name things that are not files of a work tree
(a directory, a FIFO, ``.git``), or names that are not UTF-8.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from jpfs.core.tool import ToolContext, call_tool
from jpfs.core.workspace import open_workspace
from jpfs.tools.provenance import TOOLS
from tests.conftest import Result, git


@pytest.fixture
def project(ws: Path) -> Path:
    (ws / "notes.txt").write_text("one\ntwo\n", encoding="utf-8")
    (ws / "data.bin").write_bytes(b"\x00\x01binary\x00\n")
    (ws / os.fsdecode(b"caf\xe9.txt")).write_text("latin-1 name\n", encoding="utf-8")
    git(ws, "add", "notes.txt", "data.bin", os.fsdecode(b"caf\xe9.txt"))
    git(ws, "commit", "-q", "-m", "files")
    return ws


def test_a_rev_that_is_an_option_is_refused_and_writes_nothing(
    project: Path, cli: Callable[..., Result], tmp_path: Path
) -> None:
    written = tmp_path / "written-by-git"
    for rev in (f"--output={written}", "-L1,1"):
        result = cli("blame", "notes.txt", "--rev", rev)
        assert result.code == 2, result
        assert result.stderr.count("\n") == 1 and "may not start with '-'" in result.stderr
    assert not written.exists()
    # The tool refuses it the same way, in the service.
    ctx = ToolContext(project, "", project, workspace=open_workspace(project))
    text, is_error = call_tool(
        TOOLS,
        ctx,
        {"name": "jp_blame", "input": {"path": "notes.txt", "rev": f"--output={written}"}},
    )
    assert is_error and "may not start with '-'" in text
    assert not written.exists()


@pytest.mark.parametrize(
    ("name", "said"),
    [
        (".git/config", "inside .git"),
        ("subdir", "a directory"),
        ("pipe", "not a regular file"),
        ("missing.txt", "no such file"),
    ],
)
def test_what_is_not_a_file_of_the_work_tree(
    project: Path, cli: Callable[..., Result], name: str, said: str
) -> None:
    (project / "subdir").mkdir()
    os.mkfifo(project / "pipe")
    result = cli("blame", name)
    assert result.code == 1, result
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and said in result.stderr, result.stderr


def test_binary_files_and_names_that_are_not_utf8(
    project: Path, cli: Callable[..., Result]
) -> None:
    binary = cli("blame", "data.bin")
    assert binary.code == 0, binary.stderr
    assert "binary" in binary.stdout
    odd = cli("blame", os.fsdecode(b"caf\xe9.txt"), "--format", "json")
    assert odd.code == 0, odd.stderr
    assert '"line": 1' in odd.stdout and "latin-1 name" in odd.stdout
