from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import tomlkit

from jpfs.core.tool import ToolContext, check_arguments
from jpfs.errors import ProfileError, ToolError
from jpfs.tools.command import make_command_tool, parse_command_tools

ARGV_SCRIPT = "import json, sys\nprint(json.dumps(sys.argv[1:]))\n"
ENV_SCRIPT = (
    "import json, os\n"
    "print(json.dumps({k: os.environ.get(k) for k in ('MY_FILTER', 'JPFS_TEST_SECRET')}))\n"
)
# Starts a grandchild in the same process group, records both pids, then sleeps.
SLEEP_SCRIPT = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
with open("pids.tmp", "w") as fh:
    fh.write(f"{os.getpid()} {child.pid}")
os.rename("pids.tmp", "pids")
print("started", flush=True)
time.sleep(60)
"""
FLOOD_SCRIPT = "import sys\nsys.stdout.write('A' * 5000 + 'Z' * 5000)\nsys.exit(3)\n"


def wait_for(cond: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        threading.Event().wait(0.01)
    return cond()


def is_dead(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"  # an unreaped zombie
    except FileNotFoundError:
        return True


def tool_from(toml: str, script: str, root: Path) -> Any:
    (root / "prog.py").write_text(script)
    specs = parse_command_tools(tomlkit.parse(toml))
    return make_command_tool(specs[0])


def ctx_for(root: Path) -> ToolContext:
    return ToolContext(workspace_root=root, conversation="", files_root=root)


def run(tool: Any, ctx: ToolContext, **args: Any) -> str:
    return str(tool.run(ctx, check_arguments(tool, args)))


ECHO = f"""
[[tools.command]]
name = "echo_args"
description = "Print the arguments"
program = "{sys.executable}"
args = ["prog.py", "{{value}}", "--x={{opt}}", ["-k", "{{opt}}"], "{{{{literal}}}}"]
[tools.command.parameters.value]
type = "string"
description = "anything"
[tools.command.parameters.opt]
type = "string"
required = false
"""


@pytest.mark.parametrize(
    "value", ["; touch pwned", "$(touch pwned)", "`id`", "| cat /etc/passwd", "a b\nc", "*"]
)
def test_shell_metacharacters_are_literal(tmp_path: Path, value: str) -> None:
    tool = tool_from(ECHO, ARGV_SCRIPT, tmp_path)
    out = run(tool, ctx_for(tmp_path), value=value)
    lines = out.split("\n", 2)
    assert lines[1] == "exit status 0"
    assert json.loads(lines[2]) == [value, "{literal}"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prog.py"]


def test_optional_param_elements_and_groups(tmp_path: Path) -> None:
    tool = tool_from(ECHO, ARGV_SCRIPT, tmp_path)
    out = run(tool, ctx_for(tmp_path), value="v", opt="o p")
    assert json.loads(out.split("\n", 2)[2]) == ["v", "--x=o p", "-k", "o p", "{literal}"]
    assert out.startswith("$ ")
    assert tool.input_schema["required"] == ["value"]
    assert tool.input_schema["additionalProperties"] is False


def test_leading_dash_refused(tmp_path: Path) -> None:
    tool = tool_from(ECHO, ARGV_SCRIPT, tmp_path)
    with pytest.raises(ToolError, match="may not start with '-'"):
        run(tool, ctx_for(tmp_path), value="--rootdir=/")


ENUM = f"""
[[tools.command]]
name = "pick"
description = "Pick a package"
program = "{sys.executable}"
args = ["prog.py", "{{package}}", "{{n}}", "{{flag}}"]
[tools.command.parameters.package]
type = "string"
enum = ["core", "cli"]
[tools.command.parameters.n]
type = "integer"
[tools.command.parameters.flag]
type = "boolean"
"""


def test_types_and_enum(tmp_path: Path) -> None:
    tool = tool_from(ENUM, ARGV_SCRIPT, tmp_path)
    assert tool.input_schema["properties"]["package"]["enum"] == ["core", "cli"]
    ctx = ctx_for(tmp_path)
    out = run(tool, ctx, package="cli", n=3, flag=True)
    assert json.loads(out.split("\n", 2)[2]) == ["cli", "3", "true"]
    with pytest.raises(ToolError, match="must be one of"):
        run(tool, ctx, package="../etc", n=3, flag=True)
    with pytest.raises(ToolError, match="type integer"):
        tool.run(ctx, {"package": "cli", "n": True, "flag": True})
    with pytest.raises(ToolError, match="missing required"):
        tool.run(ctx, {"package": "cli", "n": 1})


def test_env_parameter_and_secrets_not_inherited(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JPFS_TEST_SECRET", "sk-123")
    toml = f"""
[[tools.command]]
name = "show_env"
description = "Show env"
program = "{sys.executable}"
args = ["prog.py"]
env = {{ MY_FILTER = "{{filter}}" }}
[tools.command.parameters.filter]
type = "string"
required = false
"""
    tool = tool_from(toml, ENV_SCRIPT, tmp_path)
    ctx = ctx_for(tmp_path)
    seen = json.loads(run(tool, ctx, filter="x and $y").split("\n", 2)[2])
    assert seen == {"MY_FILTER": "x and $y", "JPFS_TEST_SECRET": None}
    assert json.loads(run(tool, ctx).split("\n", 2)[2])["MY_FILTER"] is None


def test_timeout_kills(tmp_path: Path) -> None:
    toml = f"""
[[tools.command]]
name = "sleepy"
description = "Sleep"
program = "{sys.executable}"
args = ["prog.py"]
timeout = 0.5
"""
    tool = tool_from(toml, SLEEP_SCRIPT, tmp_path)
    started = time.monotonic()
    out = run(tool, ctx_for(tmp_path))
    assert "timed out after 0.5 s" in out and "started" in out
    assert time.monotonic() - started < 3
    pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
    assert wait_for(lambda: all(is_dead(p) for p in pids))


def test_cancel_kills_process_group_promptly(tmp_path: Path) -> None:
    toml = f"""
[[tools.command]]
name = "sleepy"
description = "Sleep"
program = "{sys.executable}"
args = ["prog.py"]
timeout = 30
"""
    tool = tool_from(toml, SLEEP_SCRIPT, tmp_path)
    ctx = ctx_for(tmp_path)
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["out"] = run(tool, ctx)
        except ToolError as exc:
            result["error"] = exc
            result["at"] = time.monotonic()

    thread = threading.Thread(target=target)
    thread.start()
    assert wait_for(lambda: (tmp_path / "pids").exists())
    pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
    cancelled_at = time.monotonic()
    ctx.cancel.set()
    thread.join(timeout=5)
    assert not thread.is_alive()
    assert str(result["error"]) == "cancelled"
    assert result["at"] - cancelled_at < 3.0  # promptly (room for a loaded machine)
    assert wait_for(lambda: all(is_dead(p) for p in pids), timeout=2)


def test_output_truncated_and_exit_status(tmp_path: Path) -> None:
    toml = f"""
[[tools.command]]
name = "flood"
description = "Lots of output"
program = "{sys.executable}"
args = ["prog.py"]
max_output = 1000
"""
    tool = tool_from(toml, FLOOD_SCRIPT, tmp_path)
    out = run(tool, ctx_for(tmp_path))
    assert "exit status 3" in out
    assert "[truncated: 9,000 of 10,000 bytes of output omitted here]" in out
    assert "A" * 500 in out and "Z" * 500 in out and "A" * 501 not in out


def test_missing_program(tmp_path: Path) -> None:
    toml = """
[[tools.command]]
name = "nope"
description = "Missing"
program = "definitely-not-a-real-program-xyz"
"""
    tool = tool_from(toml, "", tmp_path)
    with pytest.raises(ToolError, match="not found"):
        run(tool, ctx_for(tmp_path))


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"description": "d", "program": "p"}, "'name' is required"),
        ({"name": "bad name", "description": "d", "program": "p"}, "'name' must be"),
        ({"name": "t", "description": "d"}, r"\(t\): 'program' is required"),
        ({"name": "t", "description": "d", "program": "p", "arg": []}, "'arg' is not a known"),
        ({"name": "t", "description": "d", "program": "p", "args": "-q"}, "'args' must be"),
        ({"name": "t", "description": "d", "program": "p", "args": ["{x}"]}, "undeclared"),
        ({"name": "t", "description": "d", "program": "p", "args": ["{x"]}, "stray brace"),
        ({"name": "t", "description": "d", "program": "p", "timeout": -1}, "'timeout'"),
        (
            {
                "name": "t",
                "description": "d",
                "program": "p",
                "args": ["{x}"],
                "parameters": {"x": {"type": "list"}},
            },
            r"'parameters.x.type'",
        ),
        (
            {
                "name": "t",
                "description": "d",
                "program": "p",
                "args": ["{x}"],
                "parameters": {"x": {"type": "integer", "enum": ["a"]}},
            },
            r"'parameters.x.enum'",
        ),
        (
            {
                "name": "t",
                "description": "d",
                "program": "p",
                "parameters": {"x": {"type": "string"}},
            },
            "not used",
        ),
    ],
)
def test_profile_errors(entry: dict[str, Any], message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        parse_command_tools({"tools": {"command": [entry]}})


def test_duplicate_names_and_tools_table() -> None:
    entry = {"name": "t", "description": "d", "program": "p"}
    assert [s.name for s in parse_command_tools({"command": [entry]})] == ["t"]
    with pytest.raises(ProfileError, match="duplicate"):
        parse_command_tools({"tools": {"command": [entry, entry]}})
    assert parse_command_tools({"model": "m"}) == []
