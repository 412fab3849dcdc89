"""The query path's requests (jpfs.services.run.query): ``Query`` run as the keyword
form runs it, and a ``jpfs query`` that starts a conversation building its
configuration from the profile once (the provider's check before anything is written,
and the conversation's snapshot, are the same one), admitted as it is created."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jpfs import api
from jpfs.core.conversation import Conversation
from jpfs.core.profiles import Profile
from jpfs.core.state import State
from jpfs.core.workspace import Workspace, open_workspace
from jpfs.services.run import query
from jpfs.services.run.handoff import QueryRequest
from jpfs.services.workspace import policy
from tests.conftest import use_only_agent
from tests.services.run.test_query_handoff import SCRIPTED  # the "zero" agent both use


@pytest.fixture
def zero(ws: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Workspace, list[str]]:
    """A workspace whose one agent answers from a script, and the profile loads made
    from it (policy.load_profile, the real one, counted)."""
    use_only_agent(ws, "zero", SCRIPTED)
    loads: list[str] = []
    real = policy.load_profile

    def counted(w: Workspace, name: str, **options: Any) -> Profile:
        loads.append(name)
        return real(w, name, **options)

    monkeypatch.setattr(policy, "load_profile", counted)
    return open_workspace(ws), loads


def test_a_new_conversation_s_configuration_is_built_once(
    zero: tuple[Workspace, list[str]],
) -> None:
    w, loads = zero
    done = query.run_request(w, QueryRequest("hi", new=True), lambda _target: api.runner(w))
    assert (done.state, done.text.strip()) == (State.IDLE, "ok: hi")
    # Loaded to build the configuration (the provider's check, then the snapshot: it
    # was built twice before) and to admit the snapshot as it was made; the run found
    # it admitted and did not load it again.
    assert loads == ["zero", "zero"]
    conv = Conversation(w.conv_root, done.conversation)
    assert conv.settings.model == "script-zero" and conv.agent == "zero"


def test_a_query_is_run_as_its_keyword_form_runs_it(zero: tuple[Workspace, list[str]]) -> None:
    w, _ = zero
    typed = query.run(w, query.Query("one", segment="a"), runner=api.runner(w))
    keywords = query.query(w, "one", segment="b", runner=api.runner(w))
    assert (typed.conversation, keywords.conversation) == ("a", "b")
    assert (typed.state, typed.text) == (keywords.state, keywords.text)
    assert (typed.state, typed.text.strip()) == (State.IDLE, "ok: one")
    going_on = query.run(w, query.Query("two", conv_id="a"), runner=api.runner(w))
    assert (going_on.conversation, going_on.text.strip()) == ("a", "ok: two")
    with pytest.raises(TypeError, match="nonsense"):
        query.query(w, "x", nonsense=True)
