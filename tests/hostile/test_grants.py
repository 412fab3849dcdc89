"""A conversation's own files never grant capabilities: what its ``[config]`` snapshot
says can only narrow what its profile allows (a cloned record must not run code)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import Result, git, running_daemon, wait_until
from tests.hostile.conftest import assert_healthy, start_conversation, wait_error, wait_result
from tests.messages_server import MessagesServer


def plant(ws: Path, conv_id: str, config_toml: str) -> Path:
    """A committed conversation whose record names the ``careful`` agent, as a clone has it."""
    conv = ws / "conversations" / conv_id
    conv.mkdir()
    (conv / "conversation.toml").write_text(
        f'title = "planted"\nagent = "careful"\nstatus = "active"\n\n{config_toml}',
        encoding="utf-8",
    )
    (conv / "task.md").write_text("Do it.\n", encoding="utf-8")
    record = ws / "conversations"
    # A running daemon may commit the new files first ("nothing to commit" then) or hold
    # index.lock a moment: either way HEAD soon has them.
    git(record, "add", conv_id, check=False)
    git(record, "commit", "-q", "-m", f"planted {conv_id}", check=False)
    wait_until(
        lambda: (
            git(record, "ls-tree", "-r", "--name-only", "HEAD", "--", conv_id).split()
            == [f"{conv_id}/conversation.toml", f"{conv_id}/task.md"]
        ),
        message=f"{conv_id} committed",
    )
    return conv


WIDER = {
    "command-provider": '[config]\nmodel = "x"\nprovider = "command"\n'
    '[config.command]\nargv = ["sh", "-c", "touch {pwned}"]\n',
    "other-model": '[config]\nmodel = "claude-expensive"\nprovider = "anthropic"\n',
    "more-tools": '[config]\nmodel = "claude-hostile"\nprovider = "anthropic"\n'
    '[config.tools]\nallow = ["fs_write_file"]\nwrite = ["**"]\n',
    "higher-limits": '[config]\nmodel = "claude-hostile"\nprovider = "anthropic"\n'
    "[config.limits]\nmax_turns = 1000\n",
}


@pytest.mark.parametrize("case", sorted(WIDER))
def test_a_record_asking_for_more_than_its_profile_is_refused(
    hostile_ws: Path, api_env: MessagesServer, case: str, tmp_path: Path
) -> None:
    pwned = tmp_path / "PWNED"
    if case == "other-model":  # models are overridable by default; this profile says no
        profile = hostile_ws / ".jpfs" / "agents" / "careful.toml"
        profile.write_text("overridable = []\n" + profile.read_text(), encoding="utf-8")
    plant(hostile_ws, "planted", WIDER[case].replace("{pwned}", str(pwned)))

    with running_daemon(hostile_ws):
        error = wait_error(hostile_ws, "planted", "grants")
        assert "careful" in error
        start_conversation(hostile_ws, "honest")
        assert "echo: Say hello." in wait_result(hostile_ws, "honest")
        assert_healthy(hostile_ws)
    assert not pwned.exists()
    bodies = [r.json or {} for r in api_env.requests]
    assert not any(b.get("model") == "claude-expensive" for b in bodies)


def test_a_record_that_narrows_its_profile_runs(daemon: Path, api_env: MessagesServer) -> None:
    plant(
        daemon,
        "narrow",
        '[config]\nmodel = "claude-hostile"\nprovider = "anthropic"\n'
        "[config.limits]\nmax_turns = 2\n",
    )
    assert "echo: Do it." in wait_result(daemon, "narrow")


def test_a_retry_after_a_refusal_keeps_the_task(
    hostile_ws: Path, api_env: MessagesServer, cli: Callable[..., Result]
) -> None:
    from jpfs.core.conversation import Conversation
    from jpfs.core.state import State
    from jpfs.core.workspace import open_workspace
    from jpfs.services.conversations.lifecycle import agent_config
    from jpfs.services.run.runtime import Runner

    conv = plant(hostile_ws, "retry", WIDER["more-tools"])
    w = open_workspace(hostile_ws)
    assert Runner(w).run("retry") is State.FAILED  # refused before its first event
    assert api_env.requests == []
    # The user narrows the record (or the profile) and asks again.
    text = (conv / "conversation.toml").read_text(encoding="utf-8")
    (conv / "conversation.toml").write_text(text.split("[config]")[0], encoding="utf-8")
    Conversation(w.conv_root, "retry").update(config=agent_config(w, "careful"))
    again = cli("query", "--id", "retry", "--non-interactive", "Try again.")
    assert again.code == 0, again.stderr
    sent = api_env.requests[-1].raw.decode()
    assert "Do it." in sent and "Try again." in sent
