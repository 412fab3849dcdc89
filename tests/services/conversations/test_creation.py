"""Every code path that writes a conversation's ``conversation.toml`` or ``task.md``,
found in the code, and the rules each keeps (:mod:`jpfs.services.conversations.creation`).

The paths are found, not listed by hand: a call that makes a conversation's files
(``jpfs.core.conversation.create``), writes ``task.md``, or sets the agent, the
configuration or the title in ``conversation.toml``. A new one fails
:func:`test_every_writer_of_a_conversations_files_is_known` until it is added to
``WRITERS`` with the rules it keeps, and the tests below check those rules on each way
in: the agent refused where its actor may not give it (one ``authorize``, no flag that
skips it), and nothing made or committed when it is.
"""

from __future__ import annotations

import ast
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

import jpfs
from jpfs.core.conversation import Conversation
from jpfs.core.workspace import open_workspace
from jpfs.errors import ProfileError
from jpfs.services.conversations import lifecycle
from tests.conftest import Result, write_profile

PACKAGE = Path(jpfs.__file__).resolve().parent

# (module under jpfs/, function) -> what writes there, and which rules hold.
WRITERS: dict[tuple[str, str], str] = {
    ("services/conversations/creation.py", "create"): (
        "the factory: authorize, lock, branch plan, redaction, title, one commit"
    ),
    ("services/conversations/inputs.py", "submit"): (
        "the task of a conversation the factory made empty: redacted, committed as input"
    ),
    ("services/conversations/lifecycle.py", "adopt"): (
        "a person's own task.md: the agent authorized for the user, the title redacted"
    ),
    ("services/conversations/lifecycle.py", "set_agent"): (
        "another agent for a conversation that has not worked: authorized for the user"
    ),
    ("services/conversations/lifecycle.py", "skip_onboarding"): (
        "the configuration's onboarding switched off: no agent changes"
    ),
}
# The one place the allow-list is asked: creation.authorize, for whoever acts.
ALLOW_LIST = {("services/conversations/creation.py", "authorize")}
_META_KEYS = {"agent", "config", "title"}


def _calls() -> dict[str, set[tuple[str, str]]]:
    """Each kind of write (and each ask of the allow-list), where it is made."""
    found: dict[str, set[tuple[str, str]]] = {"writes": set(), "allow": set()}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        makers = {
            a.asname or a.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module == "jpfs.core.conversation"
            for a in node.names
            if a.name == "create"
        }
        where = str(path.relative_to(PACKAGE))
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(fn):
                if not isinstance(node, ast.Call):
                    continue
                f = node.func
                name = (
                    f.id
                    if isinstance(f, ast.Name)
                    else f.attr
                    if isinstance(f, ast.Attribute)
                    else ""
                )
                words = {k.arg for k in node.keywords}
                first = node.args[0] if node.args else None
                if (
                    (isinstance(f, ast.Name) and f.id in makers)
                    or (name == "update" and words & _META_KEYS)
                    or (name == "write" and isinstance(first, ast.Name) and first.id == "TASK")
                ):
                    found["writes"].add((where, fn.name))
                if name.lstrip("_") == "require_allowed":
                    found["allow"].add((where, fn.name))
    return found


def test_every_writer_of_a_conversations_files_is_known() -> None:
    found = _calls()
    assert found["writes"] == set(WRITERS), "a new writer: add it to WRITERS, with its rules"


def test_the_allow_list_is_asked_in_one_place() -> None:
    assert _calls()["allow"] == ALLOW_LIST


OFF = "openai-researcher"  # a shipped example: off until the user names it


def _record(ws: Path) -> str:
    return subprocess.run(
        ["git", "-C", str(ws), "rev-parse", "jpfs-record"], capture_output=True, text=True
    ).stdout.strip()


def _conversations(ws: Path) -> set[str]:
    root = ws / "conversations"
    return {str(p.parent.relative_to(root)) for p in root.rglob("conversation.toml")}


def _refused(run: Callable[[], object]) -> str:
    with pytest.raises(ProfileError) as caught:
        run()
    return str(caught.value)


def test_every_way_in_refuses_an_agent_the_user_has_not_allowed(
    ws: Path, cli: Callable[..., Result]
) -> None:
    """The CLI, the library, a person's own task.md and a change of agent: each refuses
    the agent with the same error, names agents.allowed, and makes and commits nothing."""
    write_profile(ws, "worker", 'model = "m"\nprovider = "script"\n[[script.turns]]\ntext = "ok"\n')
    assert cli("config", "set", "agents.allowed", '["worker"]').code == 0
    assert cli("c", "new", "kept", "--no-activate", "--agent", "worker").code == 0
    before, made = _record(ws), _conversations(ws)

    refusals = []
    for argv in (
        ("c", "new", "x", "--no-activate", "--agent", OFF),
        ("query", "--new", "--agent", OFF, "--non-interactive", "hello"),
        ("query", "--new", "--agent", OFF, "--budget-tokens", "1000", "--non-interactive", "hi"),
        ("c", "new", "kept/child", "--no-activate", "--agent", OFF),
        ("c", "set-agent", "kept", OFF),
    ):
        result = cli(*argv)
        assert result.code != 0, argv
        refusals.append(result.stderr)
    refusals.append(_refused(lambda: jpfs.call(OFF, "hello", workspace_dir=ws)))
    refusals.append(_refused(lambda: jpfs.onboard(OFF, "hello", workspace_dir=ws)))
    by_hand = ws / "conversations" / "by-hand"
    by_hand.mkdir()
    (by_hand / "task.md").write_text("Read the docs.\n", encoding="utf-8")
    (by_hand / "conversation.toml").write_text(f'agent = "{OFF}"\n', encoding="utf-8")
    handle = open_workspace(ws)
    refusals.append(
        _refused(lambda: lifecycle.adopt(handle, Conversation(handle.conv_root, "by-hand"), None))
    )

    for text in refusals:
        assert f"agent {OFF!r} is not in agents.allowed" in text, text
    assert _record(ws) == before
    assert _conversations(ws) == made | {"by-hand"}
    assert (by_hand / "conversation.toml").read_text(encoding="utf-8") == f'agent = "{OFF}"\n'
    assert Conversation(handle.conv_root, "kept").meta()["agent"] == "worker"
