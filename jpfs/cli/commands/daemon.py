"""``jpfs daemon start|stop|status|run``."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Annotated, Any

import typer

from jpfs.cli.context import note, out, out_json, state
from jpfs.cli.lazygroup import Commands
from jpfs.cli.options import Format
from jpfs.errors import JpfsError


def start(
    timeout: Annotated[
        float, typer.Option("--timeout", help="Seconds to wait for the daemon to be ready.")
    ] = 30.0,
) -> None:
    """Start the daemon in the background; print its pid once it is ready."""
    from jpfs.services.daemon import process

    ws = state.ws()
    pid = process.spawn(ws, state.cfg, timeout=timeout)
    note(f"daemon started for {ws.root} (log: {process.Files.of(ws).log})")
    out(str(pid))


def stop(
    timeout: Annotated[
        float, typer.Option("--timeout", help="Seconds to wait for the runs to stop.")
    ] = 60.0,
    force: Annotated[
        bool, typer.Option("--force", help="Interrupt the steps in flight (still clean).")
    ] = False,
) -> None:
    """Stop the daemon: each run finishes its current step (or is interrupted with --force)."""
    from jpfs.services.daemon import process

    pid = process.stop(process.Files(state.local_dir()), timeout=timeout, force=force)
    if pid is None:
        note("no daemon is running for this workspace")
        return
    note(f"daemon {pid} stopped")


def status(fmt: Format = "text") -> None:
    """Whether the daemon runs, its pid, uptime, agents running, queue and last error.

    Exit status 0 when it runs, 1 when it does not (like `systemctl is-active`).
    """
    from jpfs.services.daemon import process

    data = process.status(process.Files(state.local_dir()))
    if data.get("running"):
        data["config_error"], notes = _config_now()
        data["policy"] = {**(data.get("policy") or {}), **notes}
    if fmt == "json":
        out_json(data)
    else:
        out(render(data))
    if not data.get("running"):
        raise typer.Exit(1)


def _config_now() -> tuple[str | None, dict[str, str]]:
    """What is wrong with the configuration now (a running daemon keeps the one it
    read), and what of it the last good copy stands in for."""
    try:
        ws = state.ws()
    except JpfsError as exc:
        return str(exc), {}
    return None, ws.notes


def render(data: dict[str, Any]) -> str:
    if not data.get("running"):
        return "not running"
    lines = [
        f"running: pid {data['pid']}"
        + (f", up {_duration(data['uptime'])}" if data.get("uptime") is not None else "")
        + ("" if data.get("ready") else " (starting)")
        + (" (stopping)" if data.get("stopping") else ""),
        f"agents: {data.get('agents_running', 0)} of {data.get('max_agents', '?')} running,"
        + (f" {len(ahead)} claimed ahead," if (ahead := data.get("claimed_ahead")) else "")
        + f" {data.get('queue', 0)} queued",
    ]
    for agent in data.get("agents") or []:
        lines.append(
            f"  {agent['id']}  {agent.get('agent', '')}  {_duration(agent.get('elapsed', 0))}"
            f"  {agent.get('tokens', 0)} tokens"
        )
    sync = data.get("sync")
    if sync:
        holding = sorted(sync["peers"].items())
        idle = sorted(set(sync.get("present", ())) - set(sync["peers"]) - {sync["machine"]})
        peers = ", ".join([*(f"{name} ({held})" for name, held in holding), *idle])
        fetched = sync.get("last_fetch_s")
        lines.append(
            f"sync: {sync['remote']} as {sync['machine']}; {len(sync['leases_held'])} lease(s)"
            f" held, {sync['leases_on_remote']} on the remote"
            + (f"; fetched {fetched:g}s ago" if fetched is not None else "; not fetched yet")
            + f"; {sync.get('ahead', 0)} commit(s) to push, {sync.get('behind', 0)} to merge"
            + f"; peers: {peers or 'none seen'}"
        )
        for path in sync.get("conflicts") or []:
            lines.append(f"  conflict kept beside: {path}")
        if sync.get("unreachable_since"):
            since = datetime.fromtimestamp(sync["unreachable_since"]).strftime("%H:%M:%S")
            away = _duration(time.time() - sync["unreachable_since"])
            lines.append(f"  remote unreachable since {since} ({away}); work goes on locally")
        if sync.get("last_error"):
            lines.append(f"  sync error: {sync['last_error']}")
    for path, why in sorted((data.get("policy") or {}).items()):
        lines.append(f"policy: {path}: {why} (the last good copy stands in)")
    if data.get("config_error"):
        lines.append(f"config error: {data['config_error']} (the daemon runs with what it read)")
    for kept in data.get("unrecorded") or []:
        lines.append(
            f"failed: {kept['conversation']}: {kept['message'].splitlines()[0]} (not written"
            f" into the conversation: {kept['why']}; mend it, then `jpfs retry"
            f" {kept['conversation']}`)"
        )
    err = data.get("last_error")
    lines.append(f"last error: {err['time']} {err['message']}" if err else "last error: none")
    return "\n".join(lines)


def _duration(seconds: float) -> str:
    seconds = int(seconds or 0)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def run(
    detached: Annotated[bool, typer.Option("--detached", hidden=True)] = False,
) -> None:
    """Run the daemon in the foreground (for systemd or a terminal).

    SIGTERM or Ctrl-C stops it gracefully (runs finish their current step); a second
    signal interrupts the steps in flight.
    """
    from jpfs.cli.app import app as process_app
    from jpfs.services.daemon import service

    code = service.serve(process_app(), state.ws(), stderr=not detached, cfg=state.cfg)
    if code:
        raise typer.Exit(code)


COMMANDS = Commands(
    help="The background daemon: runs agents when conversation files change.",
    entries={"start": start, "stop": stop, "status": status, "run": run},
)
