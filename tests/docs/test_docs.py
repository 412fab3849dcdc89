"""Docs are tested: every fenced code block of README.md and protocol/*.md is run or
checked here, verbatim.

How it works
------------
:mod:`tests.docs.docblocks` finds every block (file, line, info string, text). ``DOCS`` below
maps each block, by its key (file + a hash of its info string and text, so any edit of
a block shows up), to a handler that runs or checks it, or to :class:`Excused` with the reason it
cannot run here. A block without an entry fails ``test_doc_block`` with "add a handler
or a reason"; an entry whose block is gone or changed fails
``test_every_registry_entry_names_a_block``. So new docs cannot go untested, and a
changed block is looked at again.

- ``sh`` blocks run line by line, as a shell would (comments kept), in a fresh
  temporary git repository, with ``jpfs`` on ``PATH`` (this virtual environment's
  ``bin``), ``HOME`` in the temporary directory, and the real anthropic SDK pointed at
  the local Messages API server (``tests/messages_server.py``), which answers as
  :class:`DocsModel` scripts. Each command line has a :class:`Step` with its documented
  outcome (exit status, what stdout / stderr show), checked after it runs. A command
  that runs until interrupted (``jpfs top``) gets Ctrl-C once it shows what the doc
  says; a daemon started by a block is always stopped (``jpfs daemon stop --force``).
  Where a human would wait (for the agent to ask, for the result), the step waits for
  that condition with a deadline, never for a fixed time.
- ``toml`` blocks are loaded with the loaders they document (profiles); ``json`` blocks
  are parsed and compared with what the program really prints or reads; markdown
  examples of jpfs's files are fed to jpfs's own parsers and their stated reading is
  checked; ``python`` blocks run in a workspace, with stdin for ``input()``; plain
  blocks (file trees, commit messages, graphs, output) are compared with what jpfs
  really creates or prints, and a command synopsis with the commands' ``--help``.
- A line or block that cannot run here is :class:`Excused` (or ``Step(excused=...)``)
  with its reason, shown as a skip; the list is short on purpose.

Placeholders
------------
The docs use a few placeholders. This is the one rule table; nothing else in a block
is ever changed. ``PLACEHOLDERS`` are substituted in the text of a command or config:

===================================  ==================================================
``c-01jh...``,                       the conversation id the last command printed (its
``c-01jh5w7x2k0000000000000000``     first ``conversation_id="..."``, top segment)
``c-01jh5w7x`` (alone)               that id's short form (``c-`` and 8 characters)
``/path/to/repo``                    the workspace's absolute path
===================================  ==================================================

and these are provided, not substituted, so the command runs as written:

- ``your-repo``: a git repository of that name in the directory the block starts in
  (a small project: ``README.md``, ``src/checkout.py``, ``src/tax.py``);
- ``$EDITOR``: the environment variable, naming a script that writes what the step
  says (the whole file, or ``KEY=VALUE`` lines of a unit file);
- ``~`` and ``$PWD``: the shell expands them (``HOME`` is temporary);
- ``origin``: a local bare repository added as the remote ``origin``;
- ``ANTHROPIC_API_KEY``: set, with ``ANTHROPIC_BASE_URL``, to the local server;
- ``Your Name`` in shown output: the user's git identity (``GIT_AUTHOR_NAME``);
- in shown output (a ``$`` transcript), ``…`` stands for any text, a time for any
  time, and ``(exit status N)`` at the end of a line is the command's exit status;
- in front matter, a line ``...`` stands for keys left out, and is dropped before
  parsing; in a profile, ``...`` under ``[[tools.command]]`` stands for the rest of
  the command tool the document shows in full further down.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import git, wait_until, write_profile
from tests.docs import docs_steering as steering
from tests.docs import docs_thinking as thinking
from tests.docs.docblocks import ROOT, Block, blocks
from tests.messages_server import (
    Answer,
    JsonDict,
    MessagesServer,
    Response,
    content_text,
    error_reply,
    text_reply,
    tool_use_reply,
)

BIN = Path(sys.executable).parent

# --- placeholders ---------------------------------------------------------------------


@dataclass
class Shell:
    """A shell session: each command line runs in ``bash`` in the session's directory
    (``cd`` carries over), with the session's environment."""

    cwd: Path
    env: dict[str, str]
    scratch: Path  # the test's own files (the $EDITOR script, the shell's cwd after a line)
    workspace: Path | None = None
    # The conversation id the last command printed (``conversation_id="..."``).
    last_id: str | None = None
    log: list[str] = field(default_factory=list)

    def workspace_path(self) -> str:
        return str(self.workspace or self.cwd)

    def conversation_id(self) -> str:
        assert self.last_id, "no command printed a conversation id before this one"
        return self.last_id


PLACEHOLDERS: list[tuple[re.Pattern[str], Callable[[Shell], str]]] = [
    (re.compile(r"c-01jh5w7x2k0000000000000000|c-01jh\.\.\."), Shell.conversation_id),
    # The short id listings show and people type (protocol/layout.md, "Typing ids"): the
    # first 8 characters after "c-" (one conversation in the workspace: no more needed).
    (re.compile(r"c-01jh5w7x(?![0-9a-z])"), lambda shell: shell.conversation_id()[:10]),
    (re.compile(r"/path/to/repo"), Shell.workspace_path),
]


def substitute(text: str, shell: Shell) -> str:
    """``text`` with the placeholders of ``PLACEHOLDERS`` replaced, nothing else."""
    for pattern, value in PLACEHOLDERS:
        if pattern.search(text):
            text = pattern.sub(value(shell).replace("\\", "\\\\"), text)
    return text


# --- running sh blocks ------------------------------------------------------------------


@dataclass(frozen=True)
class Done:
    line: str
    rc: int
    out: str
    err: str


@dataclass
class Step:
    """What one command line of a block does, as the doc states it."""

    rc: int = 0
    out: Sequence[str] = ()  # regular expressions stdout matches (re.search, MULTILINE)
    err: Sequence[str] = ()  # ... and stderr
    edit: Any = None  # what $EDITOR writes on this line: text, or {"set": {KEY: VALUE}}
    before: Callable[[Shell], object] | None = None  # what a human waits for first
    after: Callable[[Shell, Done], object] | None = None  # further checks
    until: Callable[[str], bool] | None = None  # runs until Ctrl-C, sent once stdout shows it
    tty: bool = False  # stdout is a terminal (a pseudo-terminal 200 columns wide)
    stdin: str = ""
    excused: str = ""  # a line that cannot run here, and why
    unless: Callable[[Shell], str] | None = None  # a reason it cannot run now ("": it can)


EDITOR = f"""#!{sys.executable}
# $EDITOR for the docs' tests: writes what DOCTEST_EDIT says into the file it is given.
import json, os, re, sys
spec = json.loads(os.environ["DOCTEST_EDIT"])
path = sys.argv[-1]
if isinstance(spec, str):
    text = spec
else:
    with open(path, encoding="utf-8") as f:
        text = f.read()
    for key, value in spec["set"].items():
        text = re.sub("^" + re.escape(key) + "=.*$", lambda m: key + "=" + value, text,
                      flags=re.M)
with open(path, "w", encoding="utf-8") as f:
    f.write(text)
"""

_ID = re.compile(r'conversation_id="([a-z0-9][a-z0-9._-]*)')


def new_shell(tmp: Path, cwd: Path) -> Shell:
    tools = tmp / "doc-tools"
    tools.mkdir(exist_ok=True)
    editor = tools / "editor"
    editor.write_text(EDITOR, encoding="utf-8")
    editor.chmod(0o755)
    scratch = tmp / "tmpdir"  # what the commands leave in $TMPDIR (make demo's project)
    scratch.mkdir(exist_ok=True)
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "EDITOR": str(editor),
        "TMPDIR": str(scratch),
    }
    env.pop("DOCTEST_EDIT", None)
    return Shell(cwd=cwd, env=env, scratch=tools)


def run_line(shell: Shell, line: str, step: Step) -> Done:
    command = substitute(line, shell)
    pwd_file = shell.scratch / "pwd"
    env = dict(shell.env)
    if step.edit is not None:
        env["DOCTEST_EDIT"] = json.dumps(step.edit)
    script = f"{command}\n__doc_rc=$?; pwd > {shlex.quote(str(pwd_file))}; exit $__doc_rc\n"
    argv = ["bash", "--noprofile", "--norc", "-c", script]
    if step.until is None:
        proc = subprocess.run(
            argv, cwd=shell.cwd, env=env, input=step.stdin, capture_output=True, text=True,
            timeout=120, check=False,
        )  # fmt: skip
        rc, out, err = proc.returncode, proc.stdout, proc.stderr
    else:
        rc, out, err = run_until(argv, shell, env, step.until, line, tty=step.tty)
    if pwd_file.exists():
        shell.cwd = Path(pwd_file.read_text(encoding="utf-8").strip())
        pwd_file.unlink()
    return Done(command, 128 - rc if rc < 0 else rc, out, err)


def run_until(
    argv: list[str],
    shell: Shell,
    env: dict[str, str],
    until: Callable[[str], bool],
    line: str,
    *,
    tty: bool = False,
) -> tuple[int, str, str]:
    """Run a command that runs until interrupted; once its output shows ``until``, press
    Ctrl-C (SIGINT to its process group, as a terminal does). With ``tty``, its stdout
    is a pseudo-terminal, as in the terminal the doc shows it in."""
    import fcntl
    import pty
    import struct
    import termios

    terminal, inner = pty.openpty() if tty else (-1, -1)
    if tty:
        fcntl.ioctl(inner, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
    env = {k: v for k, v in env.items() if k not in ("COLUMNS", "LINES")} if tty else env
    proc = subprocess.Popen(
        argv, cwd=shell.cwd, env=env, stdin=subprocess.DEVNULL,
        stdout=inner if tty else subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True,
    )  # fmt: skip
    if tty:
        os.close(inner)
    chunks: list[bytes] = []

    def read() -> None:
        assert proc.stdout is not None or tty
        fd = terminal if tty else proc.stdout.fileno()  # type: ignore[union-attr]
        try:
            while chunk := os.read(fd, 65536):
                chunks.append(chunk)
        except OSError:  # EIO: the terminal's other end closed
            pass

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        wait_until(
            lambda: until(b"".join(chunks).decode("utf-8", "replace")) or proc.poll() is not None,
            timeout=60,
            message=f"`{line}` to show what the doc says",
        )
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        reader.join(timeout=10)
        if tty:
            os.close(terminal)
    assert proc.stderr is not None
    err = proc.stderr.read().decode("utf-8", "replace")
    return proc.returncode, b"".join(chunks).decode("utf-8", "replace"), err


def commands(block: Block) -> list[tuple[int, str]]:
    """The lines a shell would run: not blank, not only a comment."""
    return [(n, s) for n, s in block.numbered() if s.strip() and not s.lstrip().startswith("#")]


def run_block(block: Block, shell: Shell, steps: Sequence[tuple[str, Step]]) -> list[Done]:
    """Run every command line of ``block`` in order; ``steps`` pairs the start of each
    line with what it must do. A line without a step, or a step without its line, fails."""
    lines = commands(block)
    assert len(lines) == len(steps), (
        f"{block.where}: {len(lines)} command lines, {len(steps)} steps: "
        + " | ".join(s for _, s in lines)
    )
    done: list[Done] = []
    for (number, line), (start, step) in zip(lines, steps, strict=True):
        where = f"{block.path}:{number} `{line.strip()}`"
        assert line.strip().startswith(start), f"{where}: expected a line starting {start!r}"
        reason = step.excused or (step.unless(shell) if step.unless else "")
        if reason:
            shell.log.append(f"{where}: not run: {reason}")
            continue
        if step.before is not None:
            step.before(shell)
        result = run_line(shell, line.strip(), step)
        shell.log.append(f"{where}: exit {result.rc}")
        shown = f"{where}\n--- stdout\n{result.out}\n--- stderr\n{result.err}"
        assert result.rc == step.rc, f"exit {result.rc}, the doc says {step.rc}: {shown}"
        for pattern in step.out:
            assert re.search(pattern, result.out, re.M), f"stdout lacks /{pattern}/: {shown}"
        for pattern in step.err:
            assert re.search(pattern, result.err, re.M), f"stderr lacks /{pattern}/: {shown}"
        found = _ID.search(result.out)
        if found:
            shell.last_id = found.group(1).split("/")[0]
        if step.after is not None:
            step.after(shell, result)
        done.append(result)
    if not done:
        pytest.skip(f"{block.where}: no line could run here: " + "; ".join(shell.log))
    return done


# --- the model the docs' agents talk to -----------------------------------------------


class DocsModel:
    """Answers the Messages API requests of the docs' examples, by their task.

    Onboarding: asks the question the doc shows for that task until the Q&A holds an
    answer, then starts work (no question for a task not in ``questions``). Work: the
    scripted turns for the task, one per assistant turn so far. Every reply names the
    model it was asked for, as the API does, and reports the token counts the doc
    shows for that step (``usage``: onboarding ask, ready, then each work turn).
    """

    def __init__(self) -> None:
        self.questions: dict[str, str] = {
            "Refactor the billing module": (
                "Which module is in scope: `billing` only, or `billing` and `invoices`?"
            ),
            "Why is checkout slow?": "Which environment: production or staging?",
            "to Postgres": "Which database driver does the code use?",
        }
        self.work: dict[str, list[Answer | Callable[[JsonDict], Answer]]] = {
            "Where do we validate user input?": [
                text_reply("In src/checkout.py: validate_order() checks every field."),
            ],
            "Refactor the billing module": [text_reply("Done: billing reads well now.")],
            "Why is checkout slow?": [
                tool_use_reply(("fs_read_file", {"path": "src/tax.py"})),
                text_reply("The slowest step is the tax lookup in src/tax.py:41 ..."),
            ],
            "to Postgres": [text_reply("src/db.py:3: SELECT id, name FROM users")],
        }
        # protocol/onboarding.md's transcript shows these.
        self.usage = {"Why is checkout slow?": [(1620, 58), (1804, 31), (2270, 95), (3012, 240)]}

    def __call__(self, request: JsonDict) -> Answer:
        messages = request.get("messages", [])
        first = content_text(messages[0].get("content")) if messages else ""
        tools = {t.get("name") for t in request.get("tools", [])}
        topic = next((t for t in [*self.questions, *self.work] if t in first), None)
        if topic is None:
            return error_reply(400, f"the docs' model has no script for {first[:100]!r}")
        if "ask_caller" in tools:
            answered = "Answers:" in first or topic not in self.questions
            step = 1 if answered else 0
            if answered:
                reply: Answer = tool_use_reply(("start_work", {}))
            else:
                reply = tool_use_reply(("ask_caller", {"questions": [self.questions[topic]]}))
        else:
            turn = sum(1 for m in messages if m.get("role") == "assistant")
            turns = self.work[topic]
            scripted, step = turns[min(turn, len(turns) - 1)], 2 + turn
            reply = scripted(request) if callable(scripted) else scripted
        return self.stamped(reply, request, self.usage.get(topic, [])[step : step + 1])

    @staticmethod
    def stamped(reply: Answer, request: JsonDict, usage: list[tuple[int, int]]) -> Answer:
        if not isinstance(reply, Response) or not isinstance(reply.body, dict):
            return reply
        body = {**reply.body, "model": request.get("model", reply.body.get("model"))}
        if usage:
            body["usage"] = {"input_tokens": usage[0][0], "output_tokens": usage[0][1]}
        return Response(reply.status, body, reply.headers, reply.delay, reply.content_type)


# --- fixtures and helpers ---------------------------------------------------------------


@dataclass
class Env:
    tmp: Path
    server: MessagesServer
    model: DocsModel
    blocks: dict[str, Block] = field(repr=False)

    def shell(self, cwd: Path | None = None) -> Shell:
        start = cwd or self.tmp / "start"
        start.mkdir(parents=True, exist_ok=True)
        return new_shell(self.tmp, start)


def project(path: Path) -> Path:
    """The small git project the docs' commands run in (``your-repo``)."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    files = {
        "README.md": "# shop\n\nA small web shop.\n",
        "src/checkout.py": "def validate_order(order):\n    return bool(order.get('items'))\n",
        "src/tax.py": "def tax(amount):\n    return round(amount * 0.2, 2)\n",
        "src/db.py": 'USERS = "SELECT id, name FROM users"\n',
    }
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text, encoding="utf-8")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "initial commit")
    return path


def workspace(env: Env) -> Path:
    """``project`` with ``jpfs init`` done, as a user has it after the tour's first step."""
    path = project(env.tmp / "ws")
    done = subprocess.run(
        [str(BIN / "jpfs"), "init"], cwd=path, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return path


def jpfs(cwd: Path, *args: str, rc: int | None = 0) -> subprocess.CompletedProcess[str]:
    """``jpfs ARGS`` in ``cwd``, its exit status checked (unless ``rc`` is None)."""
    done = subprocess.run(
        [str(BIN / "jpfs"), *args], cwd=cwd, capture_output=True, text=True, check=False,
        timeout=120,
    )  # fmt: skip
    assert rc is None or done.returncode == rc, (
        f"jpfs {' '.join(args)}: exit {done.returncode}\n{done.stderr}"
    )
    return done


def block_at(env: Env, path: str, needle: str) -> Block:
    """The one block of ``path`` whose text holds ``needle``."""
    (found,) = [b for b in env.blocks.values() if b.path == path and needle in b.text]
    return found


def file_shows(path: Path, pattern: str) -> Callable[[], bool]:
    def check() -> bool:
        try:
            return re.search(pattern, path.read_text(encoding="utf-8"), re.M) is not None
        except FileNotFoundError:
            return False

    return check


# --- README.md --------------------------------------------------------------------------


def readme_tour(block: Block, env: Env) -> None:
    shell = env.shell()
    repo = project(shell.cwd / "your-repo")
    shell.workspace = repo
    answer = "In src/checkout.py: validate_order() checks every field."

    def initialised(sh: Shell, _d: Done) -> None:
        assert (repo / ".jpfs" / "config.toml").is_file()
        assert git(repo / "conversations", "branch", "--show-current").strip() == "jpfs-record"

    def only_the_answer(sh: Shell, d: Done) -> None:
        assert d.out == answer + "\n"

    def states(sh: Shell, d: Done) -> None:
        rows = d.out.splitlines()[1:]
        tops = [r.split() for r in rows if not r.startswith(" ")]
        children = [r.split() for r in rows if r.startswith(" ")]  # indented under the demo
        assert [r[1] for r in tops] == ["idle", "idle"], d.out
        assert [r[2] for r in children] == ["demo-helper", "demo-helper"], d.out

    run_block(
        block,
        shell,
        [
            ("cd your-repo", Step()),
            ("jpfs init", Step(err=[r"initialised jpfs workspace"], after=initialised)),
            ('jpfs query "Where', Step(after=only_the_answer)),
            (
                "jpfs query --new --agent demo",
                Step(rc=4, out=[r'\A<questions conversation_id="c-[0-9a-z]{26}">\n1\. ']),
            ),
            (
                "jpfs answer c-01jh...",
                Step(out=[r"^Summary for: Summarise this repository", r"^Focus on src/"]),
            ),
            ("jpfs conversation ls --tree", Step(out=[r"^ID +STATE +AGENT"], after=states)),
            (
                "jpfs conversation print c-01jh...",
                Step(out=[r"^## Task$", r"^## Questions$", r"^## Answers$", r"^### 0001 · user"]),
            ),
            (
                "jpfs conversation grep src/",
                Step(out=[r"^c-[0-9a-z]{8,26}:answers\.md:\d+: Focus on src/$"]),
            ),
            (
                "jpfs log",
                Step(out=[r"^TIME +CONVERSATION +EVENT", r" task ", r" questions ", r" result "]),
            ),
            (
                "git -C conversations log --stat -3",
                Step(out=[r"^    Jpfs-Event: result$", r"(?s)(^commit .*){3}"]),
            ),
        ],
    )


def assert_no_demo_left(tmpdir: Path) -> None:
    assert not list(tmpdir.glob("jpfs-demo-*")), list(tmpdir.iterdir())


def make_demo_and_test(block: Block, env: Env) -> None:
    def venv_is_current(_sh: Shell) -> str:
        fresh = subprocess.run(["make", "-q", "venv"], cwd=ROOT, capture_output=True, check=False)
        if fresh.returncode != 0:
            return "make would rebuild .venv first (pip, from the network, in the venv running us)"
        return ""

    run_block(
        block,
        env.shell(ROOT),
        [
            (
                "make demo",
                Step(
                    unless=venv_is_current,
                    out=[r"^\$ jpfs log", r"Everything above is plain files and commits in "],
                    # The demo's repository is gone with it (make demo KEEP=1 keeps it).
                    after=lambda sh, _d: assert_no_demo_left(Path(sh.env["TMPDIR"])),
                ),
            ),
            ("make test", Step(excused="runs ruff, mypy and the whole suite, this test too")),
        ],
    )


def python_onboarding(block: Block, env: Env) -> None:
    """The library example: the researcher asks one question (answered on stdin), then
    the ready handle is called and its answer printed."""
    ws = workspace(env)
    done = subprocess.run(
        [sys.executable, "-c", block.text], cwd=ws, input="psycopg2\n", capture_output=True,
        text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    question = "1. Which database driver does the code use?"
    answer = "src/db.py:3: SELECT id, name FROM users"
    # input() shows the question and the prompt; print() the answer (its text ends in a
    # line break of its own).
    assert done.stdout.rstrip("\n") in (f"{question}\n> {answer}", f"{question}{answer}")
    (template,) = [p for p in (ws / "conversations").iterdir() if p.name.startswith("c-")]
    meta = tomllib.loads((template / "conversation.toml").read_text(encoding="utf-8"))
    assert meta["mode"] == "template" and meta["agent"] == "researcher"
    assert "psycopg2" in (template / "answers.md").read_text(encoding="utf-8")
    (child,) = [p for p in template.iterdir() if p.name.startswith("c-")]
    assert answer in (child / "result.md").read_text(encoding="utf-8")


def readme_daemon(block: Block, env: Env) -> None:
    shell = env.shell(workspace(env))
    shell.workspace = shell.cwd
    conv = shell.cwd / "conversations" / "refactor"

    def history(sh: Shell, d: Done) -> None:
        lines = d.out.splitlines()
        user, agent = "Test User: ", "default (jpfs agent): "
        assert lines[-1] == f"{user}jpfs(refactor): task", d.out
        assert f"{user}jpfs(refactor): answers" in lines, d.out
        assert lines[0] == f"{agent}jpfs(refactor): result", d.out
        assert f"{agent}jpfs(refactor): questions" in lines, d.out

    def stopped(sh: Shell, _d: Done) -> None:
        assert jpfs(sh.cwd, "daemon", "status", rc=1).stdout.startswith("not running")

    try:
        run_block(
            block,
            shell,
            [
                ("jpfs daemon start", Step(out=[r"\A[0-9]+\n\Z"])),
                ("mkdir -p conversations/refactor", Step()),
                (
                    "$EDITOR conversations/refactor/task.md",
                    Step(edit="Refactor the billing module for readability.\n"),
                ),
                (
                    "jpfs top",
                    Step(
                        rc=130,
                        until=lambda out: bool(re.search(r"^refactor +waiting", out, re.M)),
                        tty=True,
                    ),
                ),
                (
                    "$EDITOR conversations/refactor/answers.md",
                    Step(
                        before=lambda _sh: wait_until(
                            file_shows(conv / "questions.md", r"^## Round 1$"), timeout=30
                        ),
                        edit="# Answers\n\n## Round 1\n\n1. billing only.\n",
                    ),
                ),
                (
                    "cat conversations/refactor/result.md",
                    Step(
                        before=lambda _sh: wait_until(
                            (conv / "result.md").exists, timeout=30, message="the result"
                        ),
                        out=[r"^success = true$", r"^Done: billing reads well now\.$"],
                    ),
                ),
                (
                    "git -C conversations log",
                    Step(
                        before=lambda sh: wait_until(
                            lambda: "result" in git(sh.cwd / "conversations", "log", "-1"),
                            timeout=30,
                            message="the result's commit",
                        ),
                        after=history,
                    ),
                ),
                ("jpfs daemon status", Step(out=[r"\brunning\b", r"\bpid\b"])),
                ("jpfs daemon stop", Step(after=stopped)),
            ],
        )
    finally:
        jpfs(shell.cwd, "daemon", "stop", "--force", "--timeout", "20")


def readme_systemd(block: Block, env: Env) -> None:
    """The unit file as the block installs and edits it, then started the way systemd
    would start it (``systemctl --user`` needs a user session this test does not have):
    ``ExecStart`` in ``WorkingDirectory`` with ``EnvironmentFile`` and ``Environment``."""
    ws = workspace(env)
    home = Path(os.environ["HOME"])
    shell = env.shell(ROOT)  # `templates/` is in the jpfs checkout
    no_systemd = "needs systemd's user manager (a user session bus), which a test has not"
    run_block(
        block,
        shell,
        [
            ("mkdir -p ~/.config/systemd/user", Step()),
            ("cp templates/jpfs-daemon.service", Step()),
            (
                "$EDITOR ~/.config/systemd/user/jpfs-daemon.service",
                Step(
                    edit={
                        "set": {
                            "WorkingDirectory": str(ws),
                            "ExecStart": f"{BIN / 'jpfs'} daemon run",
                        }
                    }
                ),
            ),
            ('echo "ANTHROPIC_API_KEY=..."', Step()),
            ("systemctl --user daemon-reload", Step(excused=no_systemd)),
            ("systemctl --user enable --now jpfs-daemon", Step(excused=no_systemd)),
            ("journalctl --user -u jpfs-daemon -f", Step(excused=no_systemd)),
        ],
    )
    unit = (home / ".config/systemd/user/jpfs-daemon.service").read_text(encoding="utf-8")
    service = dict(re.findall(r"^(\w+)=(.*)$", unit.split("[Service]")[1].split("\n[")[0], re.M))

    def expand(value: str) -> str:  # systemd's specifier for the user's home
        return value.replace("%h", str(home))

    env_file = Path(expand(service["EnvironmentFile"]).lstrip("-"))
    assert env_file.is_file(), f"the block writes the keys where the unit reads them: {env_file}"
    variables = dict(line.split("=", 1) for line in env_file.read_text().splitlines() if line)
    assert variables == {"ANTHROPIC_API_KEY": "..."}
    variables.update([service["Environment"].split("=", 1)])
    variables.update(HOME=str(home), PATH=os.defpath)
    proc = subprocess.Popen(
        shlex.split(expand(service["ExecStart"])), cwd=expand(service["WorkingDirectory"]),
        env=variables, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        wait_until(
            lambda: (
                jpfs(ws, "daemon", "status", rc=None).returncode == 0 or proc.poll() is not None
            ),
            timeout=30,
            message="the unit's daemon to be ready",
        )
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        assert service["KillSignal"] == "SIGTERM"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0  # daemon.md: "0 after a stop by signal"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


async def mcp_tools(command: str, args: list[str], cwd: Path, env: dict[str, str]) -> list[str]:
    from mcp import ClientSession, StdioServerParameters, stdio_client

    params = StdioServerParameters(command=command, args=args, cwd=cwd, env=env)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        return [t.name for t in (await session.list_tools()).tools]


def serve_mcp_json(config: dict[str, Any], shell: Shell) -> list[str]:
    """Start the server as a client reads it from ``.mcp.json``, from another directory,
    and list its tools."""
    import anyio

    server = config["mcpServers"]["jpfs"]
    elsewhere = shell.cwd.parent / "client-cwd"
    elsewhere.mkdir(exist_ok=True)
    return anyio.run(mcp_tools, server["command"], server["args"], elsewhere, shell.env)


CLAUDE = ROOT / "tests" / "clients" / "node_modules" / ".bin" / "claude"


def claude_mcp_add(block: Block, env: Env) -> None:
    """``claude mcp add`` (the pinned Claude Code, offline) writes .mcp.json: it must be
    the README's hand-written ``.mcp.json``, and the server it names must serve."""
    shell = env.shell(workspace(env))
    shell.workspace = shell.cwd
    shell.env["PATH"] = f"{CLAUDE.parent}{os.pathsep}{shell.env['PATH']}"
    nowhere = "http://127.0.0.1:9"  # nothing listens: Claude Code stays offline
    shell.env.update(
        HTTPS_PROXY=nowhere, HTTP_PROXY=nowhere, https_proxy=nowhere, http_proxy=nowhere,
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", DISABLE_AUTOUPDATER="1",
        DISABLE_TELEMETRY="1", DISABLE_ERROR_REPORTING="1",
    )  # fmt: skip

    if not CLAUDE.exists():
        message = f"Claude Code is not installed at {CLAUDE} (make test installs it)"
        if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
            pytest.fail(message)
        # Without it, at least the server command after `--` must serve, as written.
        line = commands(block)[0][1]
        argv = shlex.split(line.replace('"$PWD"', shlex.quote(str(shell.cwd))))
        command, *args = argv[argv.index("--") + 1 :]
        assert "jp_query" in serve_mcp_json(
            {"mcpServers": {"jpfs": {"command": command, "args": args}}}, shell
        )
        pytest.skip(message)
    run_block(block, shell, [("claude mcp add", Step(out=[r"Added stdio MCP server"]))])
    config = json.loads((shell.cwd / ".mcp.json").read_text(encoding="utf-8"))
    by_hand = json.loads(substitute(block_at(env, "README.md", '"mcpServers"').text, shell))
    written = dict(config["mcpServers"]["jpfs"])
    assert written.pop("type") == "stdio" and written.pop("env") == {}  # its defaults
    assert {"mcpServers": {"jpfs": written}} == by_hand
    assert "jp_query" in serve_mcp_json(config, shell)


def mcp_json(block: Block, env: Env) -> None:
    shell = env.shell(workspace(env))
    shell.workspace = shell.cwd
    config = json.loads(substitute(block.text, shell))
    assert config["mcpServers"]["jpfs"]["args"] == ["mcp", "-w", str(shell.cwd)]
    tools = serve_mcp_json(config, shell)
    assert tools[:4] == [
        "jp_query", "jp_conversation_list", "jp_conversation_print", "jp_conversation_grep",
    ]  # fmt: skip


def readme_tools(block: Block, env: Env) -> None:
    def schemas(_sh: Shell, d: Done) -> None:
        tools = json.loads(d.out)
        assert tools and all(set(t) == {"name", "description", "input_schema"} for t in tools)
        assert all(t["input_schema"]["type"] == "object" for t in tools)

    run_block(
        block,
        env.shell(workspace(env)),
        [
            ("jpfs tools ", Step(out=[r"^jp_query\b"])),
            ("jpfs tools --format json", Step(out=[r"\A\["], after=schemas)),
        ],
    )


def with_remote(env: Env, ws: Path) -> Path:
    remote = env.tmp / "origin.git"
    git(env.tmp, "init", "-q", "--bare", str(remote))
    git(ws, "remote", "add", "origin", str(remote))
    return remote


def pushed_and_reattached(env: Env, remote: Path) -> Callable[[Shell, Done], None]:
    """The record is on the remote, and ``jpfs init`` in a clone checks it out again."""

    def check(sh: Shell, _d: Done) -> None:
        assert git(remote, "rev-parse", "jpfs-record") == git(sh.cwd, "rev-parse", "jpfs-record")
        clone = env.tmp / "clone"
        git(env.tmp, "clone", "-q", str(remote), str(clone))
        jpfs(clone, "init")
        assert (clone / "conversations" / "refactor" / "conversation.toml").is_file()

    return check


def readme_record(block: Block, env: Env) -> None:
    ws = workspace(env)
    jpfs(ws, "conversation", "new", "refactor", "--no-activate")
    remote = with_remote(env, ws)
    run_block(
        block,
        env.shell(ws),
        [
            (
                "git -C conversations log --oneline -3",
                Step(
                    out=[r"\A[0-9a-f]+ jpfs\(refactor\): new\n[0-9a-f]+ jpfs: start the record\n\Z"]
                ),
            ),
            (
                "git log --all --oneline --graph -5",
                Step(
                    out=[r"^\* [0-9a-f]+ jpfs\(refactor\): new$", r"^\* [0-9a-f]+ initial commit$"]
                ),
            ),
            ("git push origin jpfs-record", Step(after=pushed_and_reattached(env, remote))),
        ],
    )


# --- protocol/agents.md ----------------------------------------------------------------


def load_profile(env: Env, text: str, name: str = "doc") -> Any:
    from jpfs.core import profiles

    agents = env.tmp / "agents"
    agents.mkdir(exist_ok=True)
    (agents / f"{name}.toml").write_text(text, encoding="utf-8")
    return profiles.load(agents, name)


def readme_local_model(block: Block, env: Env) -> None:
    """The local-model profile loads as documented, and runs: one model call through
    the real openai SDK (no key set) against a local Chat Completions server standing
    in for Ollama, its base_url the one thing changed."""
    import threading

    from jpfs.core import profiles
    from jpfs.infra.providers import make as make_provider
    from jpfs.infra.providers.base import Request
    from tests.chat_server import ChatServer, chat_text

    profile = load_profile(env, block.text, "local")
    assert profile.config["provider"] == "openai"
    assert profile.config["base_url"] == "http://localhost:11434/v1"
    assert "api_key_env" not in profile.config
    with pytest.MonkeyPatch.context() as patch, ChatServer() as server:
        patch.delenv("OPENAI_API_KEY", raising=False)
        patch.delenv("OPENAI_BASE_URL", raising=False)
        server.enqueue(chat_text("hi from qwen"))
        provider = make_provider({**profile.config, "base_url": server.url})
        request = Request(
            model=profile.model,
            system=profiles.system_prompt(profile.config),
            messages=[{"role": "user", "content": "hello"}],
            max_tokens=int(profile.config["max_tokens"]),
            timeout=float(profile.config["timeout"]),
        )
        reply = provider.complete(request, threading.Event())
        sent = server.requests[0]
    assert reply.text == "hi from qwen"
    assert sent.body["model"] == "qwen3:8b" and sent.headers["authorization"] == "Bearer unused"


def agents_profile(block: Block, env: Env) -> None:
    """The profile, its ``...`` filled with the command tool shown in full below it."""
    from jpfs.errors import ProfileError
    from jpfs.tools.registry import build_tools

    tool = block_at(env, "protocol/agents.md", "[tools.command.parameters").text
    name_line = 'name = "run_tests"\n'
    assert re.search(
        r"^\[\[tools\.command\]\].*\n" + re.escape(name_line) + r"\.\.\.\n", block.text, re.M
    )
    rest = tool.split(name_line, 1)[1]
    tables = rest.index("[tools.command.parameters")
    # The command tool's own keys go where `...` is; its parameter tables at the end.
    text = block.text.replace("...\n", rest[:tables]) + "\n" + rest[tables:]
    profile = load_profile(env, text)
    config = profile.config
    assert (config["model"], config["provider"], config["workspace"]) == (
        "claude-sonnet-4-6", "anthropic", "shared",
    )  # fmt: skip
    assert (config["max_tokens"], config["timeout"], config["overridable"]) == (
        8192,
        600,
        ["model"],
    )
    assert list(config["system"]) == ["role", "method"]
    assert config["tools"]["allow"] == ["fs_read_file", "fs_list_files", "fs_grep_files"]
    assert config["limits"] == {"max_turns": 25, "max_children": 8, "max_depth": 3}
    assert config["onboarding"] == {"enabled": True, "max_rounds": 3}
    # "exactly these exist": the three file tools, and the declared command tool.
    assert list(build_tools(config, env.tmp / "agents")) == [
        "fs_read_file", "fs_list_files", "fs_grep_files", "run_tests",
    ]  # fmt: skip
    # "required: a profile without it is refused"; unknown keys name the file and key.
    with pytest.raises(ProfileError, match="must name its model"):
        load_profile(env, text.replace('model = "claude-sonnet-4-6"', ""), "nomodel")
    with pytest.raises(ProfileError, match=r"typo\.toml: unknown key 'modle'"):
        load_profile(env, 'modle = "x"\n' + text, "typo")


def command_tool(block: Block, env: Env) -> None:
    """The command tool in a minimal profile: its schema, and the argv / environment a
    call gets, checked the way the text below the block says."""
    from jpfs.core.tool import check_arguments
    from jpfs.errors import ToolError
    from jpfs.tools.command import build_command
    from jpfs.tools.command_spec import parse_command_tools
    from jpfs.tools.registry import build_tools

    profile = load_profile(env, 'model = "m"\n' + block.text)
    tool = build_tools(profile.config, env.tmp / "agents")["run_tests"]
    schema = tool.input_schema
    assert schema["required"] == ["package"]
    assert schema["properties"]["package"]["enum"] == ["core", "cli"]
    (spec,) = parse_command_tools(profile.config["tools"])
    assert spec.timeout == 120
    argv, environ = build_command(spec, {"package": "core", "filter": "; rm -rf /"}, env.tmp)
    assert Path(argv[0]).name == "pytest" and argv[1:] == ["-q", "core"]
    assert environ["TEST_FILTER"] == "; rm -rf /"  # just a string, never a shell
    assert "ANTHROPIC_API_KEY" not in environ
    with pytest.raises(ToolError):
        check_arguments(tool, {"package": "; rm -rf /"})  # not in the enum


# --- protocol/branches.md ---------------------------------------------------------------

BRANCH_PROFILE = """
model = "script"
provider = "script"
workspace = "branch"
[tools]
allow = ["fs_write_file"]
write = ["**"]
"""


def graph_lines(text: str) -> list[str]:
    """A graph as the doc shows it: ``<- notes`` and trailing blanks dropped, shas
    (12 hex digits) as ``SHA``."""
    out = []
    for line in text.splitlines():
        line = re.sub(r"\s+<-.*$", "", line).rstrip()
        out.append(re.sub(r"\b[0-9a-f]{12}\b", "SHA", line))
    return out


def branches_scenario(env: Env) -> Path:
    """``a`` (branch) edits a file and forks ``a/b`` (branch), which edits another;
    ``a/b`` is merged into ``a``, then ``a`` into main: the story the doc tells."""
    from jpfs.core.conversation import Conversation
    from jpfs.core.workspace import open_workspace
    from jpfs.services.conversations import lifecycle
    from jpfs.services.forks import branches
    from jpfs.services.forks.merge import merge

    root = workspace(env)
    write_profile(root, "impl", BRANCH_PROFILE, allowed=True)
    ws = open_workspace(root)

    def edit(conv_id: str, name: str) -> None:
        files = branches.files_root(ws, Conversation(ws.conv_root, conv_id))
        (files / name).write_text(f"{name}\n", encoding="utf-8")
        branches.commit_edits(ws, conv_id, agent="impl")

    lifecycle.new_conversation(ws, "a", agent="impl")
    edit("a", "a.txt")
    lifecycle.new_conversation(ws, "b", parent="a", agent="impl")
    edit("a/b", "b.txt")
    merge(ws, "a/b")
    merge(ws, "a")
    return root


def branches_graph(block: Block, env: Env) -> None:
    root = branches_scenario(env)
    shown = git(root, "log", "--graph", "--format=%s", "main")
    assert graph_lines(shown) == graph_lines(block.text), shown


def branches_record(block: Block, env: Env) -> None:
    root = branches_scenario(env)
    shown = git(root, "log", "--format=%s", "jpfs-record")
    assert graph_lines(shown) == graph_lines(block.text), shown


# --- protocol/daemon.md -----------------------------------------------------------------


def shape(value: Any) -> Any:
    """The keys of a JSON value, recursively (lists by their first item), with types."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    if isinstance(value, bool) or value is None:
        return type(value).__name__
    return "number" if isinstance(value, int | float) else type(value).__name__


def daemon_status_json(block: Block, env: Env) -> None:
    """``jpfs daemon status --format json`` while an agent runs and after an error has
    the doc's keys and types; with no daemon it is the doc's one-liner."""
    documented = json.loads(block.text)
    ws = workspace(env)
    gate = threading.Event()

    def busy(_request: JsonDict) -> Answer:
        gate.wait(30)  # the model is thinking until the test has seen the status
        return text_reply("Done.")

    env.model.work["Keep the daemon busy"] = [busy]
    jpfs(ws, "daemon", "start")
    try:
        broken = ws / "conversations" / "broken"
        broken.mkdir()
        (broken / "conversation.toml").write_text("not = [toml\n", encoding="utf-8")
        # As on a branch without the profile: the kept copy stands in, and says so.
        profile = ws / ".jpfs" / "agents" / "default.toml"
        text = profile.read_text(encoding="utf-8")
        profile.unlink()
        (ws / "conversations" / "busy").mkdir()
        (ws / "conversations" / "busy" / "task.md").write_text("Keep the daemon busy.\n")

        def status() -> Any:
            now = json.loads(jpfs(ws, "daemon", "status", "--format", "json").stdout)
            return now if now["agents"] and now["last_error"] and now["policy"] else None

        real: Any = wait_until(status, timeout=30, message="an agent running and an error")
        assert shape(real) == shape(documented), json.dumps(real, indent=1)
        assert real["workspace"] == str(ws) and real["running"] is True
        assert real["policy"] == documented["policy"]
        profile.write_text(text, encoding="utf-8")
    finally:
        gate.set()
        jpfs(ws, "daemon", "stop", "--force", "--timeout", "20")
    assert json.loads(jpfs(ws, "daemon", "status", "--format", "json", rc=1).stdout) == {
        "running": False, "pid": None,
    }  # fmt: skip


def record_gitignore(block: Block, env: Env) -> None:
    """The record's first commit holds exactly this ``.gitignore``."""
    ws = workspace(env)
    first = git(ws, "rev-list", "--max-parents=0", "jpfs-record").strip()
    assert git(ws, "show", f"{first}:.gitignore") == block.text


# --- protocol/layout.md -----------------------------------------------------------------


def layout_workspace(block: Block, env: Env) -> None:
    ws = workspace(env)
    named = re.findall(r"^  (\S+)", block.text, re.M)
    assert named == [
        ".jpfs/config.toml", ".jpfs/agents/<name>.toml", ".jpfs/local/", "conversations/",
    ]  # fmt: skip
    assert (ws / ".jpfs" / "config.toml").is_file()
    assert {p.name for p in (ws / ".jpfs" / "agents").glob("*.toml")} >= {"default.toml"}
    ignored = git(ws, "check-ignore", ".jpfs/local/x", "conversations/x").split()
    assert ignored == [".jpfs/local/x", "conversations/x"]  # "listed in .gitignore"
    assert git(ws, "status", "--porcelain").split() == ["??", ".gitignore", "??", ".jpfs/"]
    # conversations/: a linked worktree of jpfs-record, the conversation root.
    worktrees = git(ws, "worktree", "list", "--porcelain")
    assert f"worktree {ws / 'conversations'}\n" in worktrees
    assert "branch refs/heads/jpfs-record" in worktrees
    assert jpfs(ws, "config", "get", "conversations.root").stdout.strip() == "conversations"


def demo_run(env: Env) -> tuple[Path, Path]:
    """The offline demo agent after it asked, was answered and ran (its two helpers
    mailed it their status)."""
    ws = workspace(env)
    jpfs(ws, "query", "--new", "--agent", "demo", "--non-interactive", "Summarise it", rc=4)
    (conv,) = [p for p in (ws / "conversations").iterdir() if p.name.startswith("c-")]
    done = jpfs(ws, "answer", conv.name, "Focus on src/", "--run")
    assert "Summary for: Summarise it" in done.stdout
    return ws, conv


def layout_files(block: Block, env: Env) -> None:
    from jpfs.core import ids

    _ws, conv = demo_run(env)
    for name in re.findall(r"^  (\S+)", block.text, re.M):
        if name == "files/":  # only an agent that writes artifacts has it
            assert "files" in ids.RESERVED
        elif name == "<child>/":
            assert any((p / "conversation.toml").is_file() for p in conv.iterdir())
        elif name == "inbox/<id>.md":
            assert [p.name[:2] for p in (conv / "inbox").iterdir()] == ["m-", "m-"]
        else:
            assert (conv / name).is_file(), name


def event_in_conversation(env: Env, files: dict[str, str]) -> Any:
    from jpfs.core.conversation import Conversation

    root = env.tmp / "root"
    conv_dir = root / "refactor"
    (conv_dir / "events").mkdir(parents=True)
    (conv_dir / "conversation.toml").write_text('agent = "default"\n', encoding="utf-8")
    (conv_dir / "task.md").write_text("Refactor.\n", encoding="utf-8")
    for name, text in files.items():
        (conv_dir / name).write_text(text, encoding="utf-8")
    return Conversation(root, "refactor")


def layout_event(block: Block, env: Env) -> None:
    """The assistant event: its front matter has the table's keys, its tool call's input
    is a valid ``jp_query`` input, and the state it makes is ``running``."""
    from jpfs.core import frontmatter, profiles, tree
    from jpfs.core.state import derive
    from jpfs.core.tool import check_arguments
    from jpfs.tools.registry import build_tools

    meta, body = frontmatter.parse(block.text)
    assert set(meta) == {"role", "created", "model", "usage", "stop_reason", "tool_calls"}
    from jpfs.core import prices
    from jpfs.infra.providers.base import Usage

    counts = {k: v for k, v in meta["usage"].items() if k != "cost_usd"}
    assert set(counts) == set(Usage().counts())
    # cost_usd is what jpfs records for these counts at the shipped price of the model.
    assert meta["usage"]["cost_usd"] == prices.cost_of(
        Usage(**counts), meta["model"], prices.PRICES
    )
    assert body == "I will ask the researcher.\n"
    conv = event_in_conversation(
        env, {"events/0001-user.md": '+++\nrole = "user"\n+++\nGo.\n',
              "events/0002-assistant.md": block.text},
    )  # fmt: skip
    event = conv.last_event()
    (call,) = event.tool_calls
    assert (call["id"], call["name"]) == ("toolu_01", "jp_query")
    ws = workspace(env)
    default = profiles.load(ws / ".jpfs" / "agents", "default")
    jp_query = build_tools(default.config, ws / ".jpfs" / "agents")["jp_query"]
    check_arguments(jp_query, call["input"])
    assert derive(tree.snapshot(conv)) == "running"  # a turn still calling tools


def layout_result(block: Block, env: Env) -> None:
    """``event = 7`` reports the final reply in event 7: the conversation is idle; after
    a later final reply it is ``finishing`` (that one is not reported yet)."""
    from jpfs.core import frontmatter, tree
    from jpfs.core.state import derive

    meta, body = frontmatter.parse(block.text)
    assert meta["event"] == 7 and meta["success"] is True and body == "<the final reply>\n"
    roles = ["user", "assistant", "tool", "assistant", "tool", "assistant", "assistant"]
    files = {
        f"events/{n:04d}-{role}.md": f'+++\nrole = "{role}"\n+++\nx\n'
        for n, role in enumerate(roles, 1)
    }
    conv = event_in_conversation(env, {**files, "result.md": block.text})
    assert derive(tree.snapshot(conv)) == "idle"
    (conv.path / "events" / "0008-user.md").write_text('+++\nrole = "user"\n+++\nMore.\n')
    (conv.path / "events" / "0009-assistant.md").write_text('+++\nrole = "assistant"\n+++\nx\n')
    assert derive(tree.snapshot(conv)) == "finishing"


def layout_commit(block: Block, env: Env) -> None:
    """jpfs writes exactly this message for such a step, and git reads its trailers."""
    from jpfs.core import record
    from jpfs.core.conversation import create
    from jpfs.core.workspace import open_workspace
    from jpfs.infra.providers.base import Usage

    root = workspace(env)
    ws = open_workspace(root)
    create(ws.conv_root, "refactor", agent="default")
    create(ws.conv_root, "refactor/research-errors", agent="researcher")
    record.commit(
        ws, "refactor/research-errors", "assistant", agent="researcher",
        model="claude-sonnet-4-6", usage=Usage(1520, 87),
    )  # fmt: skip
    assert git(root, "log", "-1", "--format=%B", "jpfs-record") == block.text + "\n"
    parsed = subprocess.run(
        ["git", "interpret-trailers", "--parse"], input=block.text, capture_output=True,
        text=True, check=True,
    ).stdout  # fmt: skip
    assert parsed == block.text.split("\n\n", 1)[1]


# --- protocol/cost.md -------------------------------------------------------------------


def cost_prices(block: Block, env: Env) -> None:
    """The config block loads; its entries are what jpfs prices with (the dated name of
    a model included); and the document's table of shipped prices is jpfs's own."""
    from jpfs.core import config, prices
    from jpfs.infra.providers.base import Usage

    path = env.tmp / "config.toml"
    path.write_text(block.text, encoding="utf-8")
    table = prices.table(config.load_file(path)["prices"])
    sonnet = prices.price_of("claude-sonnet-4-5-20250929", table)
    assert sonnet == prices.Price(3.0, 15.0, 0.30, 3.75)
    assert prices.cost_of(Usage(1_000_000, 0, 0, 0), "llama3.1:8b", table) == 0.0
    assert prices.price_of("gpt-oss", table) is None
    doc = (ROOT / "protocol" / "cost.md").read_text(encoding="utf-8")
    shown: dict[str, prices.Price] = {}
    for row in re.findall(r"^\| (`(?:claude-|gpt-|o[0-9]).*)\|$", doc, re.M):
        names, *numbers = [cell.strip() for cell in row.split("|")]
        for name in re.findall(r"`([^`]+)`", names):
            shown[name] = prices.Price(*(float(n) for n in numbers))
    assert shown == prices.PRICES


def cost_profile(block: Block, env: Env) -> None:
    profile = load_profile(env, block.text)
    assert profile.config["prompt_cache"] is True
    assert profile.config["limits"] == {
        "max_turns": 25, "max_children": 8, "max_depth": 3,
        "budget_tokens": 400000, "budget_usd": 0.5, "max_run_seconds": 900,
    }  # fmt: skip


def cost_tour(block: Block, env: Env) -> None:
    """The commands of "Where it shows", in a workspace, after the researcher answered
    (onboarding step and work turn at the docs' model's default usage, 10 + 5 tokens)."""
    shell = env.shell(workspace(env))
    shell.workspace = shell.cwd

    def ran(sh: Shell, d: Done) -> None:
        sh.last_id = re.search(r"conversation (c-[0-9a-z]{26}) · 30 tokens, \$0\.0002", d.err)[1]

    def usage(sh: Shell, d: Done) -> None:
        shown = json.loads(d.out)
        assert shown["usage"] == shown["subtree_usage"]
        assert shown["usage"]["input_tokens"] == 20
        assert shown["usage"]["cost_usd"] == pytest.approx(2 * (10 * 3 + 5 * 15) / 1e6)

    run_block(
        block,
        shell,
        [
            ("jpfs query --agent researcher --budget-usd 0.25",
             Step(out=[r"\AIn src/checkout.py: validate_order"], after=ran)),
            ("jpfs conversation show c-01jh...", Step(after=usage)),
            ("jpfs tree", Step(out=[r"^ID +STATE .* TOKENS +COST +SUBTREE +MAIL +LAST",
                                    r"^total: 30 tokens, \$0\.0002$"])),
            ("jpfs log -n 3", Step(out=[r" assistant .* 10\+5 tokens \$0\.0001$"])),
            ("jpfs cost --by model", Step(out=[r"^claude-sonnet-4-6 +2 +20 +10 +0 +0 +\$0\.0002",
                                               r"^total +2 "])),
            ("jpfs cost --since 24h", Step(out=[r"^c-[0-9a-z]{8,26} +2 ", r"^total +2 "])),
        ],
    )  # fmt: skip


# --- protocol/secrets.md ----------------------------------------------------------------


def secrets_expose(block: Block, env: Env) -> None:
    """The profile loads; its agent reads the exposed paths and not other secret ones."""
    from jpfs.core.tool import ToolContext, check_arguments
    from jpfs.errors import ScopeError
    from jpfs.tools.fs import FS_TOOLS

    profile = load_profile(env, block.text)
    assert profile.config["tools"]["expose"] == [".env.example", "build/test-report.txt"]
    ws = workspace(env)
    (ws / ".gitignore").write_text("build/\n", encoding="utf-8")
    files = {".env.example": "TOKEN=changeme\n", ".env": "TOKEN=x\n",
             "build/test-report.txt": "12 passed\n", "build/other.txt": "x\n"}  # fmt: skip
    for name, text in files.items():
        (ws / name).parent.mkdir(exist_ok=True)
        (ws / name).write_text(text, encoding="utf-8")
    ctx = ToolContext(ws, "", ws, config=profile.config)
    read = FS_TOOLS["fs_read_file"]
    assert read.run(ctx, check_arguments(read, {"path": ".env.example"})) == "TOKEN=changeme"
    assert read.run(ctx, check_arguments(read, {"path": "build/test-report.txt"})) == "12 passed"
    for hidden in (".env", "build/other.txt"):
        with pytest.raises(ScopeError, match=r"tools\.expose"):
            read.run(ctx, check_arguments(read, {"path": hidden}))


def secrets_scan(block: Block, env: Env) -> None:
    """A record whose history holds a token a person pasted into a task: reported."""
    ws = workspace(env)
    token = "ghp_" + "a1B2c3D4e5" * 3 + "F6g7H8"
    leaky = ws / "conversations" / "leaky"
    leaky.mkdir()
    (leaky / "task.md").write_text(f"Deploy with {token}\n", encoding="utf-8")
    git(ws / "conversations", "add", "-A")
    git(ws / "conversations", "commit", "-q", "-m", "a task")

    def listed(_sh: Shell, d: Done) -> None:
        (found,) = json.loads(d.out)
        assert (found["conversation"], found["path"], found["line"]) == (
            "leaky",
            "leaky/task.md",
            1,
        )
        assert found["kind"] == "github-token" and token not in d.out + d.err

    run_block(
        block,
        env.shell(ws),
        [
            ("jpfs scan", Step(rc=1, out=[r"\Aleaky/task.md:1: github-token \(commit [0-9a-f]{12}\)\n\Z"],
                               err=[r"git filter-repo --refs jpfs-record"])),
            ("jpfs scan --format json", Step(rc=1, after=listed)),
        ],
    )  # fmt: skip


# --- protocol/lifecycle.md, mail.md, mcp.md ---------------------------------------------


def lifecycle_diagram(block: Block, env: Env) -> None:
    """The operations the diagram names are the agent tools of that name, and the
    states it names are states."""
    from jpfs.core.state import State

    ws = workspace(env)
    tools = json.loads(jpfs(ws, "tools", "--profile", "default", "--format", "json").stdout)
    names = {t["name"] for t in tools}
    for call in re.findall(r"\b([a-z_]+)\((?:prompt|id)\)|\b(mail_send)\b", block.text):
        assert (call[0] or call[1]) in names
    assert {"fork", "kill", "mail_send"} <= names
    for state in ("idle", "failed", "killed"):
        assert state in block.text and State(state)


def elided(text: str) -> str:
    """Front matter with its ``...`` lines (keys left out) dropped."""
    return "".join(line for line in text.splitlines(keepends=True) if line.strip() != "...")


def mail_message(block: Block, env: Env) -> None:
    """The message file, put in its recipient's inbox, reads as the fields it shows."""
    from jpfs.core import frontmatter
    from jpfs.core.conversation import create
    from jpfs.core.workspace import open_workspace
    from jpfs.services.conversations import mail

    meta, body = frontmatter.parse(block.text)
    ws = open_workspace(workspace(env))
    create(ws.conv_root, meta["from"], agent="default")
    create(ws.conv_root, meta["to"], agent="default")
    inbox = ws.conv_root / meta["to"] / "inbox"
    inbox.mkdir()
    (inbox / f"{mail.check_message_id(meta['id'])}.md").write_text(block.text, encoding="utf-8")
    (message,) = mail.messages(ws, meta["to"])
    header = message.header()
    assert {**header, "created": meta["created"]} == meta
    assert message.body == body and message.kind == "message" and not message.read


def mail_status(block: Block, env: Env) -> None:
    """A real status report (the demo agent's helpers send two) has the keys shown, the
    same subject and kind, and a body with the same JSON keys."""
    from jpfs.core import frontmatter

    meta, body = frontmatter.parse(elided(block.text))
    _ws, conv = demo_run(env)
    reports = sorted((conv / "inbox").iterdir())
    real_meta, real_body = frontmatter.parse(reports[0].read_text(encoding="utf-8"))
    assert set(meta) <= set(real_meta), set(meta) - set(real_meta)
    assert (real_meta["subject"], real_meta["kind"]) == (meta["subject"], meta["kind"])
    assert real_meta["to"] == conv.name and real_meta["from"].startswith(conv.name + "/")
    assert real_meta["event"] == meta["event"]  # the helper's final reply: its 4th event
    assert set(json.loads(real_body)) == set(json.loads(body))
    assert real_meta["id"].startswith(meta["id"].removesuffix("...")[:4])


def option_help(helped: str, option: str) -> str:
    """The entry of ``option`` in a ``--help`` text ("" if it has none)."""
    # "  -s, --subject TEXT  ...", "  --unread / --read  ...", up to the next option.
    start = rf"^ +(?:-\w, )?(?:--[a-z-]+ / )?{re.escape(option)}\b"
    found = re.search(start + r".*?(?=^ +-|^\S|\Z)", helped, re.M | re.S)
    return found.group(0) if found else ""


def synopsis(block: Block, env: Env) -> None:
    """A command synopsis (``jpfs CMD ARGS [--opt X]``, then after a few blanks what it
    does): each command exists; each option is one of that command's (``--help``, or
    ``jpfs --help`` for the global ones); an option shown outside brackets is required,
    one in brackets is not; each ``--format`` value shown is one it takes."""
    ws = workspace(env)
    command: list[str] = []
    helped = ""
    for line in block.text.splitlines():
        usage = re.split(r" {3,}", line.strip())[0]
        if usage.startswith("jpfs "):
            bare = re.sub(r"\[[^\]]*\]", " ", usage).split()[1:]
            command = list(itertools.takewhile(lambda w: re.fullmatch("[a-z]+", w), bare))
            helped = jpfs(ws, *command, "--help").stdout
        depth = 0
        for token in re.findall(r"\[|\]|--?[a-z][a-z-]*(?: [a-z]+(?:\|[a-z]+)+)?", usage):
            if token in "[]":
                depth += 1 if token == "[" else -1
                continue
            option, _, values = token.partition(" ")
            entry = option_help(helped, option) or option_help(jpfs(ws, "--help").stdout, option)
            assert entry, f"{block.where}: jpfs {' '.join(command)} has no option {option}"
            assert ("[required]" in entry) == (depth == 0), (
                f"{block.where}: jpfs {' '.join(command)} {option} is shown as "
                + ("required" if depth == 0 else "optional")
                + f", its --help says:\n{entry}"
            )
            for value in values.split("|") if values else ():
                assert re.search(rf"\b{value}\b", entry), (command, option, value, entry)


# --- protocol/onboarding.md -------------------------------------------------------------


def onboarding_conversation(env: Env, task: str) -> Any:
    from jpfs.core.conversation import Conversation

    root = env.tmp / "onboarding"
    (root / "refactor").mkdir(parents=True)
    (root / "refactor" / "conversation.toml").write_text(
        'agent = "default"\n[config]\nmodel = "m"\n[config.onboarding]\nenabled = true\n',
        encoding="utf-8",
    )
    (root / "refactor" / "task.md").write_text(task, encoding="utf-8")
    return Conversation(root, "refactor")


def onboarding_questions(block: Block, env: Env) -> None:
    """jpfs writes exactly this file for these two rounds, and reads it back as: round 1
    asks two questions, round 2 is ready; unanswered round 1 is ``waiting``."""
    from jpfs.core import tree
    from jpfs.core.state import Onboarding, derive, onboarding_of, split_rounds
    from jpfs.services.conversations import onboarding

    rounds = split_rounds(block.text)
    assert sorted(rounds) == [1, 2]
    conv = onboarding_conversation(env, "Refactor the billing module for readability.\n")
    onboarding.append_round(conv, rounds[1])
    assert onboarding_of(tree.snapshot(conv)) == Onboarding(rounds=1, ready=False, answered=False)
    assert derive(tree.snapshot(conv)) == "waiting"
    onboarding.append_round(conv, rounds[2])
    assert conv.read("questions.md") == block.text
    assert onboarding_of(tree.snapshot(conv)).ready
    assert derive(tree.snapshot(conv)) == "running"
    assert re.findall(r"^\d+\. ", rounds[1], re.M) == ["1. ", "2. "]


def onboarding_brief(block: Block, env: Env) -> None:
    """The first user event is the task and the whole Q&A, exactly as shown, for the
    questions.md shown above it and the answers this block quotes."""
    from jpfs.services.conversations import onboarding

    questions = block_at(env, "protocol/onboarding.md", "# Questions").text
    answers = block.text.split("Answers:\n", 1)[1].split("\n\n", 1)[0]
    task = block.text.split("\n\n", 1)[0] + "\n"
    conv = onboarding_conversation(env, task)
    conv.write("questions.md", questions)
    conv.write("answers.md", f"# Answers\n\n## Round 1\n\n{answers}\n")
    assert onboarding.work_brief(conv) == block.text


TIME = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"


def expected_lines(lines: Sequence[str]) -> list[re.Pattern[str]]:
    """Lines of shown output as patterns: ``…`` is any text, a time any time, a run of
    blanks any run of blanks (columns are as wide as their contents)."""
    patterns = []
    for line in lines:
        pieces = []
        for piece in re.split(f"(…|{TIME})", line.strip()):
            if piece == "…":
                pieces.append(".*?")
            elif re.fullmatch(TIME, piece):
                pieces.append(TIME)
            else:
                pieces.append(re.sub(r"(\\ )+", " +", re.escape(piece)))
        patterns.append(re.compile("".join(pieces)))
    return patterns


def transcript(block: Block, env: Env) -> None:
    """A terminal session: each ``$`` line runs (placeholders as in the table), its
    output is what follows it, and ``(exit status N)`` at a line's end is the status."""
    shell = env.shell(workspace(env))
    shell.workspace = shell.cwd
    shell.env.update(GIT_AUTHOR_NAME="Your Name", GIT_COMMITTER_NAME="Your Name")
    sessions: list[tuple[str, list[str]]] = []
    for line in block.text.splitlines():
        if line.startswith("$ "):
            sessions.append((line[2:], []))
        else:
            sessions[-1][1].append(line)
    for command, shown in sessions:
        while shown and not shown[-1].strip():
            shown.pop()
        rc = 0
        if shown and (m := re.search(r"\s+\(exit status (\d+)\)$", shown[-1])):
            rc, shown[-1] = int(m.group(1)), shown[-1][: m.start()]
        done = run_line(shell, command, Step())
        got = done.out.rstrip("\n").splitlines()
        assert done.rc == rc, f"{command}: exit {done.rc}, shown {rc}\n{done.out}{done.err}"
        if found := _ID.search(done.out):
            shell.last_id = found.group(1).split("/")[0]
        patterns = expected_lines(substitute("\n".join(shown), shell).splitlines())
        assert len(got) == len(patterns), f"{command}:\n{done.out}"
        for pattern, actual in zip(patterns, got, strict=True):
            assert pattern.fullmatch(actual.strip()), f"{command}: {actual!r} !~ {pattern.pattern}"


# --- protocol/provenance.md -------------------------------------------------------------

PROVENANCE = "protocol/provenance.md"


def provenance_scenario(env: Env) -> Shell:
    """tests/services/views/blame_scenario.py's project, its implementer on the doc's model:
    ``impl``, asked ``alpha``, wrote notes.txt and rewrote line 2 of shared.txt on its
    branch (not merged yet). The shell's last id is that conversation's."""
    from tests.conftest import write_profile
    from tests.services.views.blame_scenario import IMPL, add_project, conversation_in

    ws = add_project(workspace(env))
    write_profile(ws, "impl", IMPL.replace('"script-impl"', '"claude-sonnet-4-6"'), allowed=True)
    ran = jpfs(ws, "query", "--new", "--agent", "impl", "--non-interactive", "alpha")
    shell = env.shell(ws)
    shell.workspace, shell.last_id = ws, conversation_in(ran.stderr)
    return shell


def shown_edit_commit(block: Block, shell: Shell, message: str) -> None:
    """``message`` is the block's, its conversation id and the record's tip aside; its
    trailers are the table's and git reads them as trailers."""
    ws = Path(shell.workspace_path())
    (doc_tip,) = re.findall(r"^Jpfs-Record: ([0-9a-f]{40})$", block.text, re.M)
    (tip,) = re.findall(r"^Jpfs-Record: ([0-9a-f]{40})$", message, re.M)
    git(ws, "merge-base", "--is-ancestor", tip, "jpfs-record")  # a commit of the record
    assert message.rstrip("\n") == substitute(block.text, shell).replace(doc_tip, tip).rstrip("\n")
    doc = (ROOT / PROVENANCE).read_text(encoding="utf-8")
    section = doc.split("\n## The trailers\n", 1)[1].split("\n## ", 1)[0]
    named = re.findall(r"^\| `(Jpfs-[A-Za-z-]+)` \|", section, re.M)  # the table's rows
    assert named == ["Jpfs-Event-Path", "Jpfs-Turn", "Jpfs-Model", "Jpfs-Record"], section
    parsed = subprocess.run(
        ["git", "interpret-trailers", "--parse"], input=message, capture_output=True,
        text=True, check=True,
    ).stdout  # fmt: skip
    assert {line.split(":")[0] for line in parsed.splitlines()} >= set(named)


def shown_blame_json(block: Block, shell: Shell, out: str) -> None:
    """The real line is the block's object: the keys the Output table names, in this
    order, and the same values but for the commit's id and time, and the event's number."""
    from tests.services.views.blame_scenario import event_that_wrote

    ws, conv = Path(shell.workspace_path()), shell.conversation_id()
    (doc,) = json.loads(substitute(block.text, shell))
    (real,) = json.loads(out)
    assert list(real) == list(doc)
    text = (ROOT / PROVENANCE).read_text(encoding="utf-8")
    row = next(r for r in text.splitlines() if r.startswith("| `jpfs blame PATH [-L"))
    assert set(re.findall(r"`([a-z_]+)`", row.split(" | ")[2])) - {"null"} == set(real)
    edit = git(ws, "rev-parse", f"jpfs/{conv}/_").strip()
    assert re.fullmatch("[0-9a-f]{40}", doc["commit"]) and isinstance(doc["time"], int)
    assert (real["commit"], real["time"]) == (edit, int(git(ws, "log", "-1", "--format=%at", edit)))
    # The turn's two calls run concurrently: the doc's event is one of their two events,
    # the real one is the event of the call that wrote shared.txt.
    assert doc["event"] in (f"{conv}/events/0003-tool.md", f"{conv}/events/0004-tool.md")
    assert (real["event"], real["turn"]) == event_that_wrote(ws, conv, "shared.txt")
    varies = ("commit", "time", "event")
    assert {k: v for k, v in real.items() if k not in varies} == {
        k: v for k, v in doc.items() if k not in varies
    }


def provenance_commit(block: Block, env: Env) -> None:
    shell = provenance_scenario(env)
    branch = f"jpfs/{shell.conversation_id()}/_"
    shown_edit_commit(block, shell, git(shell.cwd, "log", "-1", "--format=%B", branch))


def provenance_blame(block: Block, env: Env) -> None:
    shell = provenance_scenario(env)
    jpfs(shell.cwd, "merge", shell.conversation_id())
    out = jpfs(shell.cwd, "blame", "shared.txt", "-L", "2,2", "--format", "json").stdout
    shown_blame_json(block, shell, out)


def provenance_followed(block: Block, env: Env) -> None:
    """The example's commands, verbatim: each prints what the blocks around them show."""
    shell = provenance_scenario(env)
    commit = block_at(env, PROVENANCE, "): edit\n\nJpfs-Conversation:")
    shown = block_at(env, PROVENANCE, '"conversations": [')
    merge = r"^merged c-[0-9a-z]{26} \(jpfs/c-[0-9a-z]{26}/_\) into main: [0-9a-f]{12}$"

    def merged(sh: Shell, _d: Done) -> None:
        message = git(sh.cwd, "log", "-1", "--format=%B", "HEAD")
        assert f"Jpfs-Merged: {sh.conversation_id()}\n" in message, message

    def explained(sh: Shell, d: Done) -> None:
        from tests.services.views.blame_scenario import event_that_wrote

        conv = sh.conversation_id()
        event, turn = event_that_wrote(Path(sh.workspace_path()), conv, "shared.txt")
        head = [
            "shared.txt:2: alpha", f"conversation {conv} (impl)", "model claude-sonnet-4-6",
            f"turn {turn}", f"event {event}",
        ]  # fmt: skip
        lines = d.out.splitlines()
        assert [line for line in lines if line in head] == head, d.out
        assert re.search(r"^usage input \d+, output \d+, .*, \$\d+\.\d{4}$", d.out, re.M), d.out
        for part in ("## task\n\nalpha\n", "## turn\n\nediting\n", "## tool result\n"):
            assert part in d.out, d.out
        call = json.loads(d.out.split("## tool call\n\n")[1].split("\n\n")[0])
        assert call == {
            "name": "fs_modify_file",
            "input": {"path": "shared.txt", "old": "line2", "new": "alpha"},
        }

    run_block(
        block,
        shell,
        [
            ("git log -1 --format=%B jpfs/", Step(after=lambda sh, d: shown_edit_commit(commit, sh, d.out))),
            ("jpfs merge", Step(out=[r"\A[0-9a-f]{40}\n\Z"], err=[merge], after=merged)),
            ("jpfs blame shared.txt -L 2,2", Step(after=lambda sh, d: shown_blame_json(shown, sh, d.out))),
            ("jpfs blame shared.txt --explain 2", Step(after=explained)),
        ],
    )  # fmt: skip


# --- protocol/record.md -----------------------------------------------------------------


def record_reading(block: Block, env: Env) -> None:
    ws = workspace(env)
    jpfs(ws, "conversation", "new", "refactor", "--no-activate")
    run_block(
        block,
        env.shell(ws),
        [
            (
                "git -C conversations log --oneline -- refactor",
                Step(out=[r"\A[0-9a-f]+ jpfs\(refactor\): new\n\Z"]),
            ),
            ("git -C conversations status", Step(out=[r"^nothing to commit, working tree clean"])),
            (
                "git log --all --oneline --graph",
                Step(out=[r"^\* [0-9a-f]+ jpfs: start the record$", r"^\* [0-9a-f]+ initial"]),
            ),
            (
                "git log jpfs-record --format='%an: %s' -3",
                Step(
                    out=[
                        r"\ATest User: jpfs\(refactor\): new\nTest User: jpfs: start the record\n\Z"
                    ]
                ),
            ),
        ],
    )


def record_push(block: Block, env: Env) -> None:
    ws = workspace(env)
    jpfs(ws, "conversation", "new", "refactor", "--no-activate")
    remote = with_remote(env, ws)
    run_block(
        block, env.shell(ws), [("git push origin", Step(after=pushed_and_reattached(env, remote)))]
    )


# --- protocol/sync.md -------------------------------------------------------------------


def sync_turn_on(block: Block, env: Env) -> None:
    """Turning sharing on: the config reaches the remote on the project's branch, the
    record on its own, and a fresh clone gets both."""
    ws = workspace(env)
    jpfs(ws, "conversation", "new", "refactor", "--no-activate")
    remote = with_remote(env, ws)

    def shared(sh: Shell, _d: Done) -> None:
        assert git(remote, "rev-parse", "jpfs-record") == git(ws, "rev-parse", "jpfs-record")
        config = git(remote, "show", "HEAD:.jpfs/config.toml")
        assert re.search(r'^remote = "origin"$', config, re.M), config
        clone = env.tmp / "laptop"
        git(env.tmp, "clone", "-q", str(remote), str(clone))
        (clone / "conversations").mkdir(exist_ok=True)
        jpfs(clone, "sync")  # attaches the remote's record, nothing to push
        assert (clone / "conversations" / "refactor" / "conversation.toml").is_file()

    run_block(
        block,
        env.shell(ws),
        [
            ("jpfs config set sync.remote origin", Step()),
            ("git add .jpfs/config.toml", Step(out=[r"share the record through origin"])),
            ("git push origin HEAD", Step()),
            ("jpfs sync", Step(out=[r"\A[0-9a-f]{40}\n\Z"], err=[r"pushed as "], after=shared)),
        ],
    )


def record_migrate(block: Block, env: Env) -> None:
    """A workspace from before the record branch: conversations committed on main."""
    old = project(env.tmp / "old")
    (old / ".jpfs").mkdir()
    (old / ".jpfs" / "config.toml").write_text("", encoding="utf-8")
    (old / "conversations" / "x").mkdir(parents=True)
    (old / "conversations" / "x" / "task.md").write_text("Old.\n", encoding="utf-8")
    git(old, "add", "-A")
    git(old, "commit", "-q", "-m", "jpfs(x): task\n\nJpfs-Conversation: x\nJpfs-Event: task")
    refused = jpfs(old, "conversation", "new", "y", rc=1)
    assert "jpfs migrate" in refused.stderr  # "refuses such a workspace and names the fix"

    def moved(sh: Shell, _d: Done) -> None:
        assert git(old / "conversations", "log", "--format=%s").splitlines() == ["jpfs(x): task"]
        assert (old / "conversations" / "x" / "task.md").is_file()

    def committed(sh: Shell, _d: Done) -> None:
        tracked = git(old, "ls-tree", "-r", "--name-only", "HEAD").split()
        assert "conversations/x/task.md" not in tracked and ".gitignore" in tracked
        assert git(old, "status", "--porcelain") == ""
        assert " task " in jpfs(old, "log", "x").stdout  # jpfs reads it from the record

    run_block(
        block,
        env.shell(old),
        [("jpfs migrate", Step(after=moved)), ("git commit -m", Step(after=committed))],
    )


# --- the registry ---------------------------------------------------------------------


@dataclass(frozen=True)
class Excused:
    """A block that cannot run in a test, and why."""

    reason: str


Handler = Callable[[Block, Env], None]


@dataclass(frozen=True)
class Entry:
    path: str
    digest: str
    first: str  # the start of the block's first line, for readers of this table
    handler: Handler | Excused

    @property
    def key(self) -> str:
        return f"{self.path}#{self.digest}"


DOCS: list[Entry] = [
    Entry("README.md", "5b794b8c", "make demo", make_demo_and_test),
    Entry("README.md", "73fb97eb", "cd your-repo", readme_tour),
    Entry("README.md", "c4af1101", "import jpfs", python_onboarding),
    Entry("README.md", "6e52299b", "jpfs daemon start", readme_daemon),
    Entry("README.md", "3c976a65", "mkdir -p ~/.config/systemd/user", readme_systemd),
    Entry("README.md", "883bc0f8", "claude mcp add", claude_mcp_add),
    Entry("README.md", "004e26e7", "{", mcp_json),
    Entry("README.md", "4d1f05ec", "jpfs tools", readme_tools),
    Entry("README.md", "8ca48dd9", "git -C conversations log", readme_record),
    Entry("README.md", "f85d29f7", 'model = "qwen3:8b"', readme_local_model),
    Entry("protocol/agents.md", "272e14c3", 'model = "claude-sonnet-4-6"', agents_profile),
    Entry("protocol/mail.md", "c3e5f42b", "+++", steering.delivered_event),
    Entry("protocol/cost.md", "c443871f", "[usage]", thinking.thinking_usage),
    Entry("protocol/lifecycle.md", "c24e1c92", "[jpfs: this run has spent", steering.wrap_note),
    Entry("protocol/agents.md", "4dc58b01", 'model = "claude-fable-5-1"', thinking.fable_effort),
    Entry(
        "protocol/agents.md", "1a6378a2", 'model = "claude-sonnet-4-6"', thinking.sonnet_adaptive
    ),
    Entry("protocol/agents.md", "bd9f6ed4", "### 0002 · assistant", thinking.folded_thinking),
    Entry("protocol/agents.md", "065f7326", 'model = "qwen3:8b"', thinking.local_window),
    Entry("protocol/agents.md", "ef1080fa", "[jpfs: this tool result", thinking.trimmed_note),
    Entry("protocol/secrets.md", "bb3f70e8", 'model = "claude-sonnet-4-6"', secrets_expose),
    Entry("protocol/secrets.md", "84193157", "jpfs scan", secrets_scan),
    Entry("protocol/cost.md", "9b03ddb3", '[prices."claude-sonnet-4-5"]', cost_prices),
    Entry("protocol/cost.md", "31dd567a", 'model = "claude-haiku-4-5"', cost_profile),
    Entry("protocol/cost.md", "1b649ff9", "jpfs query --agent researcher", cost_tour),
    Entry("protocol/agents.md", "4a6e6da2", "[[tools.command]]", command_tool),
    Entry("protocol/branches.md", "36a002c0", "*   jpfs(a): merge", branches_graph),
    Entry("protocol/branches.md", "c82a0afa", "jpfs(a): merged into main", branches_record),
    Entry("protocol/daemon.md", "3848f357", '{"running": true', daemon_status_json),
    Entry("protocol/daemon.md", "f4b13633", "# jpfs: editors'", record_gitignore),
    Entry("protocol/layout.md", "d812b30b", "<repo>/", layout_workspace),
    Entry("protocol/layout.md", "45d0541d", "conversations/<id>/", layout_files),
    Entry("protocol/layout.md", "96de3eb3", "+++", layout_event),
    Entry("protocol/layout.md", "f967473a", "+++", layout_result),
    Entry("protocol/layout.md", "68a7d836", "jpfs(refactor/research-errors)", layout_commit),
    Entry("protocol/lifecycle.md", "a854791e", "fork(prompt)", lifecycle_diagram),
    Entry("protocol/mail.md", "5901d778", "+++", mail_message),
    Entry("protocol/mail.md", "60e37cc5", "+++", mail_status),
    Entry("protocol/mail.md", "2a2614bd", "jpfs mail send", synopsis),
    Entry("protocol/mcp.md", "b4a10889", "jpfs [-w REPO] mcp", synopsis),
    Entry("protocol/onboarding.md", "c76c0b27", "# Questions", onboarding_questions),
    Entry("protocol/onboarding.md", "489bde1a", "Refactor the billing", onboarding_brief),
    Entry("protocol/onboarding.md", "7e6aee93", "import jpfs", python_onboarding),
    Entry("protocol/onboarding.md", "6b850dd5", "$ jpfs query --new", transcript),
    Entry("protocol/provenance.md", "f3438484", "jpfs(c-01jh5w7x2k0000000000", provenance_commit),
    Entry("protocol/provenance.md", "8fd2538b", "git log -1 --format=%B", provenance_followed),
    Entry("protocol/provenance.md", "08e19e40", "[", provenance_blame),
    Entry("protocol/record.md", "e1f91435", "git -C conversations log", record_reading),
    Entry("protocol/record.md", "5a9c9f6a", "git push origin", record_push),
    Entry("protocol/record.md", "0fcec3f8", "jpfs migrate", record_migrate),
    Entry("protocol/sync.md", "4964a1f4", "jpfs config set sync.remote origin", sync_turn_on),
]
REGISTRY = {e.key: e for e in DOCS}
BLOCKS = blocks()


@pytest.fixture
def docs_env(tmp_path: Path, api_env: MessagesServer) -> Env:
    model = DocsModel()
    api_env.responder = model
    return Env(tmp_path, api_env, model, {b.key: b for b in BLOCKS})


def test_every_registry_entry_names_a_block() -> None:
    keys = {b.key for b in BLOCKS}
    stale = [e for e in DOCS if e.key not in keys]
    hints = []
    for e in stale:
        now = [b for b in BLOCKS if b.path == e.path and b.first.startswith(e.first)]
        hint = f" (changed? now {', '.join(b.key for b in now)})" if now else " (removed?)"
        hints.append(f"{e.key} `{e.first}`{hint}")
    assert not stale, "registry entries that match no block: " + "; ".join(hints)
    assert len(REGISTRY) == len(DOCS), "two registry entries for one block"
    for e in DOCS:
        block = next(b for b in BLOCKS if b.key == e.key)
        assert block.first.startswith(e.first), f"{e.key}: the block starts {block.first!r}"


def registered(block: Block) -> Entry:
    """The block's registry entry; a block without one fails, saying what to add."""
    entry = REGISTRY.get(block.key)
    if entry is None:
        was = [e.key for e in DOCS if e.path == block.path and block.first.startswith(e.first)]
        pytest.fail(
            f"{block.where}: the ```{block.info} block `{block.first}` (key {block.key}) is not"
            f" tested: add a handler or a reason to DOCS in tests/docs/test_docs.py:\n"
            f'    Entry("{block.path}", "{block.digest}", "{block.first[:30]}", ...),'
            + (
                f"\n(if it is the block of {', '.join(was)}, look again at what it says)"
                if was
                else ""
            )
        )
    return entry


@pytest.mark.parametrize("block", BLOCKS, ids=[b.where for b in BLOCKS])
def test_doc_block(block: Block, docs_env: Env) -> None:
    entry = registered(block)
    if isinstance(entry.handler, Excused):
        pytest.skip(f"{block.where}: {entry.handler.reason}")
    entry.handler(block, docs_env)


def test_a_new_or_changed_block_fails_until_it_has_a_handler() -> None:
    new = Block("protocol/new.md", 3, "sh", "jpfs new-command\n")
    with pytest.raises(pytest.fail.Exception, match="add a handler or a reason"):
        registered(new)
    (tour,) = [b for b in BLOCKS if REGISTRY[b.key].handler == readme_tour]
    changed = Block(tour.path, tour.line, tour.info, tour.text.replace("--tree", "--all"))
    with pytest.raises(pytest.fail.Exception, match="look again at what it says"):
        registered(changed)
    retagged = Block(tour.path, tour.line, "bash", tour.text)
    with pytest.raises(pytest.fail.Exception, match="is not tested"):
        registered(retagged)


def test_blocks_are_found_as_markdown_has_them(tmp_path: Path) -> None:
    (tmp_path / "protocol").mkdir()
    (tmp_path / "README.md").write_text(
        "# x\n\n```sh\njpfs init   # a comment\n```\n\n- a list item:\n\n"
        "  ```python\n  import jpfs\n\n  print(1)\n  ```\n\n"
        "````markdown\n```sh\nnested\n```\n````\n\n~~~\n```\n~~~\n",
        encoding="utf-8",
    )
    (tmp_path / "protocol" / "a.md").write_text("```toml\nk = 1\n```\n", encoding="utf-8")
    found = [(b.where, b.info, b.text) for b in blocks(tmp_path)]
    assert found == [
        ("README.md:3", "sh", "jpfs init   # a comment\n"),
        ("README.md:9", "python", "import jpfs\n\nprint(1)\n"),
        ("README.md:15", "markdown", "```sh\nnested\n```\n"),
        ("README.md:21", "", "```\n"),
        ("protocol/a.md:1", "toml", "k = 1\n"),
    ]
    (tmp_path / "protocol" / "b.md").write_text("text\n```sh\nnever closed\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"protocol/b\.md:2: a code block is never closed"):
        blocks(tmp_path)
