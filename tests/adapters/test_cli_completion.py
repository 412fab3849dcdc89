"""Shell completion, as bash users install it (typer's)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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
