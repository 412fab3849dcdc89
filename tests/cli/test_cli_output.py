"""What the CLI prints (issue #14): ``--format json`` with the documented keys on every
command that shows data, a header row on every table, ``jpfs log`` one line per event,
and every error one line on stderr. Real workspaces, real commands, through ``cli``."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Result, rgit, write_profile

Cli = Callable[..., Result]
PROTOCOL = Path(__file__).resolve().parents[2] / "protocol"

CONVERSATION = {"id", "parent", "title", "agent", "status", "events_count", "created", "updated",
                "hidden"}  # fmt: skip
TREE_ROW = {"id", "depth", "state", "agent", "model", "elapsed", "tokens", "cost_usd",
            "subtree_tokens", "subtree_cost_usd", "mail_waiting", "last", "title", "hidden"}  # fmt: skip
USAGE = {"input_tokens", "output_tokens", "cache_read_input_tokens",
         "cache_creation_input_tokens", "cost_usd", "cost_note"}  # fmt: skip
SHOWN = CONVERSATION | {"error", "usage", "subtree_usage"}
COST = {"by", "since", "until", "rows", "total"}
EVENT = {"seq", "role", "meta", "body"}
MATCH = {"id", "file", "line", "text"}
LOG_ENTRY = {"commit", "date", "author", "conversation", "event", "agent", "model", "usage",
             "note", "trailers"}  # fmt: skip
MESSAGE = {"id", "from", "to", "subject", "created", "kind", "read", "in_reply_to", "event"}
SETTING = {"key", "value", "source"}
STANDING = {"name", "runs_programs", "trusted", "changed"}
TOOL = {"name", "description", "input_schema"}
DAEMON_DOWN = {"running", "pid"}


@pytest.fixture
def busy(ws: Path, cli: Cli) -> dict[str, str]:
    """A workspace the demo agent worked in (sub-agents, tools, status mail), plus mail
    from the human and an idle conversation of the default agent; returns some ids."""
    done = cli("query", "--new", "--agent", "demo", "--no-onboard", "--non-interactive",
               "--no-activate", "Summarise this repository")  # fmt: skip
    assert done.code == 0, done.stderr
    lead = done.stderr.split("conversation ")[-1].split()[0]
    sent = cli("mail", "send", lead, "--no-start", "-s", "Hello there", "A needle in the body.")
    assert sent.code == 0, sent.stderr
    assert cli("c", "new", "plain", "--title", "A plain one").code == 0  # the active one
    return {"lead": lead, "message": sent.stdout.strip()}


def commands(ids: dict[str, str]) -> list[tuple[tuple[str, ...], str, set[str]]]:
    """(argv, what the doc's row starts with, keys) of every command that shows data."""
    lead, msg = ids["lead"], ids["message"]
    return [
        (("tree",), "jpfs tree", TREE_ROW),
        (("conversation", "ls"), "jpfs conversation ls", CONVERSATION),
        (("c", "ls", "--tree"), "jpfs conversation ls", CONVERSATION),
        (("c", "show", lead), "jpfs conversation show", SHOWN),
        (("c", "show"), "jpfs conversation show", SHOWN),
        (("cost",), "jpfs cost", COST),
        (("cost", lead, "--by", "model"), "jpfs cost", COST),
        (("c", "print", lead), "jpfs conversation print",
         CONVERSATION | {"task", "questions", "answers", "events", "mail_waiting", "mail_unread"}),
        (("c", "grep", "needle", "-i"), "jpfs conversation grep", MATCH),
        (("c", "grep", "needle", "-i", "-l"), "jpfs conversation grep", {"id", "file"}),
        (("c", "grep", "needle", "-i", "-c"), "jpfs conversation grep", {"id", "file", "count"}),
        (("doctor",), "jpfs doctor", {"name", "status", "detail", "fix"}),
        (("log",), "jpfs log", LOG_ENTRY),
        (("log", lead), "jpfs log", LOG_ENTRY),
        (("mail", "check", lead), "jpfs mail check", {"conversation_id", "unread", "messages"}),
        (("mail", "ls", lead), "jpfs mail ls", MESSAGE),
        (("mail", "filter", lead, "--kind", "status"), "jpfs mail ls", MESSAGE),
        (("mail", "read", lead, msg), "jpfs mail read", MESSAGE | {"body"}),
        (("config", "get", "daemon.max_agents"), "jpfs config get", SETTING),
        (("config", "show"), "jpfs config show", SETTING),
        (("config", "list"), "jpfs config show", SETTING),
        (("daemon", "status"), "jpfs daemon status", DAEMON_DOWN),
        (("trust", "--list"), "jpfs trust", STANDING),
        (("tools",), "jpfs tools", TOOL),
    ]  # fmt: skip


def documented(row_start: str) -> str:
    """The row of a "Machine-readable output" table in protocol/ for a command."""
    rows = []
    for doc in sorted(PROTOCOL.glob("*.md")):
        text = doc.read_text(encoding="utf-8")
        for section in re.split(r"^## ", text, flags=re.MULTILINE)[1:]:
            if section.startswith("Machine-readable output"):
                rows += [ln for ln in section.splitlines() if ln.startswith(f"| `{row_start}")]
    assert len(rows) == 1, f"{row_start}: {len(rows)} rows in protocol/*.md"
    return rows[0]


def objects(data: Any) -> list[dict[str, Any]]:
    return data if isinstance(data, list) else [data]


def test_every_data_command_prints_json_with_the_documented_keys(
    busy: dict[str, str], cli: Cli
) -> None:
    for argv, row_start, keys in commands(busy):
        result = cli(*argv, "--format", "json")
        down = argv == ("daemon", "status")  # not running: exit 1, as systemctl is-active
        assert result.code == (1 if down else 0), (argv, result.stderr)
        data = json.loads(result.stdout)
        assert objects(data), argv  # something to check the keys of
        for item in objects(data):
            assert set(item) == keys, (argv, set(item) ^ keys)
        row = documented(row_start)
        assert all(f"`{key}`" in row for key in keys), (row_start, keys, row)
    # The nested objects have their documented keys too.
    shown = json.loads(cli("c", "show", busy["lead"], "--format", "json").stdout)
    assert set(shown["usage"]) == set(shown["subtree_usage"]) == USAGE
    cost = json.loads(cli("cost", "--format", "json").stdout)
    assert cost["rows"] and all(set(r) == USAGE | {"conversation", "calls"} for r in cost["rows"])
    assert set(cost["total"]) == USAGE | {"calls"}
    assert all(f"`{key}`" in documented("jpfs cost") for key in USAGE | {"calls"})
    printed = json.loads(cli("c", "print", busy["lead"], "--format", "json").stdout)
    assert printed["events"] and all(set(ev) == EVENT for ev in printed["events"])
    assert all(f"`{key}`" in documented("jpfs conversation print") for key in EVENT)
    checked = json.loads(cli("mail", "check", busy["lead"], "--format", "json").stdout)
    assert checked["unread"] == len(checked["messages"]) == 2  # the status reports (mail: read)
    assert all(set(m) == MESSAGE for m in checked["messages"])
    assert json.loads(cli("c", "show", "--format", "json").stdout)["id"] == "plain"


def test_json_is_what_the_text_shows(busy: dict[str, str], cli: Cli) -> None:
    listed = json.loads(cli("c", "ls", "--format", "json").stdout)
    text = cli("c", "ls", "--full-ids").stdout.splitlines()
    assert [line.split()[0] for line in text[1:]] == [c["id"] for c in listed]
    log = json.loads(cli("log", "--format", "json").stdout)
    assert len(cli("log").stdout.splitlines()) == len(log) + 1
    setting = json.loads(cli("config", "get", "daemon.max_agents", "--format", "json").stdout)
    assert setting == {"key": "daemon.max_agents", "value": 4, "source": "default"} or (
        setting["value"] == 4 and setting["source"].endswith("config.toml")
    )
    assert cli("config", "get", "daemon.max_agents").stdout == "4\n"
    shown = cli("c", "show", busy["lead"]).stdout
    assert f"id: {busy['lead']}\n" in shown and "parent:\n" in shown and "hidden: false\n" in shown


def test_format_takes_text_or_json_and_refuses_anything_else(
    busy: dict[str, str], cli: Cli
) -> None:
    for argv, _, _ in commands(busy):
        refused = cli(*argv, "--format", "yaml")
        assert refused.code == 2, argv
        assert refused.stdout == ""
        lines = refused.stderr.splitlines()
        assert len(lines) == 1, (argv, refused.stderr)
        assert lines[0].startswith("jpfs: error: ") and "--format" in lines[0], lines[0]
        assert "'yaml' is not one of: text, json" in lines[0]
        if argv[0] != "daemon":
            text = cli(*argv, "--format", "text")
            assert text.code == 0 and text.stdout == cli(*argv).stdout, argv
    # The earlier spellings of text still work where they did.
    assert cli("c", "ls", "--format", "table").stdout == cli("c", "ls").stdout
    lead = busy["lead"]
    assert cli("c", "print", lead, "--format", "markdown").stdout == cli("c", "print", lead).stdout
    # A global option: before the command too.
    assert json.loads(cli("--format", "json", "log").stdout)


HEADERS = {
    ("tree",): [
        "ID",
        "STATE",
        "AGENT",
        "MODEL",
        "TIME",
        "TOKENS",
        "COST",
        "SUBTREE",
        "MAIL",
        "LAST",
    ],
    ("cost",): ["CONVERSATION", "CALLS", "INPUT", "OUTPUT", "CACHE-READ", "CACHE-WRITE", "COST"],
    ("c", "ls"): ["ID", "STATE", "AGENT", "EVENTS", "TITLE"],
    ("c", "ls", "--tree"): ["ID", "STATE", "AGENT", "EVENTS", "TITLE"],
    ("log",): ["TIME", "CONVERSATION", "EVENT", "AGENT", "AUTHOR", "NOTE"],
    ("config", "show"): ["KEY", "VALUE", "SOURCE"],
    ("trust", "--list"): ["PROFILE", "PROGRAMS", "TRUSTED"],
}
MAIL_HEADER = ["NEW", "ID", "KIND", "FROM", "CREATED", "SUBJECT"]


def test_tables_have_one_header_row_and_aligned_columns(busy: dict[str, str], cli: Cli) -> None:
    lead = busy["lead"]
    tables = {
        **HEADERS,
        ("mail", "check", lead): MAIL_HEADER,
        ("mail", "ls", lead): MAIL_HEADER,
        ("mail", "filter", lead, "--kind", "status"): MAIL_HEADER,
    }
    for argv, header in tables.items():
        result = cli(*argv)
        assert result.code == 0, (argv, result.stderr)
        lines = result.stdout.splitlines()
        assert lines[0].split() == header, (argv, lines[0])
        assert len(lines) > 1, argv
        # Each column starts where its name does (ps style), on every row.
        starts = [lines[0].index(name) for name in header]
        # tree's footer ("total: ...") is a sentence under the table, not a row of it.
        for line in (row for row in lines[1:] if not row.startswith("total: ")):
            for start in starts[1:]:
                if len(line) > start:  # empty cells at the end are not printed
                    assert line[start - 2 : start] == "  ", (argv, line)
    tree = cli("c", "ls", "--tree").stdout.splitlines()
    children = [line for line in tree[1:] if line.startswith("  ")]
    assert len(children) == 2  # the demo's two helpers, indented under their lead
    unread = cli("mail", "ls", lead).stdout.splitlines()[1:]
    assert all(line.startswith("*") for line in unread)
    assert cli("mail", "read", lead, busy["message"]).code == 0
    read = [ln for ln in cli("mail", "ls", lead).stdout.splitlines() if busy["message"] in ln]
    assert read[0].startswith(" ")


def record_events(ws: Path, *args: str) -> list[str]:
    """Every event the record holds (``git log``'s trailers), newest first."""
    out = rgit(ws, "log", "--format=%(trailers:key=Jpfs-Event,valueonly)%x1e", *args)
    return [ev for record in out.split("\x1e") for ev in record.split()]


def commit_in_record(ws: Path, message: str) -> None:
    """A commit made with plain git in the record worktree, as anyone may."""
    subprocess.run(
        ["git", "commit", "-q", "--allow-empty", "-F", "-"],
        cwd=ws / "conversations", input=message, text=True, check=True, capture_output=True,
    )  # fmt: skip


GROUP = """jpfs: 2 changes

- jpfs(plain): tool fs_read_file
- jpfs(plain): tool fs_list_files

Jpfs-Conversation: plain
Jpfs-Event: tool
Jpfs-Agent: default
Jpfs-Conversation: plain
Jpfs-Event: tool
Jpfs-Agent: default
"""


def test_log_prints_one_line_per_event(busy: dict[str, str], ws: Path, cli: Cli) -> None:
    commit_in_record(ws, GROUP)  # a group commit: two events of one conversation alike
    commit_in_record(ws, "tidy up by hand\n")  # no trailers: one edit
    lines = cli("log").stdout.splitlines()
    events = record_events(ws)
    assert len(lines) == 1 + len(events) + 1, "\n".join(lines)  # header, events, the edit
    body = [line.split() for line in lines[1:]]
    assert body[0][2:] == ["-", "edit", "-", "Test", "User", "tidy", "up", "by", "hand"]
    # The two events of the group commit: one line each, told apart by their note.
    assert body[1][2:] == ["plain", "tool", "default", "Test", "User", "fs_read_file"]
    assert body[2][2:] == ["plain", "tool", "default", "Test", "User", "fs_list_files"]
    # Agent commits name the agent (not "demo (jpfs agent)") and their model and tokens.
    turns = [line for line in lines if " assistant " in line]
    assert turns and all("script-demo" in line and " tokens" in line for line in turns)
    assert "(jpfs agent)" not in "\n".join(lines)
    assert lines[-1].split()[2:] == ["-", "init", "-", "Test", "User", "start", "the", "record"]
    # A subtree's log: its events only, one line each; -n counts events.
    lead = busy["lead"]
    mine = cli("log", lead, "--full-ids").stdout.splitlines()
    assert len(mine) == 1 + len(record_events(ws, "--", lead))
    assert all(line.split()[2].startswith(lead) for line in mine[1:])
    assert len(cli("log", "-n", "2").stdout.splitlines()) == 1 + 2
    entries = json.loads(cli("log", "-n", "2", "--format", "json").stdout)
    assert [e["note"] for e in entries] == ["tidy up by hand", "fs_read_file"]
    assert entries[1]["commit"] == rgit(ws, "rev-parse", "HEAD~1").strip()
    assert entries[1]["trailers"]["Jpfs-Event"] == "tool" and entries[1]["agent"] == "default"


def one_error_line(result: Result, code: int = 1) -> str:
    assert result.code == code, (result.code, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("jpfs: error: "), lines[0]
    return lines[0]


def test_a_query_without_an_api_key_is_one_error_line_and_writes_nothing(
    ws: Path, cli: Cli
) -> None:
    before = rgit(ws, "rev-parse", "HEAD")
    line = one_error_line(cli("query", "--new", "--non-interactive", "Hello"))
    assert "ANTHROPIC_API_KEY is not set" in line
    assert json.loads(cli("c", "ls", "--format", "json").stdout) == []
    assert rgit(ws, "rev-parse", "HEAD") == before
    # Continuing a conversation of that agent: the same one line.
    assert cli("c", "new", "waiting").code == 0
    line = one_error_line(cli("query", "--id", "waiting", "--non-interactive", "Hello"))
    assert "ANTHROPIC_API_KEY is not set" in line


def test_a_run_that_fails_ends_in_one_error_line(ws: Path, cli: Cli) -> None:
    write_profile(
        ws,
        "looper",
        'model = "script-looper"\nprovider = "script"\n'
        '[tools]\nallow = ["fs_list_files"]\n[limits]\nmax_turns = 1\n'
        "[onboarding]\nenabled = false\n" + '[[script.turns]]\ntext = "Looking."\n'
        'tool_calls = [{ name = "fs_list_files", input = { path = "." } }]\n' * 2,
        allowed=True,
    )
    result = cli("query", "--new", "--agent", "looper", "--non-interactive", "Go")
    assert result.code == 1, result.stderr
    assert result.stdout == ""
    *progress, last = result.stderr.splitlines()
    assert progress and all(line.startswith("[c-") for line in progress)  # how it went
    assert not [line for line in progress if "failed" in line]  # said once, at the end:
    assert last.startswith("jpfs: error: c-") and "failed: turn limit reached" in last


@pytest.mark.parametrize(
    ("argv", "code", "needle"),
    [
        (("c", "print", "nope"), 1, "no conversation 'nope'"),
        (("c", "show", "../x"), 1, "'..'"),
        (("answer", "plain", "yes"), 1, "no open questions"),
        (("config", "get", "daemon.nope"), 1, "unknown key"),
        (("mail", "read", "plain", "m-xyz"), 1, "bad message id"),
        (("c", "grep", "--regex", "("), 2, "bad regular expression"),
        (("tree", "--format", "xml"), 2, "see 'jpfs tree --help'"),
        (("c", "ls", "--nope"), 2, "No such option: --nope"),
        (("c", "lss"), 2, "No such command 'lss'"),
        (("retry",), 2, "Missing argument 'ID'"),
        (("log", "-n", "many"), 2, "--limit"),
        (("--format", "json", "init"), 2, "No such option: --format"),
        (("query", "--id", "plain", "--agent", "demo", "hi"), 2, "applies only to a new"),
    ],
)  # fmt: skip
def test_every_error_is_one_line(
    ws: Path, cli: Cli, argv: tuple[str, ...], code: int, needle: str
) -> None:
    assert cli("c", "new", "plain").code == 0
    line = one_error_line(cli(*argv), code)
    assert needle in line, line


def test_a_command_given_nothing_prints_its_help(ws: Path, cli: Cli) -> None:
    shown = cli("conversation")
    assert shown.code == 2 and "Commands:" in shown.stdout + shown.stderr
