"""Shared helpers for the benches: temp workspaces, bulk conversations, timing, tables.

Benches build their data directly (files written by Python, committed in one
``git add -A && git commit``) so a 10,000-conversation tree takes seconds, not the
minutes the real runtime would spend committing each event.
"""

from __future__ import annotations

import atexit
import contextlib
import math
import os
import platform
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

IDENTITY = {
    "GIT_AUTHOR_NAME": "Bench User",
    "GIT_AUTHOR_EMAIL": "bench@example.com",
    "GIT_COMMITTER_NAME": "Bench User",
    "GIT_COMMITTER_EMAIL": "bench@example.com",
}

# The token every "few hundred matches" grep looks for, and one that never occurs.
NEEDLE = "lobster-thermidor"
ABSENT = "zebra-quokka-absent"

_WORDS = (
    "the", "agent", "reads", "module", "config", "parser", "test", "result", "task", "file",
    "commit", "branch", "tree", "summary", "plan", "review", "error", "retry", "query",
    "answer", "question", "worker", "queue", "cache", "index", "daemon", "lock", "event",
    "transcript", "profile", "model", "token", "budget", "limit", "depth", "child", "parent",
)  # fmt: skip


def pin_environment() -> None:
    """Fixed git identity, no system/global git config, no colour, no API keys.

    Set on ``os.environ`` so every subprocess a bench starts (git, jpfs) sees it too.
    Every bench's ``main`` starts here; the runners a bench builds are the library's
    (``jpfs.api.runner``: its App has the tools).
    """
    os.environ.update(IDENTITY)
    os.environ["GIT_CONFIG_NOSYSTEM"] = "1"
    os.environ["GIT_CONFIG_GLOBAL"] = os.devnull
    os.environ["NO_COLOR"] = "1"
    for key in list(os.environ):
        if key.startswith(("JPFS_", "ANTHROPIC_")):
            del os.environ[key]


def stop_cleanly_on_sigterm() -> None:
    """For a bench run as a program: ``kill`` (SIGTERM) runs its ``finally`` blocks, so
    the daemons and git, HTTPS and SSH servers it started are stopped, not left running
    (SIGTERM's default ends the process at once; a killed bench_sync left its sshd)."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def use_bytecode_cache(path: Path) -> None:
    """Let the Python subprocesses a bench starts cache bytecode, as a user's install does.

    Without it (PYTHONDONTWRITEBYTECODE in CI shells) every ``jpfs`` run recompiles
    jpfs from source, ~10 ms that no user pays; the cache lives in ``path``, not in
    the source tree.
    """
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = str(path)


def git(repo: Path, *args: str, data: bytes | None = None) -> str:
    proc = subprocess.run(["git", *args], cwd=repo, input=data, capture_output=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed: {proc.stderr.decode(errors='replace')}")
    return proc.stdout.decode().strip()


_SPENT: list[Path] = []  # temp dirs of benches that are done, removed at exit


@contextlib.contextmanager
def temp_dir(prefix: str = "jpfs-bench-") -> Iterator[Path]:
    """A fresh directory, removed when the bench process exits, not when the block ends.

    Removing a workspace between two measurements slows the second one down on a file
    system without a journal (ext4 as this machine mounts it): for 60 s after an inode
    is freed (360 s while its inode table block is not written back), ext4 skips it,
    one buffer lookup each, in every file creation in its block group
    (``recently_deleted()`` in fs/ext4/ialloc.c). Removing the 15k-file workspace of
    the 1k size made the event writes of the next size 10-30x slower (perf: 43% of the
    bench's CPU in that scan), an effect of the harness, not of jpfs. The removal at
    exit is flushed, so that the next bench process meets those inodes quarantined for
    60 s, not 360.
    """
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        _SPENT.append(path)


@atexit.register
def _remove_spent() -> None:
    while _SPENT:
        shutil.rmtree(_SPENT.pop(), ignore_errors=True)
    os.sync()


def make_workspace(path: Path) -> Path:
    """A git repo with one commit and an initialised jpfs workspace (identity pinned)."""
    from jpfs.services.workspace.bootstrap import init_workspace

    pin_environment()
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    for key, value in (
        ("user.name", IDENTITY["GIT_AUTHOR_NAME"]),
        ("user.email", IDENTITY["GIT_AUTHOR_EMAIL"]),
        ("gc.auto", "0"),  # keep background gc out of the timings
        ("commit.gpgsign", "false"),
    ):
        git(path, "config", key, value)
    (path / "README.md").write_text("# bench project\n", encoding="utf-8")
    git(path, "add", "README.md")
    git(path, "commit", "-q", "-m", "initial")
    init_workspace(path)
    return path


def add_profile(ws_root: Path, name: str, text: str) -> None:
    """Write ``.jpfs/agents/<name>.toml`` and allow top-level callers to run it."""
    import tomlkit

    (ws_root / ".jpfs" / "agents" / f"{name}.toml").write_text(text, encoding="utf-8")
    cfg_path = ws_root / ".jpfs" / "config.toml"
    doc = tomlkit.parse(cfg_path.read_text(encoding="utf-8"))
    agents = doc.setdefault("agents", tomlkit.table())
    allowed = agents.setdefault("allowed", tomlkit.array())
    if name not in allowed:
        allowed.append(name)
    cfg_path.write_text(tomlkit.dumps(doc), encoding="utf-8")


def _record_template(ws_root: Path) -> str:
    """A real conversation.toml (the default profile's [config] snapshot included),
    made by jpfs itself, with the id-specific fields as placeholders."""
    from jpfs.core.conversation import create
    from jpfs.core.workspace import open_workspace
    from jpfs.services.conversations.lifecycle import agent_config

    ws = open_workspace(ws_root, search=False)
    conv = create(
        ws.conv_root,
        "bench-template",
        agent="default",
        title="@TITLE@",
        config=agent_config(ws, "default"),
        extra={"base": "0" * 40},
    )
    text = conv.toml_path.read_text(encoding="utf-8")
    shutil.rmtree(conv.path)
    lines = []
    for line in text.splitlines():
        if line.startswith("created = "):
            line = "created = @CREATED@"
        lines.append(line)
    return "\n".join(lines) + "\n"


def _sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words)).capitalize() + "."


def conversation_ids(n: int) -> list[str]:
    """``n`` ids in groups of ten: a top-level conversation and nine sub-agents under it."""
    out = []
    for i in range(n):
        top = f"b-{i // 10:05d}"
        out.append(top if i % 10 == 0 else f"{top}/s{i % 10}")
    return out


@dataclass(frozen=True)
class Tree:
    conversations: int
    events: int
    files: int
    needle_matches: int
    build_seconds: float


def populate(ws_root: Path, conversations: int, events: int, *, seed: int = 1) -> Tree:
    """Write ``conversations`` idle conversations of ``events`` events each and commit them
    in one go. About 300 event files (one line each) contain :data:`NEEDLE`."""
    t0 = time.perf_counter()
    rng = random.Random(seed)
    template = _record_template(ws_root)
    conv_root = ws_root / "conversations"
    step = max(1, conversations // 300)
    files = matches = 0
    for i, conv_id in enumerate(conversation_ids(conversations)):
        path = conv_root.joinpath(*conv_id.split("/"))
        events_dir = path / "events"
        events_dir.mkdir(parents=True)
        minute = i % 60
        created = f"2026-01-{1 + i % 28:02d}T10:{minute:02d}:00Z"
        record = template.replace("@TITLE@", f"bench conversation {i}").replace(
            "@CREATED@", created
        )
        (path / "conversation.toml").write_text(record, encoding="utf-8")
        task = _sentence(rng, 20)
        (path / "task.md").write_text(task + "\n", encoding="utf-8")
        body = ""
        for seq in range(1, events + 1):
            role = "user" if seq % 2 else "assistant"
            if seq == 1:
                body = task
            else:
                body = "\n\n".join(_sentence(rng, 12 + rng.randrange(12)) for _ in range(3))
            if seq == 2 and i % step == 0:
                body += f"\n\nSee {NEEDLE} for details."
                matches += 1
            meta = f'role = "{role}"\ncreated = {created}\n'
            if role == "assistant":
                meta += (
                    'model = "claude-bench"\nstop_reason = "end_turn"\n\n'
                    "[usage]\ninput_tokens = 1200\noutput_tokens = 150\n"
                )
            (events_dir / f"{seq:04d}-{role}.md").write_text(
                f"+++\n{meta}+++\n{body}\n", encoding="utf-8"
            )
        last_role = "user" if events % 2 else "assistant"
        if last_role == "assistant":
            (path / "result.md").write_text(
                f"+++\nevent = {events}\ncreated = {created}\nsuccess = true\n+++\n{body}\n",
                encoding="utf-8",
            )
            files += 1
            matches += NEEDLE in body  # with two events, the result is the needle's turn
        files += events + 2
    # Committed on the record (the conversation root is its worktree), as by hand.
    git(conv_root, "add", "-A")
    git(conv_root, "commit", "-q", "-m", f"bench: {conversations} conversations")
    # Written back now, not by the kernel during the measurements that follow.
    os.sync()
    return Tree(conversations, events, files, matches, time.perf_counter() - t0)


# -- timing ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Stats:
    samples: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    p50 = median

    @property
    def p99(self) -> float:
        return percentile(self.samples, 99)

    @property
    def min(self) -> float:
        return min(self.samples)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.samples)

    def to_json(self) -> dict[str, Any]:
        return {
            "n": len(self.samples),
            "median_s": self.median,
            "p99_s": self.p99,
            "min_s": self.min,
            "mean_s": self.mean,
        }


def percentile(samples: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile (with 50 samples, p99 is the slowest)."""
    ordered = sorted(samples)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


def measure(fn: Callable[[], object], *, repeat: int, warmup: int = 1) -> Stats:
    """Wall time of ``fn()``: ``warmup`` untimed calls, then ``repeat`` timed ones."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return Stats(tuple(out))


def measure_interleaved(
    fns: Mapping[str, Callable[[], object]], *, repeat: int, warmup: int = 1
) -> dict[str, Stats]:
    """:func:`measure` for several callables, round-robin: every round runs each once,
    so a burst of other work on the machine hits the baseline and the measurement alike."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    out: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            out[name].append(time.perf_counter() - t0)
    return {name: Stats(tuple(samples)) for name, samples in out.items()}


def command(argv: Sequence[str], cwd: Path, ok: Sequence[int] = (0,)) -> Callable[[], bytes]:
    """A callable running ``argv`` for :func:`measure_interleaved`."""
    return lambda: run_command(argv, cwd, ok)


def run_command(argv: Sequence[str], cwd: Path, ok: Sequence[int] = (0,)) -> bytes:
    """Run a subprocess (output captured); a return code outside ``ok`` is an error."""
    proc = subprocess.run(list(argv), cwd=cwd, capture_output=True, check=False)
    if proc.returncode not in ok:
        raise RuntimeError(
            f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.decode(errors='replace')}"
        )
    return proc.stdout


def measure_command(
    argv: Sequence[str], cwd: Path, *, repeat: int, warmup: int = 1, ok: Sequence[int] = (0,)
) -> Stats:
    return measure(lambda: run_command(argv, cwd, ok), repeat=repeat, warmup=warmup)


def jpfs_argv(*args: str) -> list[str]:
    """``jpfs`` through this interpreter (the venv's), as a user's shell would start it."""
    return [sys.executable, "-m", "jpfs", *args]


# -- output ---------------------------------------------------------------------------


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def ratio(value: float, baseline: float) -> str:
    return f"{value / baseline:.2f}x" if baseline > 0 else "n/a"


def print_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row: Sequence[str]) -> str:
        first = row[0].ljust(widths[0])
        rest = (c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True))
        return "  ".join([first, *rest]).rstrip()

    print(f"\n{title}")
    print(line(cells[0]))
    print("  ".join("-" * w for w in widths))
    for row in cells[1:]:
        print(line(row))
    sys.stdout.flush()


def print_machine() -> None:
    info = machine()
    print(
        f"(machine: {info['cpus']} cpus, Python {info['python']}, git {info['git']};"
        f" load average {info['loadavg_1m']:.1f} at start; workspaces on {info['filesystem']})"
    )


def machine() -> dict[str, Any]:
    git_version = subprocess.run(["git", "--version"], capture_output=True, text=True).stdout
    return {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "git": git_version.strip().removeprefix("git version "),
        # Other work on the machine skews every number; say how busy it was.
        "loadavg_1m": os.getloadavg()[0],
        "filesystem": filesystem(Path(tempfile.gettempdir())),
    }


def filesystem(path: Path) -> str:
    """The file system the benches' workspaces live on (``TMPDIR``), and for ext4
    whether it has a journal: without one, every file creation scans the inodes freed
    in the last minutes (``recently_deleted()`` in fs/ext4/ialloc.c), which git's ref
    updates and loose objects pay many times per turn (bench/RESULTS.md, "A file
    system without a journal"). Read from /proc (Linux); "unknown" elsewhere."""
    try:
        mounts = Path("/proc/self/mounts").read_text(encoding="utf-8").splitlines()
    except OSError:
        return "unknown"
    where = os.path.realpath(path)
    best = ("", "", "")
    for line in mounts:
        device, point, kind = line.split()[:3]
        inside = where == point or where.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best[1]):
            best = (device, point, kind)
    device, point, kind = best
    if kind != "ext4":
        return f"{kind or 'unknown'} at {point or where}"
    journaled = any(Path("/proc/fs/jbd2").glob(f"{Path(device).name}-*"))
    return f"ext4 {'with' if journaled else 'without'} a journal at {point}"
