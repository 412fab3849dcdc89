"""Shell completion, as bash users install it (typer's)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tests.conftest import Result

Cli = Callable[..., Result]

SCRIPT = """
source <(jpfs --show-completion bash)
COMP_WORDS=({words})
COMP_CWORD={cword}
_jpfs_completion jpfs
printf '%s\\n' "${{COMPREPLY[@]}}"
"""


def complete(ws: Path, *words: str) -> list[str]:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    script = SCRIPT.format(words=" ".join(words), cword=len(words) - 1)
    done = subprocess.run(
        ["bash", "-c", script], cwd=ws, env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_bash_completes_commands_subcommands_and_options(ws: Path) -> None:
    assert sorted(complete(ws, "jpfs", "tr")) == ["tree", "trust"]
    assert complete(ws, "jpfs", "conversation", "l") == ["ls"]
    assert "--format" in complete(ws, "jpfs", "tree", "--")
    assert sorted(complete(ws, "jpfs", "daemon", "st")) == ["start", "status", "stop"]


def protocol(ws: Path, shell: str, line: str) -> list[str]:
    """What ``jpfs`` answers its shell's completion script for ``line`` (click's
    protocol as typer's scripts speak it: zsh and fish send the words typed so far)."""
    env = {**os.environ, "_JPFS_COMPLETE": f"complete_{shell}", "_TYPER_COMPLETE_ARGS": line}
    env["_TYPER_COMPLETE_FISH_ACTION"] = "get-args"
    jpfs = str(Path(sys.executable).parent / "jpfs")
    done = subprocess.run([jpfs], cwd=ws, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    if shell == "zsh":  # _arguments '*: :(("value":"help" ...))'
        return re.findall(r'"((?:[^"\\]|\\.)*?)(?:":"(?:[^"\\]|\\.)*)?"(?=\s|\)\))', done.stdout)
    return [
        line.split("\t")[0] for line in done.stdout.splitlines() if line
    ]  # fish: value<TAB>help


def test_the_shells_complete_conversation_ids_level_by_level_inside_root_id(
    ws: Path, cli: Cli
) -> None:
    for name in ("alpha", "beta", "betamax"):
        assert cli("c", "new", "--no-activate", name).code == 0
    kid = cli("c", "new", "--no-activate", "--parent", "alpha").stdout.strip()
    other = cli("c", "new", "--no-activate", "--parent", "beta").stdout.strip()
    assert complete(ws, "jpfs", "c", "print", "") == ["alpha", "beta", "betamax"]
    assert complete(ws, "jpfs", "c", "print", "bet") == ["beta", "betamax"]
    # A level below: under the parent as typed (a prefix is kept, it reads back alike).
    assert complete(ws, "jpfs", "kill", "alpha/") == [kid]
    assert complete(ws, "jpfs", "mail", "send", "al/c") == ["al/" + kid.split("/")[1]]
    for shell in ("zsh", "fish"):
        assert protocol(ws, shell, "jpfs c show be") == ["beta", "betamax"], shell
        assert protocol(ws, shell, "jpfs log beta/") == [other], shell
        # Under --root-id, before or after the subcommand: only its descendants.
        assert protocol(ws, shell, "jpfs --root-id alpha c print ") == [kid], shell
        assert protocol(ws, shell, "jpfs c print --root-id alpha ") == [kid], shell
        assert protocol(ws, shell, "jpfs --root-id alpha tree be") == [], shell
        assert protocol(ws, shell, "jpfs --root-id alpha c print beta/") == [], shell
    assert complete(ws, "jpfs", "--root-id", "alpha", "c", "print", "") == [kid]
    # --root-id itself completes ids.
    assert complete(ws, "jpfs", "tree", "--root-id", "al") == ["alpha"]


def test_the_shells_complete_agent_names_and_config_keys(ws: Path) -> None:
    agents = sorted(p.stem for p in (ws / ".jpfs/agents").glob("*.toml"))
    assert "researcher" in agents
    assert complete(ws, "jpfs", "c", "new", "--agent", "") == agents
    assert complete(ws, "jpfs", "query", "--agent", "res") == ["researcher"]
    assert "researcher" in complete(ws, "jpfs", "c", "set-agent", "x", "")
    assert complete(ws, "jpfs", "config", "get", "daemon.max") == ["daemon.max_agents"]
    assert "sync.remote" in complete(ws, "jpfs", "config", "set", "sync.")
    for shell in ("zsh", "fish"):
        assert protocol(ws, shell, "jpfs c new --agent res") == ["researcher"], shell
        assert protocol(ws, shell, "jpfs config get record.") == ["record.branch"], shell
    # Outside a workspace ids and agents complete nothing, and nothing fails.
    outside = ws.parent / "elsewhere"
    outside.mkdir()
    assert complete(outside, "jpfs", "c", "print", "") == []
    assert complete(outside, "jpfs", "query", "--agent", "") == []
