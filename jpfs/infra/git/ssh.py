"""The SSH command jpfs's git uses: the user's own, plus what a daemon needs.

git picks its SSH command from ``GIT_SSH_COMMAND``, else ``core.sshCommand``, else
``GIT_SSH`` (a program, no arguments), else ``ssh``; the user's deploy key, port and
proxy live there or in ``~/.ssh/config``. jpfs reads that same command and appends
its options, never replacing it:

* ``BatchMode=yes``: a daemon has no terminal; a password, a key passphrase or an
  unknown host key fails at once instead of waiting on a prompt nobody sees.
* with ``share``: OpenSSH connection sharing (``ControlMaster=auto``, a
  ``ControlPath`` of ours, ``ControlPersist``): every fetch, push and claim of a daemon
  rides one SSH connection instead of a new handshake each (issue #49).

Options given on ssh's command line win over ``~/.ssh/config``, and of two given
there the first wins: so a ``-o`` in the user's own command wins over ours.

The composed command is handed to git as ``-c core.sshCommand=...``
(:attr:`SshCommand.settings`), and as ``GIT_SSH_COMMAND`` (:mod:`.remote`), which
would otherwise outrank the setting with the user's value alone (it is inside ours). A command that is not OpenSSH (plink, a wrapper script) takes no
``-o`` and is left as it is: it must not prompt.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shlex
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from jpfs.infra.git import runner

# A unix socket's path holds at most 104 bytes on macOS (108 on Linux), NUL included,
# and ssh first binds a temporary name 17 bytes longer (ControlPath + ".XXXXXXXXXXXXXXXX").
_SOCKET_PATH_MAX = 103 - 17
_HASH_LEN = 40  # what ssh's %C token expands to (a SHA-1 in hex)
# How long a shared connection outlives its last use: a daemon cycles every few
# seconds, so it stays up while the daemon runs, and ends on its own after a SIGKILL.
PERSIST_S = 60


@dataclass(frozen=True)
class SshCommand:
    """The SSH command of one engine: ``settings`` for git's command line."""

    command: str  # the composed command ("" when left as the user's)
    sockets: Path | None = None  # the directory of shared connections, if any
    settings: tuple[str, ...] = field(default=())

    def close(self) -> None:
        """End the shared connections (``ssh -O exit``) and remove their directory."""
        if self.sockets is None or not self.sockets.is_dir():
            return
        for sock in self.sockets.iterdir():
            if sock.is_socket():
                # A literal ControlPath names the master's socket; the host is not used.
                with contextlib.suppress(OSError, subprocess.SubprocessError):
                    subprocess.run(
                        ["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "jpfs-control"],
                        stdin=subprocess.DEVNULL,
                        capture_output=True,
                        timeout=10,
                        check=False,
                    )
                with contextlib.suppress(OSError):
                    sock.unlink()
        with contextlib.suppress(OSError):
            self.sockets.rmdir()


def user_command(repo: Path) -> tuple[str, bool]:
    """The SSH command git would run in ``repo``, as a shell command, and whether it
    takes OpenSSH's ``-o`` options."""
    command = os.environ.get("GIT_SSH_COMMAND", "")
    if not command:
        command = runner.run(repo, ["config", "core.sshCommand"], check=False).stdout.strip()
    if not command:
        program = os.environ.get("GIT_SSH", "")
        command = shlex.quote(program) if program else "ssh"
    variant = os.environ.get("GIT_SSH_VARIANT", "")
    if not variant:
        variant = runner.run(repo, ["config", "ssh.variant"], check=False).stdout.strip()
    if variant and variant != "auto":
        return command, variant == "ssh"
    return command, _program(command) in ("ssh", "ssh.exe")


def _program(command: str) -> str:
    """The program a shell command runs (past ``VAR=value`` assignments), by name."""
    try:
        words = shlex.split(command)
    except ValueError:
        return ""
    words = [w for w in words if not ("=" in w and not w.startswith(("-", "/")))]
    return Path(words[0]).name if words else ""


def is_ssh(url: str) -> bool:
    """Whether git reaches ``url`` over SSH: ``ssh://`` (and its aliases) or scp-like
    ``[user@]host:path`` (a colon before any slash, and not a Windows drive)."""
    scheme, sep, _ = url.partition("://")
    if sep:
        return scheme in ("ssh", "git+ssh", "ssh+git")
    head, colon, _ = url.partition(":")
    return bool(colon) and "/" not in head and len(head) > 1


def any_ssh(urls: Iterable[str]) -> bool:
    return any(is_ssh(url) for url in urls)


def command_for(repo: Path, local: Path, *, share: bool) -> SshCommand:
    """The SSH command for the engine of the workspace whose ``.jpfs/local`` is
    ``local``: the user's with BatchMode, and with ``share`` a shared connection."""
    user, openssh = user_command(repo)
    if not openssh:
        return SshCommand("")
    options = ["-o", "BatchMode=yes"]
    sockets = _sockets_dir(local) if share else None
    if sockets is not None:
        options += [
            "-o", "ControlMaster=auto",
            "-o", f"ControlPath={sockets}/%C",
            "-o", f"ControlPersist={PERSIST_S}",
        ]  # fmt: skip
    composed = f"{user} {shlex.join(options)}"
    return SshCommand(composed, sockets, (f"core.sshCommand={composed}",))


def _sockets_dir(local: Path) -> Path | None:
    """A private directory for this process's shared connections: under ``local``
    when its path leaves room in a socket address, else under the temporary directory
    (named by a digest of ``local``); None when neither can be made."""
    tag = f"{os.getpid()}"
    own = local / "ssh" / tag
    if len(os.fsencode(own)) + 1 + _HASH_LEN > _SOCKET_PATH_MAX:
        digest = hashlib.sha1(os.fsencode(local.resolve())).hexdigest()[:12]
        base = Path(tempfile.gettempdir()) / f"jpfs-ssh-{os.getuid()}"
        own = base / f"{digest}-{tag}"
        if len(os.fsencode(own)) + 1 + _HASH_LEN > _SOCKET_PATH_MAX:
            return None
    try:
        own.mkdir(parents=True, exist_ok=True, mode=0o700)
        own.chmod(0o700)  # ssh refuses nothing here, but the sockets are ours alone
    except OSError:
        return None
    _sweep(own)
    return own


def _sweep(own: Path) -> None:
    """Remove the emptied directories of processes gone (a killed daemon's: its
    connections end a minute after, and take their sockets with them)."""
    for other in own.parent.iterdir():
        pid = other.name.rpartition("-")[2]
        if other == own or not pid.isdigit() or _alive(int(pid)):
            continue
        with contextlib.suppress(OSError):
            other.rmdir()  # not empty: a connection still up, swept by a later start


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # someone else's: alive
    return True
