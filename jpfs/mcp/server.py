"""``jpfs mcp``: the caller's tools served over stdio with the official ``mcp`` SDK.

A thin adapter: ``tools/list`` is :func:`jpfs.mcp.caller.definitions` of the
registry's tools, ``tools/call`` is :meth:`Caller.call` in a worker thread (runs
block), so the server keeps reading requests while agents work. A client's
``notifications/cancelled`` cancels the handler; the handler then sets that call's
cancel event and waits for its thread to stop, so the run's lock is released and
its state recorded before the server moves on. Runner notes become
``notifications/progress`` when the request carried a progress token.
"""

from __future__ import annotations

import functools
import itertools
import os
import signal
import sys
import threading
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
import mcp.types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from jpfs.mcp.caller import Caller, definitions
from jpfs.services.run.runtime import Progress

USAGE_META = "jpfs/usage"


def instructions(caller: Caller) -> str:
    where = f"conversation {caller.root!r}" if caller.root else "a new top-level conversation"
    return (
        f"jpfs workspace {caller.ws.root}: you act as {where}. jp_query starts sub-agents"
        " (profiles: " + ", ".join(caller.settings.tools.agents) + ") in child"
        " conversations and returns their final answer or their onboarding questions;"
        " the other tools read, mail and manage your sub-conversations by id. Only your"
        " own descendants can be named."
    )


def build(caller: Caller) -> Server[Any]:
    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name=d["name"], description=d["description"], input_schema=d["input_schema"]
                )
                for d in definitions(caller.tools)
            ]
        )

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        cancel = threading.Event()
        work = functools.partial(
            caller.call,
            params.name,
            params.arguments or {},
            cancel=cancel,
            progress=progress_forwarder(ctx) if wants_progress(ctx) else None,
        )
        async with anyio.create_task_group() as tg:
            tg.start_soon(set_when_cancelled, cancel)
            try:
                # Not abandoned on cancel: the thread is told to stop and awaited.
                result = await anyio.to_thread.run_sync(work)
            finally:
                tg.cancel_scope.cancel()
        # A jp_query's usage travels in _meta: the text stays the seeds' exact
        # <response ...> form, which clients hand to their model as it is.
        meta = {USAGE_META: result.usage} if result.usage is not None else None
        return types.CallToolResult(
            content=[types.TextContent(text=result.text)], is_error=result.is_error, _meta=meta
        )

    return Server(
        "jpfs",
        version=_version(),
        instructions=instructions(caller),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def _version() -> str:
    # From the installed package's metadata, as `jpfs --version` reads it: importing
    # the root package would reach the library API above this adapter.
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("jpfs")
    except PackageNotFoundError:
        return "0+unknown"


async def set_when_cancelled(cancel: threading.Event) -> None:
    """Set ``cancel`` once this task is cancelled (request cancelled, or call finished)."""
    try:
        await anyio.sleep_forever()
    finally:
        cancel.set()


def wants_progress(ctx: ServerRequestContext[Any]) -> bool:
    # The SDK parses the wire's _meta.progressToken into the snake_case key.
    return (ctx.meta or {}).get("progress_token") is not None


def progress_forwarder(ctx: ServerRequestContext[Any]) -> Progress:
    token = anyio.lowlevel.current_token()
    counter = itertools.count(1)
    lock = threading.Lock()

    def forward(note: str) -> None:
        # Parallel tool calls note from several threads; progress must increase.
        with lock:
            try:
                anyio.from_thread.run(
                    ctx.session.report_progress, float(next(counter)), None, note, token=token
                )
            except Exception:  # client gone or server stopping: progress is advisory
                pass

    return forward


def serve(caller: Caller) -> None:
    """Serve until stdin closes, or until SIGINT/SIGTERM (how clients such as Claude
    Code stop their servers): then the calls in flight are cancelled and awaited (each
    run stops and records its state), and the process exits 130/143 at once. Waiting
    for the SDK's stdin reader thread would hang until the client closes the pipe."""
    stopped_by: list[int] = []

    async def main() -> None:
        server = build(caller)
        async with stdio_server() as (read_stream, write_stream):
            async with anyio.create_task_group() as tg:
                tg.start_soon(stop_on_signal, tg.cancel_scope, stopped_by)
                await server.run(read_stream, write_stream, server.create_initialization_options())
                tg.cancel_scope.cancel()
            if stopped_by:  # before stdio_server's exit, which waits for a line of stdin
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(128 + stopped_by[0])

    anyio.run(main)


async def stop_on_signal(scope: anyio.CancelScope, stopped_by: list[int]) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            stopped_by.append(int(signum))
            scope.cancel()
            return
