"""Running the git CLI: argv lists only, errors translated to :class:`GitError` once."""

from __future__ import annotations

import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from jpfs.errors import GitError


def run(
    cwd: Path,
    args: Sequence[str],
    *,
    check: bool = True,
    input: str | None = None,
    ok: Sequence[int] = (0,),
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    try:
        proc = subprocess.run(
            ["git", *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            # Paths git prints are bytes: one that is not UTF-8 comes back as os.fsdecode
            # spells it (as os.scandir does), never as an error that stops the caller.
            encoding="utf-8",
            errors="surrogateescape",
            input=input,
            check=False,
            env=env,
        )
    except FileNotFoundError as exc:
        raise GitError("git is not installed or not on PATH") from exc
    if check and proc.returncode not in ok:
        err = (proc.stderr or proc.stdout).strip().splitlines()
        tail = err[-1] if err else f"exit status {proc.returncode}"
        raise GitError(f"git {args[0]} failed: {tail.removeprefix('fatal: ')}")
    return proc


def output(cwd: Path, *args: str) -> str:
    return run(cwd, args).stdout.strip()


def start(cwd: Path, args: Sequence[str]) -> subprocess.Popen[bytes]:
    """git ``args`` running beside the caller, its output piped as bytes; end it with
    ``communicate`` and :func:`stop`."""
    try:
        return subprocess.Popen(
            ["git", *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
    except FileNotFoundError as exc:
        raise GitError("git is not installed or not on PATH") from exc


def stop(procs: Iterable[subprocess.Popen[bytes]]) -> None:
    """Kill and reap those of ``procs`` still running (the caller gave up on them)."""
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
