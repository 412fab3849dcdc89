"""CommandProvider: a subprocess as the model."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from jpfs.errors import Cancelled, ProfileError, ProviderError
from jpfs.infra.providers.base import Reply, Request
from jpfs.infra.providers.command import CommandProvider, render_prompt

PY = sys.executable


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        threading.Event().wait(0.01)  # poll interval
    return True


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie counts as dead: in a container nobody may reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def request(**kwargs: object) -> Request:
    kwargs.setdefault("model", "local-model")
    kwargs.setdefault("system", "You are terse.")
    kwargs.setdefault("messages", [{"role": "user", "content": "hello"}])
    return Request(**kwargs)  # type: ignore[arg-type]


def complete(p: CommandProvider, req: Request | None = None) -> Reply:
    return p.complete(req or request(), threading.Event())


CONVERSATION = [
    {"role": "user", "content": "Summarise a.md"},
    {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Reading it."},
            {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a.md"}},
        ],
    },
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "# A\nbody"},
            {
                "type": "tool_result",
                "tool_use_id": "toolu_2",
                "is_error": True,
                "content": [{"type": "text", "text": "no such file"}],
            },
        ],
    },
]


def test_cat_echoes_the_rendered_conversation() -> None:
    req = request(messages=CONVERSATION)
    reply = complete(CommandProvider(["cat"]), req)
    assert reply.text == render_prompt(req).rstrip()
    assert reply.tool_calls == ()
    assert reply.usage.input_tokens == reply.usage.output_tokens == 0
    assert reply.model == "local-model"
    assert reply.text == (
        "## system\n\nYou are terse.\n\n"
        "## user\n\nSummarise a.md\n\n"
        "## assistant\n\nReading it.\n\n"
        '[tool call read_file id=toolu_1]\n{"path": "a.md"}\n\n'
        "## user\n\n[tool result id=toolu_1]\n# A\nbody\n\n"
        "[tool error id=toolu_2]\nno such file"
    )


def test_large_prompt_does_not_deadlock() -> None:
    big = "x" * 2_000_000
    reply = complete(CommandProvider(["cat"]), request(messages=[{"role": "user", "content": big}]))
    assert big in reply.text


def test_large_prompt_to_a_slow_reader() -> None:
    """The child reads its input only after a while: the rest of the prompt must still
    arrive (``communicate(timeout=...)`` in a loop would stop writing it)."""
    big = "y" * 1_000_000
    script = "import sys, time; time.sleep(0.3); print(len(sys.stdin.read()))"
    req = request(system="", messages=[{"role": "user", "content": big}])
    reply = complete(CommandProvider([PY, "-c", script]), req)
    assert reply.text == str(len(render_prompt(req)))


def test_child_that_ignores_its_input() -> None:
    big = "z" * 1_000_000
    p = CommandProvider([PY, "-c", "print('ignored')"])
    assert complete(p, request(messages=[{"role": "user", "content": big}])).text == "ignored"


def test_environment_and_model() -> None:
    script = "import os; print(os.environ['JPFS_MODEL'], os.environ['EXTRA'], os.environ['HOME'])"
    p = CommandProvider([PY, "-c", script], env={"EXTRA": "yes"})
    assert complete(p).text == f"local-model yes {os.environ['HOME']}"


def test_nonzero_exit_reports_the_stderr_tail() -> None:
    script = (
        "import sys\n"
        "for i in range(10): print(f'noise {i}', file=sys.stderr)\n"
        "print('model overloaded', file=sys.stderr)\n"
        "sys.exit(3)\n"
    )
    with pytest.raises(ProviderError) as info:
        complete(CommandProvider([PY, "-c", script]))
    message = str(info.value)
    assert "exited with status 3" in message
    assert message.endswith("model overloaded")
    assert "noise 0" not in message
    assert "\n" not in message


def test_shell_metacharacters_are_inert(tmp_path: Path) -> None:
    hostile = "$(touch pwned) `touch pwned2`; touch pwned3 | touch pwned4 && touch pwned5"
    p = CommandProvider(["cat"], cwd=tmp_path)
    reply = complete(p, request(system=hostile, messages=[{"role": "user", "content": hostile}]))
    assert reply.text.count(hostile) == 2
    # Not in argv either: arguments reach the program verbatim.
    echo = CommandProvider([PY, "-c", "import sys; print(sys.argv[1])", hostile], cwd=tmp_path)
    assert complete(echo).text == hostile
    assert list(tmp_path.iterdir()) == []


def test_cancel_kills_the_process_group_promptly(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    # The child starts a grandchild, records both pids, and sleeps.
    script = (
        "import os, subprocess, sys, time\n"
        "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{g.pid}}')\n"
        "time.sleep(60)\n"
    )
    p = CommandProvider([PY, "-c", script])
    cancel = threading.Event()
    outcome: list[BaseException | Reply] = []

    def run() -> None:
        try:
            outcome.append(p.complete(request(), cancel))
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    assert wait_until(lambda: pids.exists() and len(pids.read_text().split()) == 2)
    child, grandchild = map(int, pids.read_text().split())
    cancelled_at = time.monotonic()
    cancel.set()
    thread.join(5)
    assert not thread.is_alive()
    assert time.monotonic() - cancelled_at < 3.0  # promptly (room for a loaded machine)
    assert isinstance(outcome[0], Cancelled)
    assert not alive(child)
    assert wait_until(lambda: not alive(grandchild), timeout=2)


def test_timeout_kills_the_child() -> None:
    p = CommandProvider([PY, "-c", "import time; time.sleep(60)"], timeout=0.3)
    started = time.monotonic()
    with pytest.raises(ProviderError, match=r"timed out after 0\.3 s"):
        complete(p)
    assert time.monotonic() - started < 2


def test_request_timeout_applies_without_an_override() -> None:
    p = CommandProvider([PY, "-c", "import time; time.sleep(60)"])
    with pytest.raises(ProviderError, match="timed out"):
        complete(p, request(timeout=0.2))


def test_killed_by_a_signal() -> None:
    p = CommandProvider([PY, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"])
    with pytest.raises(ProviderError, match="killed by SIGTERM"):
        complete(p)


def test_command_not_found() -> None:
    with pytest.raises(ProviderError, match="command not found: jpfs-no-such-binary"):
        complete(CommandProvider(["jpfs-no-such-binary"]))


@pytest.mark.parametrize("argv", [[], "cat", ["cat", 3]])
def test_bad_argv_is_a_profile_error(argv: object) -> None:
    with pytest.raises(ProfileError):
        CommandProvider(argv)  # type: ignore[arg-type]


def test_cancel_before_start_runs_nothing(tmp_path: Path) -> None:
    cancel = threading.Event()
    cancel.set()
    p = CommandProvider(["touch", str(tmp_path / "ran")])
    with pytest.raises(Cancelled):
        p.complete(request(), cancel)
    assert not (tmp_path / "ran").exists()
