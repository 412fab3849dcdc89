"""Onboarding end to end: files, states and git history, with scripted and API agents."""

from __future__ import annotations

from pathlib import Path

import jpfs
from jpfs.core.conversation import Conversation
from jpfs.core.state import State
from jpfs.core.workspace import open_workspace
from jpfs.services.views.history import log
from tests.conftest import rgit, write_profile
from tests.messages_server import Router, last_user_text, text_reply, tool_results, tool_use_reply
from tests.runners import query

ASKER = """
model = "m"
provider = "script"
[onboarding]
enabled = true
max_rounds = {rounds}
[[script.onboarding]]
questions = ["Which database?", "Which region?"]
assumptions = ["Python 3.11"]
[[script.onboarding]]
questions = ["Any deadline?"]
{third}
[[script.turns]]
text = "WORKED ON: {{input}}"
"""


def events_of(ws: Path, conv_id: str) -> list[str]:
    return [e.event for e in reversed(log(ws, "jpfs-record", conv_id)) if e.conversation == conv_id]


def test_two_rounds_answered_by_a_human_editing_answers_md(ws: Path, cli) -> None:
    write_profile(ws, "asker", ASKER.format(rounds=3, third=""), allowed=True)
    first = cli("query", "--new", "--agent", "asker", "--non-interactive", "Migrate the DB")
    assert first.code == 4
    conv_id = cli("c", "show").stdout.strip()
    assert f'<questions conversation_id="{conv_id}">' in first.stdout
    assert "1. Which database?" in first.stdout and "- Python 3.11" in first.stdout
    conv = Conversation(ws / "conversations", conv_id)
    assert "## Round 1" in conv.read("questions.md")  # type: ignore[operator]

    # The human answers in their editor, then resumes the run.
    conv.file("answers.md").write_text("# Answers\n\n## Round 1\n\n1. Postgres\n2. eu-west\n")
    w = open_workspace(ws)
    second = query(w, None, conv_id=conv_id)
    assert second.state is State.WAITING and second.text.startswith("1. Any deadline?")
    assert cli("answer", conv_id, "Friday").code == 0
    done = query(w, None, conv_id=conv_id)
    assert done.state is State.IDLE

    questions = conv.read("questions.md") or ""
    assert "## Round 3\n\nStatus: ready" in questions
    answers = conv.read("answers.md") or ""
    assert "## Round 1" in answers and "## Round 2\n\nFriday" in answers
    first_user = conv.events()[0]
    assert first_user.role == "user"
    assert first_user.body.startswith("Migrate the DB\n\n## Onboarding")
    assert "Postgres" in first_user.body and "Friday" in first_user.body
    assert done.text.startswith("WORKED ON: Migrate the DB")
    assert events_of(ws, conv_id) == [
        "task", "questions", "answers", "questions", "answers", "ready", "input", "assistant",
        "result",
    ]  # fmt: skip
    # The human's edit is authored by the user, the questions by the agent.
    authors = rgit(ws, "log", "--format=%an|%s", "--", f"{conv_id}").splitlines()
    assert f"Test User|jpfs({conv_id}): answers" in authors
    assert f"asker (jpfs agent)|jpfs({conv_id}): questions" in authors


def test_agent_that_never_says_ready_is_stopped_at_the_limit(ws: Path, cli) -> None:
    third = '[[script.onboarding]]\nquestions = ["And another?"]'
    write_profile(ws, "asker", ASKER.format(rounds=2, third=third), allowed=True)
    w = open_workspace(ws)
    result = query(w, "Task", agent="asker")
    cli("answer", result.conversation, "a1")
    result = query(w, None, conv_id=result.conversation)
    assert result.state is State.WAITING
    cli("answer", result.conversation, "a2")
    result = query(w, None, conv_id=result.conversation)
    assert result.state is State.IDLE
    questions = Conversation(w.conv_root, result.conversation).read("questions.md") or ""
    assert "And another?" not in questions
    assert "round limit of 2 reached): proceeding without further answers" in questions
    assert "ready" in events_of(ws, result.conversation)


def test_onboarding_off_goes_straight_to_work(ws: Path, cli) -> None:
    write_profile(ws, "asker", ASKER.format(rounds=3, third=""), allowed=True)
    result = cli("query", "--new", "--agent", "asker", "--no-onboard", "Just do it")
    assert result.code == 0 and result.stdout == "WORKED ON: Just do it\n"
    conv_id = cli("c", "show").stdout.strip()
    conv = Conversation(ws / "conversations", conv_id)
    assert conv.read("questions.md") is None
    assert events_of(ws, conv_id) == ["task", "input", "assistant", "result"]


def test_parent_agent_answers_a_child_through_jp_query(ws: Path, api_env) -> None:  # type: ignore[no-untyped-def]
    write_profile(ws, "lead", """
model = "lead-model"
[system]
role = "You are LEAD."
[tools]
allow = ["jp_query"]
agents = ["helper"]
""", allowed=True)  # fmt: skip
    write_profile(ws, "helper", """
model = "helper-model"
[system]
role = "You are HELPER."
[onboarding]
enabled = true
""")  # fmt: skip

    def helper(request):  # type: ignore[no-untyped-def]
        if any(t["name"] == "ask_caller" for t in request.get("tools", [])):
            if "Answers:" not in last_user_text(request):
                return tool_use_reply(("ask_caller", {"questions": ["Which file?"]}))
            return tool_use_reply(("start_work", {"assumptions": ["none"]}))
        return text_reply("HELPER RESULT for " + last_user_text(request).splitlines()[0])

    state: dict[str, str] = {}

    def lead(request):  # type: ignore[no-untyped-def]
        results = tool_results(request)
        if not results:
            return tool_use_reply(("jp_query", {"config": "helper", "query": "fix the bug"}))
        content = results[-1]["content"]
        if content.startswith("<questions"):
            child = content.split('"')[1]
            state["child"] = child
            return tool_use_reply(
                ("jp_query", {"id": child, "config": "helper", "query": "app.py"})
            )
        return text_reply("LEAD got " + content)

    api_env.responder = Router().on_system("HELPER", helper).on_system("LEAD", lead)
    w = open_workspace(ws)
    result = query(w, "start", agent="lead")
    assert result.state is State.IDLE
    assert "HELPER RESULT for fix the bug" in result.text
    child = Conversation(w.conv_root, state["child"])
    assert "1. Which file?" in (child.read("questions.md") or "")
    assert "## Round 1\n\napp.py" in (child.read("answers.md") or "")
    assert "Status: ready" in (child.read("questions.md") or "")
    assert events_of(ws, child.id) == [
        "task", "questions", "answers", "ready", "input", "assistant", "result",
    ]  # fmt: skip
    # The caller's input to its child is the calling agent's commit, not the user's.
    authors = rgit(ws, "log", "--format=%an|%s", "--", f"{child.id}").splitlines()
    assert f"lead (jpfs agent)|jpfs({child.id}): task" in authors
    assert f"lead (jpfs agent)|jpfs({child.id}): answers round 1" in authors


def test_library_onboard_reply_call(ws: Path) -> None:
    write_profile(ws, "asker", ASKER.format(rounds=3, third=""), allowed=True)
    handle = jpfs.onboard("asker", "Context: a web shop", workspace_dir=ws)
    assert not handle.ready and handle.current_question is not None
    assert "Which database?" in handle.current_question
    handle = jpfs.reply(handle, "Postgres", workspace_dir=ws)
    handle = jpfs.reply(handle, "No deadline", workspace_dir=ws)
    assert handle.ready and handle.current_question is None
    one = jpfs.call(handle, "add a cart", workspace_dir=ws)
    two = jpfs.call(handle, "add checkout", workspace_dir=ws)
    assert one.startswith("WORKED ON: Context: a web shop")
    assert "## Your task\n\nadd a cart" in one and "## Your task\n\nadd checkout" in two
    assert "Postgres" in one and "Postgres" in two
    # The template itself never works.
    template = Conversation(ws / "conversations", handle.conversation)
    assert template.events() == []


def test_batch_onboarding_forks_three_children(ws: Path, cli, tmp_path: Path) -> None:
    write_profile(ws, "asker", ASKER.format(rounds=1, third=""), allowed=True)
    tasks = tmp_path / "tasks.md"
    tasks.write_text("## Port module A\n\n## Port module B\n\n## Port module C\n")
    first = cli("onboard", "asker", "--tasks", str(tasks))
    assert first.code == 4
    template_id = first.stdout.split('"')[1]
    assert cli("answer", template_id, "Use Postgres in eu-west").code == 0
    done = cli("onboard", "--id", template_id)
    assert done.code == 0, done.stderr
    blocks = done.stdout.split("</response>")
    assert len([b for b in blocks if b.strip()]) == 3
    for letter in "ABC":
        assert f"## Your task\n\nPort module {letter}" in done.stdout
    children = [
        c for c in (ws / "conversations" / template_id).iterdir() if c.name.startswith("c-")
    ]
    assert len(children) == 3
    for child in children:
        conv = Conversation(ws / "conversations", f"{template_id}/{child.name}")
        assert "Use Postgres in eu-west" in (conv.read("answers.md") or "")
        assert conv.events()[0].body.count("Use Postgres in eu-west") == 1
        assert events_of(ws, conv.id) == ["task", "input", "assistant", "result"]


def test_answer_opens_the_editor_on_a_template(ws: Path, cli, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import sys

    write_profile(ws, "asker", ASKER.format(rounds=3, third=""), allowed=True)
    first = cli("query", "--new", "--agent", "asker", "--non-interactive", "Migrate")
    conv_id = first.stdout.split('"')[1]
    editor = tmp_path / "editor.py"
    seen = tmp_path / "seen.md"
    # A stand-in editor: keeps a copy of what it was shown, then types an answer.
    editor.write_text(
        "import sys, shutil\n"
        "shutil.copyfile(sys.argv[-1], sys.argv[1])\n"
        "open(sys.argv[-1], 'a').write('Postgres, eu-west\\n')\n"
    )
    # The file to edit is appended to $VISUAL's words as one more argv item.
    monkeypatch.setenv("VISUAL", f"{sys.executable} {editor} {seen}")
    result = cli("answer", conv_id)
    assert result.code == 0, result.stderr
    shown = seen.read_text()
    assert "> 1. Which database?" in shown and "<!--" in shown
    answers = Conversation(ws / "conversations", conv_id).read("answers.md") or ""
    assert "## Round 1\n\nPostgres, eu-west" in answers
    assert "Which database" not in answers and "<!--" not in answers

    second = cli("query", "--new", "--agent", "asker", "--non-interactive", "Again")
    monkeypatch.setenv("VISUAL", f"{sys.executable} -c pass")
    cancelled = cli("answer", second.stdout.split('"')[1])
    assert cancelled.code == 1 and "empty answer" in cancelled.stderr
    monkeypatch.setenv("VISUAL", f"{sys.executable} -c 'raise SystemExit(3)'")
    failed = cli("answer", second.stdout.split('"')[1])
    assert failed.code == 1 and "editor" in failed.stderr


INTERVIEWER = """
model = "claude-interviewer"
provider = "anthropic"
[onboarding]
enabled = true
"""


def test_an_invalid_onboarding_step_goes_back_to_the_agent_never_ready(
    ws: Path, cli, api_env
) -> None:  # type: ignore[no-untyped-def]
    from tests.messages_server import tool_results, tool_use_reply

    write_profile(ws, "interviewer", INTERVIEWER, allowed=True)
    replies = iter(
        [
            # {"question": ...} is not ask_caller's schema: it must not count as ready.
            tool_use_reply(("ask_caller", {"question": "Which file?"})),
            tool_use_reply(("ask_caller", {"questions": ["Which file?"]})),
        ]
    )
    api_env.responder = lambda req: next(replies)
    done = cli("query", "--new", "--agent", "interviewer", "--non-interactive", "Fix the bug")
    assert done.code == 4, done.stderr
    assert "Which file?" in done.stdout
    second = api_env.requests[1].body
    (result,) = tool_results(second)
    assert result["is_error"] is True and "questions" in str(result["content"])
    conv_id = cli("c", "show").stdout.strip()
    questions = (ws / "conversations" / conv_id / "questions.md").read_text(encoding="utf-8")
    assert "1. Which file?" in questions and "ready" not in questions.lower()


def test_an_onboarding_step_that_stays_invalid_fails_the_run_with_the_reason(
    ws: Path, cli, api_env
) -> None:  # type: ignore[no-untyped-def]
    from tests.messages_server import tool_use_reply

    write_profile(ws, "interviewer", INTERVIEWER, allowed=True)
    api_env.responder = lambda req: tool_use_reply(("ask_caller", {"question": "?"}))
    done = cli("query", "--new", "--agent", "interviewer", "--non-interactive", "Fix the bug")
    assert done.code == 1
    assert "stayed invalid" in done.stdout + done.stderr
    assert len(api_env.requests) == 3
