"""The README's MCP set-up, verbatim: the ``.mcp.json`` block and the ``claude mcp add``
command line, served to the official MCP client."""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from pathlib import Path

import anyio

from tests.conftest import jpfs_subprocess

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_block(lang: str, needle: str) -> str:
    blocks = re.findall(rf"```{lang}\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    (found,) = [b for b in blocks if needle in b]
    return found


async def list_tools(command: str, args: list[str], cwd: Path) -> list[str]:
    from mcp import ClientSession, StdioServerParameters, stdio_client  # not at collection

    bin_dir = str(Path(sys.executable).parent)  # where `jpfs` is installed, as on a PATH
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    params = StdioServerParameters(command=command, args=args, cwd=cwd, env=env)
    async with (
        stdio_client(params) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        return [t.name for t in (await session.list_tools()).tools]


def test_the_readme_mcp_json_works_as_written(ws: Path, tmp_path: Path) -> None:
    config = json.loads(readme_block("json", '"mcpServers"'))
    server = config["mcpServers"]["jpfs"]
    # The README says: replace /path/to/repo with the repository's absolute path.
    args = [str(ws) if a == "/path/to/repo" else a for a in server["args"]]
    assert args[:2] == ["mcp", "-w"]  # the option after the subcommand, as written
    elsewhere = tmp_path / "client-cwd"
    elsewhere.mkdir()
    tools = anyio.run(list_tools, server["command"], args, elsewhere)
    assert "jp_query" in tools and "jp_conversation_list" in tools


def test_the_readme_claude_mcp_add_command_line_starts_the_server(ws: Path) -> None:
    line = readme_block("sh", "claude mcp add").strip()
    argv = shlex.split(line.replace('"$PWD"', shlex.quote(str(ws))))
    command, *args = argv[argv.index("--") + 1 :]
    assert command == "jpfs" and args[:2] == ["mcp", "-w"]
    tools = anyio.run(list_tools, command, args, ws)
    assert "jp_query" in tools


def test_global_options_are_taken_after_the_subcommand_too(ws: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for argv in (
        ("-w", str(ws), "conversation", "ls"),
        ("conversation", "ls", "-w", str(ws)),
        ("conversation", "ls", f"--workspace={ws}"),
        ("conversation", "ls", f"-w{ws}"),
    ):
        done = jpfs_subprocess(*argv, cwd=elsewhere)
        assert done.returncode == 0, (argv, done.stderr)
    version = jpfs_subprocess("--version", cwd=elsewhere)
    assert version.returncode == 0 and version.stdout.startswith("jpfs ")
