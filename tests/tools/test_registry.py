"""The registry (jpfs.tools.registry): an agent gets exactly the tools its profile
lists, each with one strict schema; an unknown name is refused, not skipped."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from jpfs.errors import ProfileError
from jpfs.tools import branches, conversation, fs, lifecycle, provenance
from jpfs.tools.registry import build_tools, catalog

ECHO_TOOL = """
name = "x"
[tools]
allow = ["mail_check", "fs_read_file"]
[[tools.command]]
name = "echo_it"
description = "Print a word"
program = "echo"
args = ["{word}"]
[tools.command.parameters.word]
type = "string"
description = "the word"
"""


def test_an_agent_gets_its_allow_list_in_order_then_its_command_tools() -> None:
    tools = build_tools(tomllib.loads(ECHO_TOOL))
    assert list(tools) == ["mail_check", "fs_read_file", "echo_it"]
    assert tools["fs_read_file"] is fs.FS_TOOLS["fs_read_file"]
    assert tools["echo_it"].input_schema["required"] == ["word"]


def test_a_profile_without_tools_gets_none() -> None:
    assert build_tools({"name": "x"}) == {}
    assert build_tools({"name": "x", "tools": {"allow": []}}) == {}


def test_an_unknown_tool_is_refused_with_its_name_and_the_profiles() -> None:
    with pytest.raises(ProfileError, match=r"profile 'x' lists unknown tool 'fs_delete_all'"):
        build_tools({"name": "x", "tools": {"allow": ["fs_read_file", "fs_delete_all"]}})


def test_an_agent_without_tools_imports_no_tool_module() -> None:
    # Their imports (re2, the command parser, the services they call) would be paid by
    # every run of an agent that uses no tool.
    script = (
        "import sys\n"
        "from jpfs.tools.registry import build_tools\n"
        "assert build_tools({'name': 'x'}) == {}\n"
        "print(sorted(m for m in sys.modules if m.startswith('jpfs.tools.') or m == 're2'))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "['jpfs.tools.registry']"


def test_the_catalog_is_every_modules_tools_and_each_schema_is_strict(tmp_path: Path) -> None:
    config = {"tools": {"agents": ["helper"]}}
    everything = catalog(config, tmp_path)
    expected = {
        *conversation.build(config, tmp_path),
        *lifecycle.build(config),
        *fs.FS_TOOLS,
        *branches.TOOLS,
        *provenance.TOOLS,
    }
    assert set(everything) == expected
    for name, tool in everything.items():
        schema = tool.input_schema
        assert tool.name == name
        assert schema["type"] == "object" and schema["additionalProperties"] is False, name
        assert set(schema.get("required", [])) <= set(schema["properties"]), name
        assert tool.description.strip(), name
