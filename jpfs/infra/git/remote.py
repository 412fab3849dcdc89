"""Talking to a git remote: fetch, and atomic compare-and-swap pushes.

Everything multi-machine in jpfs rests on one property of ``git push --atomic`` with
``--force-with-lease=REF:EXPECT`` per ref: the receiving side updates every ref in one
transaction, each only if it still holds the value we expect (an empty expectation
means "must not exist"), or none at all. That is the compare-and-swap a lease needs,
served by any git host, with no server of our own.

Output is read from ``--porcelain`` (stable across git versions), one status per ref.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from jpfs.errors import GitError
from jpfs.infra.git import runner

ZERO = "0" * 40
# Never prompt for credentials: a daemon has no terminal to ask on. SSH is kept from
# prompting by BatchMode, added to the user's own SSH command (jpfs.infra.git.ssh).
_QUIET_ENV = {"GIT_TERMINAL_PROMPT": "0"}
# What to set up when the remote wants what a daemon cannot give: (git's words, advice).
_ADVICE = (
    (
        "Host key verification failed",
        "the SSH host key of the remote is not known here, and jpfs never asks:"
        " connect once by hand (`git ls-remote <remote>`) to accept it, or add it to"
        " ~/.ssh/known_hosts",
    ),
    (
        "Permission denied (",
        "the SSH server refused every key offered, and jpfs never asks for a password"
        " or passphrase (BatchMode): give a key without passphrase (a deploy key) in"
        ' `git config core.sshCommand "ssh -i KEY"` or an IdentityFile in'
        " ~/.ssh/config, or load it into ssh-agent",
    ),
    (
        "terminal prompts disabled",
        "the HTTPS remote asks for credentials, and jpfs never prompts: store them with"
        " a credential helper (`git config credential.helper store`, or your system's)",
    ),
    (
        "Authentication failed",
        "the remote refused the stored credentials: update them in your credential helper",
    ),
)
# A fetch fails when another writer moves a ref it writes while it runs (`cannot lock
# ref ...: is at X but expected Y`: a push of ours updating the same tracking ref, or
# another jpfs process's fetch); the next fetch sees both. Made again up to this often.
_MOVED_ATTEMPTS = 5


@dataclass(frozen=True)
class Update:
    """Set ``ref`` on the remote to ``new`` (None: delete) if it holds ``expect``
    (None: must not exist)."""

    ref: str
    new: str | None
    expect: str | None
    source: str = ""  # the local object or ref pushed; defaults to ``new``


@dataclass(frozen=True)
class PushResult:
    ok: bool
    # ref -> (flag, summary) as printed by --porcelain: "*" new, " " fast-forward, "+"
    # forced, "-" deleted, "=" up to date, "!" rejected.
    refs: dict[str, tuple[str, str]]
    message: str = ""

    def took(self, ref: str) -> bool:
        """Whether the remote took the update of ``ref`` (a push that succeeded whole,
        ``--quiet``, lists no ref at all)."""
        status = self.refs.get(ref)
        return self.ok if status is None else status[0] != "!"

    def refusal(self, ref: str | None = None) -> str:
        """Why the remote refused ``ref`` (default: any ref of the push), when not
        because a ref had moved since the value expected (a race lost, which a fetch and
        another try answer): git's reason, with what the remote said ("" otherwise).
        A hook or a branch protection refuses every try alike."""
        rejected = self.rejected()
        for name, summary in rejected.items() if ref is None else [(ref, rejected.get(ref, ""))]:
            if summary and not any(words in summary for words in _RACE_LOST):
                said = [
                    line.removeprefix("remote:").strip()
                    for line in self.message.splitlines()
                    if line.startswith("remote:") and line.removeprefix("remote:").strip()
                ]
                return f"{name}: {summary}" + (f" ({'; '.join(said)})" if said else "")
        return ""

    def rejected(self) -> dict[str, str]:
        """Refs the push did not update, with git's reason. With ``--atomic`` every ref
        of a failed push is listed, the innocent ones as "atomic push failed" (checked
        here) or "atomic transaction failed" (checked on the remote): ask the remote
        which values it holds rather than guess from these."""
        return {ref: summary for ref, (flag, summary) in self.refs.items() if flag == "!"}


# What git says of a ref refused because it moved since the value the push expected, or
# of the refs an atomic push dropped with it: on the client ("stale info", "fetch
# first"), on the remote when a peer's update landed in between.
_RACE_LOST = (
    "stale info",
    "fetch first",
    "non-fast-forward",
    "atomic push fail",
    "atomic transaction fail",
    "failed to update ref",
    "failed to lock",
    "cannot lock ref",
    "incorrect old value",
)


def _env(via: Sequence[str] = ()) -> dict[str, str]:
    env = {**os.environ, **_QUIET_ENV}
    for setting in via:
        if setting.startswith(_SSH_SETTING):
            # The user's GIT_SSH_COMMAND would outrank the setting; it is inside it already.
            env["GIT_SSH_COMMAND"] = setting.removeprefix(_SSH_SETTING)
    return env


_SSH_SETTING = "core.sshCommand="


def advice(said: str) -> str:
    """What to set up, for a refusal in git's words ``said`` ("" when none applies),
    as a sentence to append to the error."""
    for words, what in _ADVICE:
        if words in said:
            return f" ({what})"
    return ""


def check_remote(repo: Path, remote: str) -> str:
    """The remote's URL; a clear error when it is not configured."""
    proc = runner.run(repo, ["remote", "get-url", remote], check=False)
    url = proc.stdout.strip()
    if proc.returncode != 0 or not url:
        raise GitError(
            f"sync.remote is {remote!r}, but this repository has no such remote"
            f" (see `git remote -v`; add it with `git remote add {remote} URL`)"
        )
    return url


def push_urls(repo: Path, remote: str) -> list[str]:
    """The URLs git pushes ``remote`` to (its pushurls, else its url; rewrites applied)."""
    proc = runner.run(repo, ["remote", "get-url", "--push", "--all", remote], check=False)
    return proc.stdout.split()


def fetch(
    repo: Path,
    remote: str,
    refspecs: Sequence[str],
    *,
    prune: bool = True,
    negotiate: Sequence[str] = (),
    via: Sequence[str] = (),
) -> None:
    """``git fetch`` the given refspecs (forced, so a rewound remote ref is followed).

    ``negotiate``: refs whose commits the remote surely has (what an earlier fetch
    brought): offered first and alone as common ground, so the fetch needs one round
    of negotiation, not one per batch of the local commits the remote lacks (each
    round trip is ~40 ms on a TCP transport). ``via``: git settings for reaching the
    remote (:attr:`jpfs.infra.git.ssh.SshCommand.settings`)."""
    # The sync loop fetches every few seconds: no `maintenance --auto` process after each
    # (the committer runs git's housekeeping itself); and only the refs the refspecs name
    # (`--refmap=`): git would also update refs/remotes/<remote>/*, which a user's own
    # fetch and our pushes write too, and two writers of a ref make one fail.
    args = [
        "fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--no-recurse-submodules",
        "--no-auto-maintenance", "--refmap=",
    ]  # fmt: skip
    if prune:
        args.append("--prune")
    args += [f"--negotiation-tip={ref}" for ref in negotiate]
    for attempt in range(_MOVED_ATTEMPTS):
        proc = runner.run(
            repo, [*_settings(via), *args, remote, *refspecs], check=False, env=_env(via)
        )
        if proc.returncode == 0:
            return
        said = proc.stderr or proc.stdout
        if "cannot lock ref" not in said or attempt + 1 == _MOVED_ATTEMPTS:
            raise GitError(f"{runner.failure(args, proc.returncode, said)}{advice(said)}")


def push(
    repo: Path,
    remote: str,
    updates: Sequence[Update],
    *,
    atomic: bool = True,
    via: Sequence[str] = (),
) -> PushResult:
    """Push ``updates`` in one atomic transaction, each guarded by its expectation; with
    ``atomic=False``, each is applied or refused on its own (``refs`` says which).
    ``via``: as for :func:`fetch`."""
    if not updates:
        return PushResult(True, {})
    args = ["push", "--porcelain", "--quiet", "--no-verify", *(["--atomic"] if atomic else [])]
    specs: list[str] = []
    for up in updates:
        args.append(f"--force-with-lease={up.ref}:{up.expect or ''}")
        source = up.source or up.new or ""
        specs.append(f"{source}:{up.ref}" if up.new is not None else f":{up.ref}")
    proc = runner.run(repo, [*_settings(via), *args, remote, *specs], check=False, env=_env(via))
    refs = _parse_porcelain(proc.stdout)
    if proc.returncode != 0 and not refs:
        told = proc.stderr or proc.stdout
        said = runner.complaint(told) or f"exit status {proc.returncode}"
        raise GitError(f"git push to {remote} failed: {said}{advice(told)}")
    ok = proc.returncode == 0 and all(flag != "!" for flag, _ in refs.values())
    return PushResult(ok, refs, proc.stderr.strip())


def _settings(via: Sequence[str]) -> list[str]:
    return [arg for setting in via for arg in ("-c", setting)]


def _parse_porcelain(text: str) -> dict[str, tuple[str, str]]:
    refs: dict[str, tuple[str, str]] = {}
    for line in text.splitlines():
        # "<flag>\t<from>:<to>\t<summary> (<reason>)"
        parts = line.split("\t")
        if len(parts) < 3 or len(parts[0]) != 1:
            continue
        _, _, to = parts[1].rpartition(":")
        refs[to] = (parts[0], parts[2])
    return refs
