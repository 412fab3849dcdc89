"""The daemon: wiring of the watcher, the reconciler and the agent pool.

Start-up, in this order (each step makes the next one safe after a SIGKILL):

1. take the workspace's daemon lock (one daemon per workspace);
2. make sure the record worktree is sound, mark the time from which no write is
   missed, and report ready;
3. catching up (``catch_up``): watch, delete temporary files of dead jpfs processes,
   commit whatever a killed process or the user wrote while no daemon ran, and scan
   what changed since the last daemon looked.

The main thread runs the reconciler loop; a signal is only queued, and a thread of its
own sets the events that loop checks (:mod:`jpfs.services.daemon.process`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import logging.handlers
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

from jpfs.core import locks
from jpfs.core.conversation import Conversation
from jpfs.core.state import State
from jpfs.core.workspace import Workspace
from jpfs.errors import (
    Cancelled,
    ConversationGone,
    JpfsError,
    LockError,
    RepositoryFault,
)
from jpfs.infra.git import refs
from jpfs.infra.providers.base import Provider
from jpfs.services.daemon import actions, configwatch, process, queryserver, recovery
from jpfs.services.daemon.actions import Need, RunWatch
from jpfs.services.daemon.configwatch import ConfigWatch, NotesWatch
from jpfs.services.daemon.lasterror import LastError
from jpfs.services.daemon.outcomes import Outcomes
from jpfs.services.daemon.pool import Job, Pool
from jpfs.services.daemon.reconciler import Reconciler
from jpfs.services.daemon.shared import SharedRecord
from jpfs.services.daemon.statuswriter import StatusWriter
from jpfs.services.daemon.unrecorded import Unrecorded
from jpfs.services.daemon.watcher import watch
from jpfs.services.run.app import App
from jpfs.services.run.runtime import Runner
from jpfs.services.workspace import policy

log = logging.getLogger("jpfs.services.daemon")

# How long a run's jp_query waits for a child that another run holds.
CHILD_LOCK_WAIT = 600.0


class Daemon:
    def __init__(
        self,
        ws: Workspace,
        cfg: Sequence[str] = (),
        app: App | None = None,
        *,
        own_process: bool = False,
    ) -> None:
        """``own_process``: the process is this daemon's alone (``jpfs daemon run``), so
        it may settle the process's heap once warm (:func:`process.settle_heap`)."""
        self.ws = ws
        self.own_process = own_process
        # Its runs' background starts (a jp_query's fork, mail) queue in its pool.
        self.app = dataclasses.replace(app or App(), starter=self.start_in_pool)
        self.cfg = tuple(cfg)  # the --cfg layers it was started with, kept on a reload
        self.errors = LastError()
        self.config_watch = ConfigWatch(
            ws, self.cfg, self.errors.record, lambda: self.errors.clear_ending(configwatch.KEPT)
        )
        self.notes_watch = NotesWatch(ws)  # status's notes of profiles, checked on change
        self.files = process.Files.of(ws)
        self.stop = threading.Event()
        self.force = threading.Event()
        self.ready = threading.Event()
        self.stats = process.Stats()
        self.providers: dict[str, Provider] = {}
        self.unrecorded = Unrecorded(ws)  # failures its conversation's files refused
        # A run that failed or was postponed, and when the reconciler looks again.
        self.outcomes = Outcomes(
            ws,
            self.stats,
            self.errors,
            self.unrecorded,
            lambda conv_id, after: self.reconciler.run_done(conv_id, after=after),
        )
        settings = ws.config
        self.pool = Pool(int(settings["daemon.max_agents"]), self.run_job, self.outcomes.done)
        self.reconciler = Reconciler(
            ws,
            self.pool,
            debounce=float(settings["daemon.debounce"]),
            settle=float(settings["daemon.settle"]),
            scan_interval=float(settings["daemon.scan_interval"]),
            on_error=self.errors.record,
        )
        self._watcher: threading.Thread | None = None
        self._watching = threading.Event()
        self.status_writer = StatusWriter()  # daemon.json
        self._housekeeping_failed = False  # the last tick's housekeeping raised
        self.catching_up = False  # ready, still looking at what changed while stopped
        self.queries: queryserver.QueryServer | None = None  # `jpfs query` handed over
        self.shared: SharedRecord | None = None  # sync.remote set: peers share the record

    # -- lifecycle ------------------------------------------------------------------------
    def run(self) -> int:
        """Serve until :attr:`stop` is set (a signal, or a test); returns the exit status."""
        # The lock is let go last: `jpfs daemon stop` waits for it (and then the pid), so
        # what runs after it (the workers' join) must run before it.
        with process.instance_lock(self.files):
            try:
                log.info("daemon %d starting in %s", os.getpid(), self.ws.root)
                try:
                    self.prepare()
                    # Ready once the mark is down: what is written from then on is seen
                    # by the watch, or, while the watch is still being set up (one watch
                    # per directory: O(record)), by the catch-up that follows it, in the
                    # loop's thread, before any event, with what was written before (a
                    # crash's leftovers, edits while no daemon ran).
                    watched_since = self.mark_watching()
                    self.catching_up = True
                    self.serve_queries()
                    self.ready.set()
                    self.write_status(force=True)
                    log.info("daemon ready in %s", self.ws.conv_root)
                    if self.shared is not None:
                        self.shared.start()
                    self.catch_up(watched_since)
                    self.reconciler.loop(self.stop, self.tick)
                finally:
                    self.shutdown()
                log.info("daemon %d stopped", os.getpid())
            finally:
                self.pool.force()  # no-op after a clean shutdown; ends the idle workers otherwise
                self.pool.join(5.0)
        return 0

    def prepare(self) -> None:
        self.ws.ensure_record()
        policy.keep_all(self.ws)  # a checkout right after start finds copies to stand in
        if self.ws.config.sync.remote:
            self.shared = SharedRecord(
                self.ws,
                self.pool,
                self.app.claims,
                look_again_in=self.outcomes.look_again_in,
                fail=self.outcomes.fail,
                record_moved=self.reconciler.record_moved,
            )
            self.reconciler.shared = True
            self.reconciler.spread = self.shared.engine.claimer.order
            self.reconciler.merging = lambda: self.shared.engine.merging if self.shared else None

    def serve_queries(self) -> None:
        self.queries = queryserver.QueryServer(
            self.ws, cfg=self.cfg, runner=self.runner, stopping=self.stop,
            on_error=self.errors.record, idle=lambda: not self.catching_up,
            after_warm=self.settle if self.own_process else lambda: None,
        )  # fmt: skip
        self.queries.start()

    def settle(self) -> None:
        log.info("heap settled: %d objects out of the collector's sight", process.settle_heap())

    def mark_watching(self) -> int:
        """The file-system time from which every write is seen as an edit (by the watch,
        or by the catch-up for what came before the watch was in place): a file written
        now, stamped by the same clock that stamps the user's files."""
        mark = self.ws.ensure_local() / "watching-since"
        mark.write_text(f"{os.getpid()}\n", encoding="utf-8")
        return mark.stat().st_mtime_ns

    def catch_up(self, watched_since: int | None = None) -> None:
        """Start-up chores that grow with the record, done once ready: the watch,
        temporary files of dead writers, files a crash left uncommitted, and a look at
        every conversation that changed since the last daemon saw it."""
        started = time.monotonic()
        try:
            self.start_watching()
        except JpfsError as exc:
            # Ready was already said: keep serving on the periodic scans, and say so.
            log.error("%s: only the periodic scans see changes now", exc)
            self.errors.record(f"file watcher: {exc}; only the periodic scans see changes")
        swept = recovery.sweep_debris(self.ws)
        if swept:
            log.info("removed %d temporary file(s) or dir(s) left by killed processes", swept)
        try:
            self.reconciler.recover(
                "jpfs: recover files written before a crash", before_ns=watched_since
            )
        except RepositoryFault as exc:
            # Serve anyway: status says what is wrong, and the scans commit once it is fixed.
            log.error("cannot commit the files found at start: %s", exc)
            self.errors.record(f"start-up: {exc}")
        self.reconciler.start(self.stop)
        self.catching_up = False
        self.write_status(force=True)
        log.info("caught up with the record in %.2f s", time.monotonic() - started)

    def start_in_pool(self, ws: Workspace, conv_id: str) -> bool:
        if self.stop.is_set():
            return False  # stopping: the caller's own (stopping) runner has it
        self.pool.submit(conv_id)
        return True  # queued, running, or left for the next start's scan

    def start_watching(self) -> None:
        self._watcher = threading.Thread(target=self._watch, name="jpfs-watcher", daemon=True)
        self._watcher.start()
        while not self._watching.wait(0.05):
            if not self._watcher.is_alive():
                raise JpfsError(f"cannot watch {self.ws.conv_root} (see {self.files.log})")

    def _watch(self) -> None:
        try:
            for batch in watch(
                self.ws.conv_root,
                self.stop,
                debounce=self.ws.config.daemon.debounce,
                started=self._watching,
            ):
                self.reconciler.post(batch)
        except Exception as exc:
            log.exception("the file watcher failed; only the periodic scans remain")
            self.errors.record(f"file watcher: {exc}")

    def shutdown(self) -> None:
        self.stop.set()
        running, _ = self.pool.snapshot()
        if running:
            log.info("stopping: letting %d run(s) finish their current step", len(running))
        self.pool.stop()
        while not self.pool.join(0.1):
            if self.force.is_set():
                log.info("second signal: interrupting the runs")
                self.pool.force()
                self.pool.join()
                break
            self.write_status()
        if self.queries is not None:
            self.queries.close(self.force)
        if self._watcher is not None:
            self._watcher.join()
        if self.shared is not None:
            self.shared.stop()  # pushes the last results and gives their leases back
        self.reconciler.close()
        self.ws.committer.close()

    # -- runs (pool threads) --------------------------------------------------------------
    def runner(self, **options: Any) -> Runner:
        """The daemon's one runner factory (its pool's runs, the queries handed to it)."""
        return self.watched(**options)[0]

    def watched(
        self,
        *,
        stopping: threading.Event | None = None,
        cancel: threading.Event | None = None,
        **options: Any,
    ) -> tuple[Runner, RunWatch]:
        """A runner with the daemon's hooks (stopped between steps once ``stopping``,
        the daemon's by default, is set), and what status shows of it."""
        watch = RunWatch(
            self.stop if stopping is None else stopping,
            threading.Event() if cancel is None else cancel,
        )
        runner = Runner(
            self.ws,
            app=self.app,
            providers=self.providers,
            cancel=watch.cancel,
            hooks=watch.hooks(),
            **options,
        )
        return runner, watch

    def run_job(self, job: Job) -> None:
        runner, watch = self.watched(
            cancel=job.cancel, stopping=job.stopping, lock_wait=CHILD_LOCK_WAIT
        )
        job.info["watch"] = watch
        watch.on_call = lambda: self.pool.calling(job)
        conv = Conversation(self.ws.conv_root, job.conv_id)
        try:
            with (
                locks.conversation_lock(self.ws.local_dir, conv.id),
                contextlib.ExitStack() as held,
            ):
                verdict = actions.needs(self.ws, conv)
                if self.shared is not None and verdict.need is not Need.NOTHING:
                    verdict = self.shared.take(conv, verdict, held)
                if verdict.need is not Need.RUN or not self.pool.wait_turn(job):
                    return  # (claimed ahead and stopped meanwhile: its lease goes back)
                meta = conv.meta()
                job.info["agent"] = meta.get("agent", "")
                job.info["model"] = conv.settings.model
                self.stats.runs += 1
                log.info("%s: run starts (%s)", conv.id, verdict.state)
                try:
                    state = runner.run_locked(conv)
                except Cancelled:
                    log.info("%s: run stopped by the daemon; it resumes at the next start", conv.id)
                    return
                except RepositoryFault as exc:
                    self.outcomes.postpone(conv, exc)
                    return
                except ConversationGone:
                    log.info("%s: removed while it ran; nothing more is written to it", conv.id)
                    self.errors.clear_of(conv.id)
                    return
                except JpfsError as exc:
                    self.outcomes.fail(
                        conv, str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                    )
                    return
                except Exception as exc:
                    fault = RepositoryFault.of(exc)
                    if fault is not None:  # a full disk: the machine's, not the conversation's
                        self.outcomes.postpone(conv, fault)
                        return
                    log.exception("%s: run crashed", conv.id)
                    name = type(exc).__name__
                    self.outcomes.fail(
                        conv, f"internal error in jpfs ({name}); see {self.files.log}"
                    )
                    return
                finally:
                    # Before the lease's release (leaving ``held``) wakes the sync cycle,
                    # which waits for the runs starting next (Pool.starting).
                    job.phase = "ended"
                self.outcomes.went_through(conv.id)
                log.info("%s: run ends: %s", conv.id, state)
                if state is State.FAILED:
                    last = conv.last_event()
                    reason = last.body.strip() if last is not None and last.role == "error" else ""
                    self.stats.failures += 1
                    first = reason.splitlines()[0] if reason else "failed"
                    self.errors.record(f"{conv.id}: {first}", conv.id, failed=True)
                    log.warning("%s: failed: %s", conv.id, reason)
                else:
                    self.errors.clear_of(conv.id)
        except LockError:
            log.debug("%s: taken by another run; looking again when it is free", conv.id)
        except OSError as exc:  # before its run (its adoption, a claim's merge)
            fault = RepositoryFault.of(exc)
            if fault is None:
                raise
            self.outcomes.postpone(conv, fault)
        finally:
            # The worker may idle for long: a kept handle holds the pack files it read.
            refs.forget()

    # -- configuration and status -------------------------------------------------------
    def tick(self) -> None:
        """Between the loop's looks: the configuration, notes, failures kept here and
        daemon.json. None of it may stop the daemon (a full disk under ``.jpfs/local``
        fails their writes): an error is logged, once while it lasts."""
        try:
            self._housekeep()
        except Exception:
            if not self._housekeeping_failed:
                log.exception("housekeeping failed (the daemon carries on; trying again)")
            self._housekeeping_failed = True
        else:
            self._housekeeping_failed = False

    def _housekeep(self) -> None:
        if self.config_watch.poll() is not None:
            # Pool size and timings at once; the rest as each run reads ws.config.
            current = self.ws.config
            size = int(current["daemon.max_agents"])
            self.pool.resize(size, ahead=size if self.shared is not None else 0)
            self.reconciler.debounce = float(current["daemon.debounce"])
            self.reconciler.settle = float(current["daemon.settle"])
            self.reconciler.scan_interval = float(current["daemon.scan_interval"])
        self.notes_watch.poll()
        self.unrecorded.tick()
        self.write_status()

    def write_status(self, force: bool = False) -> None:
        """Refresh daemon.json (:mod:`jpfs.services.daemon.statuswriter` says when)."""
        self.status_writer.write(self, force)


# -- entry point ---------------------------------------------------------------------------------


def serve(app: App, ws: Workspace, *, stderr: bool, cfg: Sequence[str] = ()) -> int:
    """``jpfs daemon run``: the foreground daemon, signals handled, running with
    ``app`` (built by the daemon process's entry point: the tools)."""
    process.limit_malloc_arenas()  # before the daemon's threads start
    process.setup_logging(ws, stderr=stderr)
    daemon = Daemon(ws, cfg, app, own_process=True)
    signals = process.Signals(daemon.stop, daemon.force, daemon.reconciler.request_scan)
    signals.install()
    try:
        return daemon.run()
    finally:
        signals.restore()
