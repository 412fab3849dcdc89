"""The SSH command jpfs gives git: the user's own, with jpfs's options appended (#49).

Read from a real repository's git config and the real environment, as git reads them.
"""

from __future__ import annotations

import shlex
import tempfile
from pathlib import Path

import pytest

from jpfs.infra.git import ssh
from tests.conftest import git


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    git(tmp_path, "init", "-q", str(repo))
    return repo


def test_the_user_s_command_is_kept_in_git_s_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = _repo(tmp_path)
    monkeypatch.delenv("GIT_SSH_COMMAND", raising=False)
    monkeypatch.delenv("GIT_SSH", raising=False)
    assert ssh.user_command(repo) == ("ssh", True)
    monkeypatch.setenv("GIT_SSH", "/opt/my ssh/ssh")  # a program, quoted for the shell
    assert ssh.user_command(repo) == (shlex.quote("/opt/my ssh/ssh"), True)
    git(repo, "config", "core.sshCommand", "ssh -i ~/.ssh/deploy_key")  # outranks GIT_SSH
    assert ssh.user_command(repo) == ("ssh -i ~/.ssh/deploy_key", True)
    monkeypatch.setenv("GIT_SSH_COMMAND", "FOO=1 /usr/bin/ssh -F cfg")  # outranks both
    assert ssh.user_command(repo) == ("FOO=1 /usr/bin/ssh -F cfg", True)
    monkeypatch.setenv("GIT_SSH_COMMAND", "plink -batch")  # not OpenSSH: takes no -o
    assert ssh.user_command(repo) == ("plink -batch", False)
    git(repo, "config", "ssh.variant", "ssh")  # the user says it is
    assert ssh.user_command(repo) == ("plink -batch", True)


def test_jpfs_appends_batch_mode_and_a_shared_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = _repo(tmp_path)
    monkeypatch.delenv("GIT_SSH_COMMAND", raising=False)
    git(repo, "config", "core.sshCommand", "ssh -i key -o ControlPersist=5")
    with tempfile.TemporaryDirectory(prefix="j", dir="/tmp") as short:
        _composed(repo, Path(short) / "l", tmp_path)


def _composed(repo: Path, local: Path, tmp_path: Path) -> None:
    shared = ssh.command_for(repo, local, share=True)  # local is short: sockets fit in it
    assert shared.command.startswith("ssh -i key -o ControlPersist=5 -o BatchMode=yes")
    assert shared.sockets is not None and shared.sockets.parent == local / "ssh"
    assert f"ControlPath={shared.sockets}/%C" in shared.command
    assert shared.settings == (f"core.sshCommand={shared.command}",)
    shared.close()
    assert not shared.sockets.exists()
    alone = ssh.command_for(repo, local, share=False)
    assert alone.command == "ssh -i key -o ControlPersist=5 -o BatchMode=yes"
    # A workspace too deep for a socket address: the sockets go to the temporary dir.
    deep = ssh.command_for(repo, tmp_path / ("d" * 80), share=True)
    assert deep.sockets is not None and len(str(deep.sockets / ("x" * 40))) <= 86
    deep.close()
    git(repo, "config", "core.sshCommand", "plink -batch")
    assert ssh.command_for(repo, local, share=True) == ssh.SshCommand("")


@pytest.mark.parametrize(
    ("url", "over_ssh"),
    [
        ("git@github.com:team/repo.git", True),
        ("teamhost:repo.git", True),
        ("ssh://git@host:2222/repo.git", True),
        ("git+ssh://host/repo.git", True),
        ("https://host/repo.git", False),
        ("git://host/repo.git", False),
        ("file:///srv/repo.git", False),
        ("/srv/repo.git", False),
        ("./a:b", False),
        ("C:/repo.git", False),
    ],
)
def test_which_urls_are_reached_over_ssh(url: str, over_ssh: bool) -> None:
    assert ssh.is_ssh(url) is over_ssh
