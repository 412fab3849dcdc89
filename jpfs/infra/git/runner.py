"""Running the git CLI: argv lists only, errors translated to :class:`GitError` once.

The one way jpfs runs git as a program (the committer writes objects, the index and
refs itself; :mod:`jpfs.infra.git.refs` reads refs in process).
"""

from __future__ import annotations

import os
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
    """``git args`` in ``cwd``, its output as text; ``env`` adds to (or overrides) this
    process's environment. With ``check``, an exit status not in ``ok`` is a
    :class:`GitError` naming git's reason (:func:`complaint`)."""
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
            env={**os.environ, **_MESSAGES_IN_ENGLISH, **(env or {})},
        )
    except OSError as exc:
        raise _not_started(cwd, args, exc) from exc
    if check and proc.returncode not in ok:
        raise failure(args, proc.returncode, proc.stderr or proc.stdout)
    return proc


def run_bytes(
    cwd: Path,
    args: Sequence[str],
    *,
    check: bool = True,
    input: bytes | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """:func:`run` for output that is data, not text (object contents, NUL-separated
    lists), and input that is bytes."""
    try:
        proc = subprocess.run(
            ["git", *args],
            cwd=cwd,
            capture_output=True,
            input=input if input is not None else b"",
            check=False,
            timeout=timeout,
            env={**os.environ, **_MESSAGES_IN_ENGLISH, **(env or {})},
        )
    except OSError as exc:
        raise _not_started(cwd, args, exc) from exc
    except subprocess.TimeoutExpired as exc:
        raise GitError(f"git {args[0]} took longer than {timeout:g}s") from exc
    if check and proc.returncode != 0:
        raise failure(args, proc.returncode, proc.stderr or proc.stdout)
    return proc


def failure(args: Sequence[str], status: int, said: str | bytes) -> GitError:
    """The :class:`GitError` for git ``args`` that exited with ``status`` having said
    ``said`` (its stderr, else its stdout): the one wording of a failed git command, for
    callers that run git unchecked to look at what it said first."""
    return GitError(f"git {_command(args)} failed: {complaint(said) or f'exit status {status}'}")


def complaint(said: str | bytes, *, first: bool = False) -> str:
    """git's reason in ``said``: its ``fatal:`` / ``error:`` lines, without those tags,
    joined by "; " (``first``: its first line only); "" when git said nothing.

    Lines that only say a connection ended (``the remote end hung up unexpectedly``,
    ``Could not read from remote repository.``) are echoes, not reasons: the reason is
    the other tagged line (``couldn't find remote ref ...``), or, when there is none,
    what the transport said before them (ssh's ``Permission denied (publickey).``).
    Untagged lines after the reason are advice, left out; with no tagged line at all,
    the last line is the reason (a program other than git said it)."""
    text = os.fsdecode(said) if isinstance(said, bytes) else said
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    if first:
        return _untag(lines[0])
    tagged = [n for n, line in enumerate(lines) if line.startswith(_TAGS)]
    if not tagged:
        return _untag(lines[-1])
    reasons = [_untag(lines[n]) for n in tagged if _untag(lines[n]) not in _ECHOES]
    if not reasons:
        said_before = [line for line in lines[: tagged[0]] if not line.startswith(_NOISE)]
        reasons = said_before[-2:] or [_untag(lines[tagged[0]])]
    return "; ".join(dict.fromkeys(reasons))


_TAGS = ("fatal: ", "error: ")
_ECHOES = {
    "the remote end hung up unexpectedly",
    "Could not read from remote repository.",
    "early EOF",
    "expected flush after ref listing",
}
# What ssh or git print that is never the reason (a host key added, git's hints).
_NOISE = ("Warning: Permanently added", "hint: ")


def _untag(line: str) -> str:
    for tag in _TAGS:
        if line.startswith(tag):
            return line.removeprefix(tag)
    return line


def _command(args: Sequence[str]) -> str:
    """The git command ``args`` run, past the ``-c key=value`` settings before it."""
    at = 0
    while at + 1 < len(args) and args[at] == "-c":
        at += 2
    return args[at] if at < len(args) else ""


# Callers read git's messages (a busy index.lock, the paths a checkout would overwrite)
# and pass them on in errors: the C locale keeps them the same whatever the user's.
_MESSAGES_IN_ENGLISH = {"LC_ALL": "C", "LANGUAGE": "C"}
# :func:`start` runs searches: ``git grep -P`` reads patterns in the character set of
# LC_ALL / LC_CTYPE (its UTF-8 mode, what ``.`` and ``-i`` match), which must stay the
# user's, so only the messages are set: LANGUAGE=C outranks every locale variable for
# them (GNU gettext), LC_MESSAGES=C serves a gettext that reads no LANGUAGE.
_ONLY_MESSAGES_IN_ENGLISH = {"LANGUAGE": "C", "LC_MESSAGES": "C"}


def _not_started(cwd: Path, args: Sequence[str], exc: OSError) -> GitError:
    if isinstance(exc, FileNotFoundError) and exc.filename == "git":
        return GitError("git is not installed or not on PATH")
    return GitError(f"git {args[0]} failed to start in {cwd}: {exc}")


def output(cwd: Path, *args: str) -> str:
    """What ``git args`` printed, stripped (a failure is a :class:`GitError`)."""
    return run(cwd, args).stdout.strip()


def start(cwd: Path, args: Sequence[str]) -> subprocess.Popen[bytes]:
    """git ``args`` running beside the caller, its output piped as bytes; end it with
    ``communicate`` and :func:`stop` (a failure: :func:`failure`)."""
    try:
        return subprocess.Popen(
            ["git", *args],
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, **_ONLY_MESSAGES_IN_ENGLISH},
        )
    except OSError as exc:
        raise _not_started(cwd, args, exc) from exc


def stop(procs: Iterable[subprocess.Popen[bytes]]) -> None:
    """Kill and reap those of ``procs`` still running (the caller gave up on them)."""
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
