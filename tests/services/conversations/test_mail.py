"""Mail: the message format, the commits, the scope rule, and mail that continues a run."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jpfs import api
from jpfs.core import frontmatter, ids, locks
from jpfs.core.conversation import Conversation
from jpfs.core.tool import ToolContext
from jpfs.core.workspace import Workspace, open_workspace
from jpfs.errors import IdError, NotFoundError, ScopeError
from jpfs.services.conversations import inputs, mail, mailfilter, reports
from jpfs.services.conversations.lifecycle import new_conversation
from jpfs.services.run import background, control
from jpfs.services.run.runtime import Runner
from jpfs.services.views.history import parse_trailers
from jpfs.tools.registry import build_tools
from tests.conftest import Result, no_thread_leak, rgit, wait_until, write_profile

ECHO = """
model = "m"
provider = "script"
[tools]
allow = ["mail_send", "mail_check", "mail_read", "mail_delete", "mail_filter", "fork", "kill"]
[[script.turns]]
text = "echo: {input}"
"""


def commits(repo: Path, *paths: str) -> list[dict[str, str]]:
    """Trailer groups of every commit (newest first), limited to ``paths`` if given."""
    out = []
    for sha in rgit(repo, "rev-list", "HEAD", "--", *paths).split():
        body = rgit(repo, "log", "-1", "--format=%B", sha)
        out.extend(parse_trailers(git_trailers(repo, body)))
    return out


def git_trailers(repo: Path, message: str) -> str:
    import subprocess

    return subprocess.run(
        ["git", "interpret-trailers", "--parse"], input=message, text=True, capture_output=True,
        check=True, cwd=repo,
    ).stdout  # fmt: skip


@pytest.fixture
def tree3(ws: Path) -> Workspace:
    """lead, lead/a, lead/a/x, lead/b and a stranger top-level conversation."""
    write_profile(ws, "echo", ECHO, allowed=True)
    w = open_workspace(ws)
    for cid in ("lead", "lead/a", "lead/a/x", "lead/b", "other"):
        new_conversation(w, cid, agent="echo")
    return w


def test_message_file_format_and_one_commit_per_change(
    tree3: Workspace, cli: Callable[..., Result]
) -> None:
    w = tree3
    sent = cli("mail", "send", "lead/b", "--subject", "Hello\nthere", "--no-start", "the body")
    assert sent.code == 0, sent.stderr
    msg_id = sent.stdout.strip()
    assert mail.MESSAGE_ID_RE.fullmatch(msg_id)
    path = w.conv_root / "lead/b/inbox" / f"{msg_id}.md"
    meta, body = frontmatter.read(path)
    assert meta["id"] == msg_id and meta["from"] == "@human" and meta["to"] == "lead/b"
    assert meta["subject"] == "Hello there" and meta["kind"] == "message"
    assert meta["read"] is False and body == "the body\n" and "created" in meta
    head = rgit(w.root, "log", "-1", "--format=%s")
    assert head == f"jpfs(lead/b): mail {msg_id}\n"
    last = commits(w.root)[0]
    assert last["Jpfs-Event"] == "mail" and last["Jpfs-Message"] == msg_id
    assert last["Jpfs-From"] == "@human" and last["Jpfs-Conversation"] == "lead/b"

    checked = json.loads(cli("mail", "check", "lead/b", "--format", "json").stdout)
    assert checked["unread"] == 1 and checked["messages"][0]["id"] == msg_id
    assert "body" not in checked["messages"][0]
    shown = cli("mail", "read", "lead/b", msg_id)
    assert f"id: {msg_id}" in shown.stdout and shown.stdout.endswith("the body\n")
    assert frontmatter.read(path)[0]["read"] is True
    assert rgit(w.root, "log", "-1", "--format=%s") == f"jpfs(lead/b): mail-read {msg_id}\n"
    assert json.loads(cli("mail", "check", "lead/b", "--format", "json").stdout)["unread"] == 0
    # Reading again changes nothing and commits nothing.
    count = rgit(w.root, "rev-list", "--count", "HEAD")
    assert cli("mail", "read", "lead/b", msg_id).code == 0
    assert rgit(w.root, "rev-list", "--count", "HEAD") == count

    assert cli("mail", "delete", "lead/b", msg_id).stdout.strip() == msg_id
    assert not path.exists()
    assert rgit(w.root, "log", "-1", "--format=%s") == f"jpfs(lead/b): mail-delete {msg_id}\n"
    # Deleted, yet in history.
    rel = f"lead/b/inbox/{msg_id}.md"
    assert "the body" in rgit(w.root, "show", f"HEAD~1:{rel}")
    assert rgit(w.root, "status", "--porcelain", "--", ".") == ""
    gone = cli("mail", "read", "lead/b", msg_id)
    assert gone.code == 1 and "no message" in gone.stderr


def test_filter_by_sender_kind_unread_since_and_text(
    tree3: Workspace, cli: Callable[..., Result]
) -> None:
    w = tree3
    first = mail.send(w, "lead", "alpha report", "numbers are up", sender="lead/a")
    mail.send(w, "lead", "beta", "Nothing NEW", sender="lead/b")
    status = mail.send(
        w, "lead", "status: idle", '{"status": "idle"}', sender="lead/a", kind="status",
        msg_id=mail.status_id("lead/a", 3, first.created), event=3,
    )  # fmt: skip
    mail.read(w, "lead", first.id)

    def ids(**kw: Any) -> list[str]:
        return [m.id for m in mailfilter.select(w, "lead", **kw)]

    assert ids(sender="lead/a") == sorted([first.id, status.id])
    assert ids(kind="status") == [status.id]
    assert first.id not in ids(unread=True) and ids(unread=False) == [first.id]
    assert set(ids(text="new")) == {m.id for m in mail.messages(w, "lead") if "NEW" in m.body}
    assert ids(since="1h") == ids()
    assert ids(since="2999-01-01") == []
    rows = json.loads(
        cli("mail", "filter", "lead", "--kind", "message", "--unread", "--format", "json").stdout
    )
    assert [r["subject"] for r in rows] == ["beta"]
    table = cli("mail", "filter", "lead", "--from", "lead/a").stdout.splitlines()
    assert table[0].split() == ["NEW", "ID", "KIND", "FROM", "CREATED", "SUBJECT"]
    assert len(table) == 3 and all("lead/a" in line for line in table[1:])
    bad = cli("mail", "filter", "lead", "--since", "yesterday-ish")
    assert bad.code == 1 and "bad since" in bad.stderr


def test_agents_mail_only_their_parent_and_descendants(tree3: Workspace) -> None:
    w = tree3
    assert mail.send(w, "lead", "up", "hi", sender="lead/a").to == "lead"
    assert mail.send(w, "parent", "up", "hi", sender="lead/a/x").to == "lead/a"
    assert mail.send(w, "lead/a/x", "down", "hi", sender="lead").to == "lead/a/x"
    refused = [
        ("lead/b", "lead/a"),  # sibling
        ("lead", "lead/a/x"),  # grandparent
        ("other", "lead"),  # stranger
        ("lead/a", "lead/a"),  # itself
        ("lead/../other", "lead"),
        ("/etc", "lead"),
    ]
    for to, sender in refused:
        with pytest.raises((ScopeError, IdError)):
            mail.send(w, to, "s", "b", sender=sender)
    with pytest.raises(NotFoundError):
        mail.send(w, "lead/nope", "s", "b", sender="lead")
    with pytest.raises(ScopeError, match="has no parent"):
        mail.send(w, "parent", "s", "b", sender="lead")
    with pytest.raises(ScopeError, match="only its parent"):
        mail.send(w, "lead/a/x", "s", "b", sender="lead/a", parent_only=True)
    # A symlink inside the tree is never followed.
    os.symlink(w.conv_root / "other", w.conv_root / "lead/a/link")
    with pytest.raises(ScopeError, match="symlink"):
        mail.send(w, "lead/a/link", "s", "b", sender="lead/a")
    assert not (w.conv_root / "other/inbox").exists()
    # A human may mail anyone.
    assert mail.send(w, "other", "s", "b").sender == ids.HUMAN


def settled(w: Workspace, parent: str, child: str) -> bool:
    (report,) = reports.wait_settled(w, [child], by=parent, timeout=0)
    return not report.get("pending")


def tool_ctx(w: Workspace, conv_id: str) -> ToolContext:
    conv = Conversation(w.conv_root, conv_id)
    return ToolContext(
        workspace_root=w.root,
        conversation=conv_id,
        files_root=w.root,
        workspace=w,
        config=conv.config,
        runner=api.runner(w),
        call_id="t1",
    )


def test_mail_tools_act_on_the_callers_own_mailbox(tree3: Workspace, ws: Path) -> None:
    w = tree3
    tools = build_tools(Conversation(w.conv_root, "lead/a").config, w.agents_dir)
    ctx = tool_ctx(w, "lead/a")
    sent = json.loads(tools["mail_send"].run(ctx, {"to": "lead", "subject": "s", "body": "b"}))
    assert sent["conversation_id"] == "lead" and sent["continued"] is False
    with pytest.raises(ScopeError):
        tools["mail_send"].run(ctx, {"to": "lead/b", "subject": "s", "body": "b"})
    mail.send(w, "lead/a", "from above", "do it", sender="lead")
    mail.send(w, "lead/a", "status", "{}", sender="lead/a/x", kind="status")
    checked = json.loads(tools["mail_check"].run(ctx, {}))
    assert checked["unread"] == 2
    first = checked["messages"][0]["id"]
    read = json.loads(tools["mail_read"].run(ctx, {"id": first}))
    assert read["body"] == "do it\n" and read["read"] is True
    assert [m["kind"] for m in json.loads(tools["mail_filter"].run(ctx, {"unread": True}))] == [
        "status"
    ]
    assert json.loads(tools["mail_delete"].run(ctx, {"id": first})) == {"deleted": first}
    # Another conversation's message id is simply not in this mailbox.
    theirs = mail.send(w, "lead/b", "s", "b", sender="lead")
    with pytest.raises(NotFoundError):
        tools["mail_read"].run(ctx, {"id": theirs.id})
    with pytest.raises(IdError):
        tools["mail_read"].run(ctx, {"id": "../../lead/b/inbox/" + theirs.id})


def test_profiles_that_cannot_delegate_mail_their_parent_only(tree3: Workspace) -> None:
    w = tree3
    from jpfs.services.conversations.lifecycle import agent_config

    researcher = agent_config(w, "researcher")
    assert {"mail_send", "mail_check", "mail_read"} <= set(researcher["tools"]["allow"])
    new_conversation(w, "lead/r", agent="researcher")
    new_conversation(w, "lead/r/sub", agent="echo")  # a human made it a child
    tools = build_tools(researcher, w.agents_dir)
    ctx = tool_ctx(w, "lead/r")
    ok = json.loads(tools["mail_send"].run(ctx, {"to": "parent", "subject": "q", "body": "?"}))
    assert ok["conversation_id"] == "lead"
    with pytest.raises(ScopeError, match="only its parent"):
        tools["mail_send"].run(ctx, {"to": "lead/r/sub", "subject": "s", "body": "b"})
    default = agent_config(w, "default")["tools"]["allow"]
    assert {"fork", "kill", "jp_await", "mail_delete", "mail_filter"} <= set(default)
    assert set(build_tools(agent_config(w, "planner"), w.agents_dir)) >= {"mail_send"}


def test_mail_from_the_caller_continues_an_idle_conversation(
    tree3: Workspace, cli: Callable[..., Result]
) -> None:
    w = tree3
    runner = api.runner(w)
    first = control.fork(w, "lead", "hello", runner=runner)  # human fork of an empty parent
    wait_until(lambda: settled(w, "lead", first), message="the fork to stop")
    conv = Conversation(w.conv_root, first)
    with no_thread_leak():
        # Started here, or delivered by the first run if it is still wrapping up: either
        # way the mail is the next input, exactly once.
        msg, _ = control.send(w, first, "more", "second question", sender="lead", runner=runner)
        wait_until(
            lambda: len(conv.events()) == 4 and conv.read("result.md") and
            mailfilter.select(w, "lead", sender=first, kind="status", unread=True),
            message="the continued run",
        )  # fmt: skip
    events = conv.events()
    assert [e.role for e in events] == ["user", "assistant", "user", "assistant"]
    assert f"Mail from lead ({msg.id}), subject: more" in events[2].body
    assert events[3].body.strip().startswith("echo: Mail from lead")
    assert mail.get(w, first, msg.id).read is True
    assert mail.pending_input(w, first) == []
    # The input and the read mark are one commit.
    commit = rgit(w.root, "log", "-1", "--format=%H", "--", f"{first}/events/0003-user.md")
    changed = rgit(w.root, "show", "--name-only", "--format=", commit.strip()).split()
    assert f"{first}/inbox/{msg.id}.md" in changed, rgit(
        w.root, "log", "--stat", "--format=%s%n%b", "-8"
    )
    # Mail from a child (not its caller) does not start the parent.
    assert control.send(w, "lead", "fyi", "x", sender=first, runner=runner)[1] is False


def test_mail_sent_while_running_is_delivered_by_the_run_that_holds_it(
    tree3: Workspace,
) -> None:
    """Mail sent while a run holds the conversation is the run's to deliver: at its next
    model call (steering), or when it stops if no call comes; once, and answered."""
    w = tree3
    # The turn takes 1.5 s: the mail below is sent while it runs, even on a loaded machine.
    write_profile(w.root, "echo", ECHO.replace("[[script.turns]]", "[[script.turns]]\ndelay = 1.5"))
    conv = new_conversation(w, "slow", agent="echo", task="first")
    runner = api.runner(w)

    def answered() -> bool:
        events = conv.events()
        holding = [i for i, ev in enumerate(events) if ev.role == "user" and "second" in ev.body]
        return bool(holding) and any(ev.role == "assistant" for ev in events[holding[-1] :])

    with no_thread_leak():
        background.start(w, "slow", runner=runner)
        wait_until(lambda: conv.events(), message="the run to start")
        msg, started = control.send(w, "slow", "s", "second")
        assert not started  # busy: the run that holds it delivers the mail
        wait_until(answered, message="the mail delivered and answered")
        wait_until(lambda: not locks.is_locked(w.local_dir, "slow"), message="the run to end")
    assert sum("second" in ev.body for ev in conv.events() if ev.role == "user") == 1
    assert mail.get(w, "slow", msg.id).read is True
    assert Conversation(w.conv_root, "slow").read("result.md")


def test_mail_to_a_killed_conversation_never_resumes_it(
    tree3: Workspace, cli: Callable[..., Result]
) -> None:
    w = tree3
    assert cli("kill", "lead/b").stdout == "lead/b\n"
    sent = cli("mail", "send", "lead/b", "-s", "wake up", "please")
    assert sent.code == 0 and "continues" not in sent.stderr
    assert inputs.deliver(w, Conversation(w.conv_root, "lead/b")) is False
    assert Conversation(w.conv_root, "lead/b").events() == []
    assert mail.pending_input(w, "lead/b")  # still there, unread, for a human to see


def test_status_report_is_sent_once_per_run_end(tree3: Workspace) -> None:
    w = tree3
    conv = Conversation(w.conv_root, "lead/a")
    conv.append_event("user", "q")
    conv.append_event("assistant", "the answer")
    runner = api.runner(w)
    before = rgit(w.root, "rev-list", "--count", "HEAD")
    # A crash after the report but before result.md: the redo reports the same message.
    reports.report_status(runner, conv, True, "the answer")
    reports.report_status(runner, conv, True, "the answer")
    (status,) = mailfilter.select(w, "lead", kind="status")
    # No model call in this run (the events were written by hand): it cost nothing.
    nothing = {"input_tokens": 0, "output_tokens": 0, "cache_read_input_tokens": 0,
               "cache_creation_input_tokens": 0, "cost_usd": 0.0}  # fmt: skip
    assert json.loads(status.body) == {
        "status": "idle", "success": True, "summary": "the answer", "usage": nothing,
    }  # fmt: skip
    assert status.sender == "lead/a" and status.event == 2
    assert int(rgit(w.root, "rev-list", "--count", "HEAD")) == int(before) + 1
    assert commits(w.root)[0]["Jpfs-Event"] == "status"
    # Top-level conversations have no parent to report to.
    reports.report_status(runner, Conversation(w.conv_root, "other"), True, "x")
    assert not (w.conv_root / "inbox").exists()
    assert Runner(w).on_finish is reports.report_status


def test_bad_ids_are_clear_errors(tree3: Workspace, cli: Callable[..., Result]) -> None:
    for args, needle in [
        (("mail", "check", "nope"), "no conversation 'nope'"),
        (("mail", "read", "lead", "m-xyz"), "bad message id"),
        (("mail", "send", "../x", "-s", "s", "b"), "'..'"),
        (("mail", "filter", "lead", "--kind", "memo"), "unknown message kind"),
    ]:
        result = cli(*args)
        assert result.code == 1 and needle in result.stderr, (args, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1
