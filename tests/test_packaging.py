"""The package as users get it: built (wheel and sdist), installed into a fresh
environment, run; its version from one place; its dependency bounds the tested ones."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
import tarfile
import tomllib
import zipfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def run(argv: list[str | Path], cwd: Path, **kw: object) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(a) for a in argv], cwd=cwd, capture_output=True, text=True, timeout=300,
        check=False, **kw,  # type: ignore[arg-type]
    )  # fmt: skip
    assert done.returncode == 0, f"{argv}: {done.stdout}\n{done.stderr}"
    return done


def test_the_version_has_one_source() -> None:
    import importlib.metadata

    import jpfs

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert "version" not in project and "version" in project["dynamic"]
    assert importlib.metadata.version("jpfs") == jpfs.__version__
    shown = run([BIN / "jpfs", "--version"], ROOT).stdout
    assert shown == f"jpfs {jpfs.__version__}\n"
    assert f"## {jpfs.__version__} " in (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")


def test_upper_bounds_admit_the_tested_versions_and_no_later_minor() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    pins = dict(
        line.lower().split("==")
        for line in (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines()
        if "==" in line
    )
    bounded = []
    for text in project["dependencies"]:
        req = Requirement(text)
        tested = Version(pins[req.name.lower()])
        assert req.specifier.contains(tested), (text, tested)
        uppers = [Version(s.version) for s in req.specifier if s.operator == "<"]
        if uppers and req.name in ("anthropic", "click", "mcp", "openai", "pygit2"):
            # The next minor is where a fast-moving SDK may break us: untested until then.
            assert (uppers[0].major, uppers[0].minor) == (tested.major, tested.minor + 1), text
            bounded.append(req.name)
    assert sorted(bounded) == ["anthropic", "click", "mcp", "openai", "pygit2"]


def test_the_wheel_installs_and_runs_the_readmes_example(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    run([sys.executable, "-m", "build", "--no-isolation", "--outdir", dist, ROOT], tmp_path)
    (wheel,) = dist.glob("jpfs-*.whl")
    (sdist,) = dist.glob("jpfs-*.tar.gz")
    names = zipfile.ZipFile(wheel).namelist()
    for wanted in (
        "jpfs/py.typed",
        "jpfs/templates/config.toml",
        "jpfs/templates/agents/demo.toml",
    ):
        assert wanted in names, wanted
    assert any(re.search(r"\.dist-info/licenses/LICENSE$", n) for n in names), names
    with tarfile.open(sdist) as tar:
        inside = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for wanted in (
        "LICENSE",
        "CHANGELOG.md",
        "README.md",
        "protocol/daemon.md",
        "jpfs/templates/jpfs-daemon.service",
        "jpfs/py.typed",
        "constraints.txt",
    ):
        assert wanted in inside, wanted
    assert "tests/clients/node_modules" not in {"/".join(n.split("/")[:3]) for n in inside}

    # A fresh environment with the wheel; its dependencies are this one's (no network).
    fresh = tmp_path / "fresh"
    run([sys.executable, "-m", "venv", "--without-pip", fresh], tmp_path)
    run([BIN / "pip", "--python", fresh / "bin" / "python", "install", "-q", "--no-deps",
         wheel], tmp_path)  # fmt: skip
    purelib = Path(sysconfig.get_paths()["purelib"])
    fresh_site = next((fresh / "lib").glob("python3*/site-packages"))
    (fresh_site / "deps.pth").write_text(f"{purelib}\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    where = run([fresh / "bin" / "python", "-c", "import jpfs; print(jpfs.__file__)"],
                tmp_path, env=env).stdout  # fmt: skip
    assert where.startswith(str(fresh_site)), where  # the wheel's jpfs, not this checkout
    assert run([fresh / "bin" / "jpfs", "--version"], tmp_path, env=env).stdout.startswith("jpfs ")

    # The README's Python example, verbatim but for the offline demo agent.
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    example = re.search(r"```python\n(import jpfs\n.*?)```", readme, re.S)
    assert example, "the README's Python example"
    code = example[1].replace('"researcher"', '"demo"')
    repo = tmp_path / "repo"
    repo.mkdir()
    for argv in (["git", "init", "-q"], ["git", "commit", "-q", "--allow-empty", "-m", "i"]):
        run(argv, repo, env=env)
    run([fresh / "bin" / "jpfs", "init"], repo, env=env)
    (repo / "example.py").write_text(code, encoding="utf-8")
    shown = run([fresh / "bin" / "python", "example.py"], repo, env=env,
                input="Focus on src/\n" * 5).stdout  # fmt: skip
    assert "Summary for:" in shown, shown
    # And a user's mypy --strict finds the package typed (py.typed).
    checked = subprocess.run(
        [BIN / "mypy", "--strict", "--python-executable", fresh / "bin" / "python",
         "--no-incremental", "example.py"],
        cwd=repo, capture_output=True, text=True, timeout=300, check=False, env=env,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_make_clean_removes_every_cache(tmp_path: Path) -> None:
    (tmp_path / "Makefile").write_text((ROOT / "Makefile").read_text(encoding="utf-8"))
    caches = [".venv", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".hypothesis",
              ".import_linter_cache", "bench/out", "build", "dist", "jpfs.egg-info",
              "tests/clients/node_modules", "jpfs/__pycache__", "tests/core/__pycache__"]  # fmt: skip
    for cache in caches:
        (tmp_path / cache).mkdir(parents=True)
        (tmp_path / cache / "x").write_text("x")
    (tmp_path / "jpfs" / "kept.py").write_text("")
    run(["make", "clean"], tmp_path)
    assert [c for c in caches if (tmp_path / c).exists()] == []
    assert (tmp_path / "jpfs" / "kept.py").exists()


def test_make_test_without_npm_skips_the_client_tests_outside_ci_only(tmp_path: Path) -> None:
    """The README: without npm, `make test` says the client tests are skipped; in CI
    (where they must run) it fails instead."""
    import shutil

    (tmp_path / "Makefile").write_text((ROOT / "Makefile").read_text(encoding="utf-8"))
    clients = tmp_path / "tests" / "clients"
    clients.mkdir(parents=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copy(ROOT / "tests" / "clients" / name, clients / name)
    tools = tmp_path / "bin"  # a PATH with a shell and no npm
    tools.mkdir()
    (tools / "sh").symlink_to(shutil.which("sh") or "/bin/sh")
    make = shutil.which("make") or "make"
    env = {"PATH": str(tools), "HOME": str(tmp_path)}
    local = subprocess.run([make, "clients"], cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=60, check=False)  # fmt: skip
    assert local.returncode == 0, local.stderr
    assert "npm not found: the Claude Code client tests will be skipped" in local.stderr
    ci = subprocess.run([make, "clients"], cwd=tmp_path, env={**env, "CI": "1"},
                        capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert ci.returncode != 0 and "CI must run the client tests" in ci.stderr


def test_the_demo_refuses_what_it_does_not_take(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "jpfs.demo", "--kept"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 2 and "usage: python -m jpfs.demo [--keep]" in done.stderr
