"""One persistent connection per MCP server per process, on the official `mcp` SDK.

Every connection lives on one event loop in a thread of its own (the hub): a run, a REST view
or a management command calls in from any loop or thread, and cancelling the caller cancels
the request task here, so the SDK sends `notifications/cancelled` (Stop). A connection opens
on first use, lists the tools, refreshes them on `notifications/tools/list_changed`, and
after a failure waits (backoff, doubling up to BACKOFF_MAX_S) before the next try.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
from contextlib import AsyncExitStack
from typing import Any, Callable

from django.conf import settings
from django.db import OperationalError, close_old_connections, connections
from django.utils import timezone

from tools_app import sandbox
from tools_app.mcp import listing, transport
from tools_app.mcp.config import (
    NAVI_VERSION,
    ConfigError,
    ServerConfig,
    check_url_reachable,
    connect_timeout,
    data_dir,
    is_launcher,
    resolve_command,
)
from tools_app.mcp.paths import check_paths
from tools_app.mcp.paths import run_as as run_as_user
from tools_app.models import MCPServer

log = logging.getLogger(__name__)

FIRST_START_MARK = ".navi-started"  # in a launcher's data folder after its first handshake
PROGRESS_EVERY_S = 5.0
LIST_CAP = 200  # resources or prompts kept per server
BACKOFF_MIN_S = 1.0
BACKOFF_MAX_S = 60.0
# A stdio program that exited while idle is started again by Navi after this long (sooner when it
# is used): until then it shows `failed`, and what killed it, to whoever looks.
RESTART_AFTER_EXIT_S = 60.0
STDERR_TAIL = 2000
SANDBOX_HOME = "/home/mcp"  # the stdio server's home in the sandbox: its own data folder (data_dir)
# Names no MCP tool may take (the registry's); set when the tool registry is built.
reserved_names: Callable[[], set[str]] = set


class Unavailable(RuntimeError):
    """The server is not connected; the message says why and what to do."""


def first_error(exc: BaseException) -> BaseException:
    """The first real error inside anyio's exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def describe(exc: BaseException) -> str:
    exc = first_error(exc)
    text = str(exc) or type(exc).__name__
    return text if isinstance(exc, (ConfigError, Unavailable)) else f"{type(exc).__name__}: {text}"


class Connection:
    """The client side of one server: its state, its tools, its SDK client (hub loop only)."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.state = "connecting"
        self.error = ""
        self.tools: list[Any] = []  # mcp.types.Tool, as the server listed them
        self.specs: list[listing.ToolSpec] = []  # what is offered of them
        self.problems: dict[str, str] = {}  # tools skipped, and why
        self.client: Any = None
        self.failures = 0
        self.retry_at = 0.0
        self.task: asyncio.Task | None = None
        self.ready: asyncio.Event | None = None
        self.closing: asyncio.Event | None = None
        self.stderr_path = ""
        self.closed_as: str | None = None
        self.on_change: Callable[[Connection], None] | None = None
        self._slots: asyncio.Semaphore | None = None
        self.resources: list[dict] = []
        self.prompts: list[dict] = []
        self.retrying = False  # it died after it had connected: Navi reconnects by itself
        self.live = False  # this attempt reached `connected`

    # --- lifecycle (hub loop) ---------------------------------------------------------------
    async def ensure(self, wait: float, *, quiet: bool = False) -> None:
        """Connect when not connected (unless backing off), waiting up to `wait` seconds.
        `quiet` (Navi's own retry of a server that died): it shows `failed` until it is back."""
        if self.task is None or self.task.done():
            if self.state == "failed" and time.monotonic() < self.retry_at:
                return
            self.ready, self.closing = asyncio.Event(), asyncio.Event()
            if not (quiet and self.state == "failed"):
                self._set("connecting", "")
            self.task = asyncio.get_running_loop().create_task(self._run())
        if wait > 0 and not self.task.done() and not self.ready.is_set():  # an attempt under way
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.ready.wait()), wait)

    async def close(self, state: str | None = None) -> None:
        """End the connection (a stdio server's process group with it). `state`: what the row
        says afterwards ("disabled"); None leaves it to whoever connects next."""
        self.closed_as = state
        if self.closing is not None:
            self.closing.set()
        if self.task is not None and not self.task.done():
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(self.task, 10)

    async def _run(self) -> None:
        """Open, wait for the handshake (bounded), then hold the connection until closed."""
        self.live = False
        body = asyncio.get_running_loop().create_task(self._body())
        ready = asyncio.ensure_future(self.ready.wait())
        limit, first = self._handshake_limit()
        started = time.monotonic()
        done: set = set()
        while not done and time.monotonic() - started < limit:
            step = min(PROGRESS_EVERY_S, limit - (time.monotonic() - started))
            done, _ = await asyncio.wait({body, ready}, timeout=step, return_when=asyncio.FIRST_COMPLETED)
            if not done and first:  # the page shows how far a long first start is
                self._set("connecting", f"first start of {self.config.command}: it downloads the server; "
                          f"{time.monotonic() - started:.0f} s of at most {limit:g} s")
        ready.cancel()
        if done and first and self.state == "connected":
            with contextlib.suppress(OSError):
                (data_dir(self.config.id) / FIRST_START_MARK).touch()
        if not done:
            body.cancel()
            with contextlib.suppress(BaseException):
                await body
            self._fail(f"the server did not answer the MCP handshake (initialize) within {limit:g} s; "
                       f"check that it speaks MCP on this transport, or see its stderr{self._launcher_hint()}")
            return
        try:
            await body
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - any failure is the server's state, never a crash
            self._fail(self._explain(exc), retry=self.live)  # it died after connecting: retried
            return
        if self.state == "failed":
            return
        if not self.closing.is_set():
            self._set("failed", self.error or "the connection closed")
        elif self.closed_as:
            self._set(self.closed_as, "")
        else:
            self.state = "disabled"  # closed by Navi (reconnect, new settings, shutdown): nothing to report

    def _handshake_limit(self) -> tuple[float, bool]:
        """The handshake's time limit, and whether it is a launcher's first start (npx, uvx:
        it downloads the package into the server's data folder, which keeps it for next time)."""
        config = self.config
        if config.transport == "stdio" and is_launcher(config.command):
            if not (data_dir(config.id) / FIRST_START_MARK).exists():
                return max(connect_timeout(), float(getattr(settings, "MCP_FIRST_START_TIMEOUT_S", 180.0))), True
        return connect_timeout(), False

    def _explain(self, exc: BaseException) -> str:
        """The failure, with where and what to check."""
        text = describe(exc)
        inner = first_error(exc)
        if isinstance(inner, ConfigError):
            return text
        if self.config.transport == "http" and type(inner).__name__ in ("ConnectError", "ConnectTimeout"):
            return f"cannot reach {self.config.url} ({text}); check the URL and that the server is running"
        if self.config.transport == "stdio":
            return f"the program stopped or failed to start ({text}); see its stderr below{self._launcher_hint()}"
        return text

    def _launcher_hint(self) -> str:
        """What a launcher (npx, uvx) without the network needs: it downloads its package."""
        if self.config.transport == "stdio" and is_launcher(self.config.command) and not self.config.network:
            return (f". {self.config.command} downloads the server on its first start and this server has no "
                    "network: turn on `network` for it (or install the package and run it directly)")
        return ""

    async def _body(self) -> None:
        async with AsyncExitStack() as stack:
            streams = await self._transport(stack)
            from mcp import Client

            client = Client(streams, mode="legacy", cache=None, message_handler=self._on_message,
                            client_info=_client_info())
            await stack.enter_async_context(client)
            self.client = client
            try:
                self._absorb((await client.list_tools()).tools)
                await self._list_extras(client)
                self.failures, self.retrying, self.live = 0, False, True
                self._set("connected", "")
                self.ready.set()
                await self._watch(client)
            finally:
                self.client = None

    async def _watch(self, client: Any) -> None:
        """Hold the connection until closed; ping the server every MCP_PING_INTERVAL_S, so one
        that died or hangs while idle shows `failed` (a stdio program's exit is seen at once)."""
        from mcp.shared.exceptions import MCPError

        interval = float(getattr(settings, "MCP_PING_INTERVAL_S", 10.0))
        while not self.closing.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.closing.wait(), interval)
                return
            try:
                await asyncio.wait_for(client.send_ping(), interval)
            except MCPError as exc:
                if is_connection_lost(exc):
                    return self._fail_idle(f"the connection closed ({describe(exc)})")
                # any other answer (e.g. "method not found") is an answer: it is alive
            except asyncio.TimeoutError:
                return self._fail_idle(f"it did not answer a ping within {interval:g} s")
            except Exception as exc:  # noqa: BLE001 - any failure of a ping is the server's state
                return self._fail_idle(f"a ping failed ({describe(exc)})")

    def _fail_idle(self, why: str) -> None:
        where = self.config.url if self.config.transport == "http" else "the program"
        self._fail(f"the server stopped answering: {why}. Check that {where} is running; Navi tries again "
                   "by itself, or press Test", retry=True)

    async def _list_extras(self, client: Any) -> None:
        """Its resources and prompts (first page each), when it offers them; a failure here is
        logged, the tools still work."""
        caps = client.server_capabilities
        try:
            if getattr(caps, "resources", None) is not None:
                listed = (await client.list_resources()).resources[:LIST_CAP]
                self.resources = [{"uri": str(r.uri), "name": r.name, "description": (r.description or "")[:300],
                                   "mime_type": r.mime_type or ""} for r in listed]
            if getattr(caps, "prompts", None) is not None:
                listed = (await client.list_prompts()).prompts[:LIST_CAP]
                self.prompts = [{"name": p.name, "description": (p.description or "")[:300], "arguments": [
                    {"name": a.name, "required": bool(a.required), "description": (a.description or "")[:200]}
                    for a in p.arguments or []]} for p in listed]
        except Exception as exc:  # noqa: BLE001 - optional lists; the tools are what matters
            log.info("MCP server %s: listing resources/prompts failed: %s", self.config.name, exc)

    async def read_resource(self, uri: str) -> Any:
        return await self._request(lambda client: client.read_resource(uri))

    async def get_prompt(self, name: str, arguments: dict[str, str]) -> Any:
        return await self._request(lambda client: client.get_prompt(name, arguments))

    async def _request(self, send: Callable[[Any], Any]) -> Any:
        await self.ensure(connect_timeout())
        async with self.slots():
            client = self.client
            if self.state != "connected" or client is None:
                raise Unavailable(self.unavailable_reason())
            return await send(client)

    async def _transport(self, stack: AsyncExitStack) -> Any:
        if self.config.transport == "http":
            addresses = await check_url_reachable(self.config.url)
            from mcp.client.streamable_http import streamable_http_client

            limit = transport.max_response_bytes()
            http = pinned_http_client(self.config.url, addresses, dict(self.config.headers), limit=limit)
            await stack.enter_async_context(http)
            return streamable_http_client(self.config.url, http_client=http, max_sse_event_size=limit)
        argv = stdio_argv(self.config)
        if not self.stderr_path:  # one file per connection, truncated at each start, removed by drop()
            fd, self.stderr_path = tempfile.mkstemp(prefix=f"navi-mcp-{self.config.id}-", suffix=".stderr")
            os.close(fd)
        errlog = open(self.stderr_path, "w+")  # noqa: SIM115 - closed by the exit stack
        stack.callback(errlog.close)
        cgroup = sandbox.PidsCgroup.for_root(stdio_limits().processes) if _sandboxed() else None
        if cgroup is not None:
            cap_cgroup_memory(cgroup)
            argv = cgroup.wrap(argv)
            stack.callback(cgroup.remove)
        return transport.stdio_transport(argv, _stdio_env(self.config), errlog,
                                         limit=transport.max_response_bytes(), on_exit=self._exited)

    def _exited(self, returncode: int | None) -> None:
        """The stdio program ended while Navi still held the connection: failed, with why."""
        if self.closing is None or self.closing.is_set():
            return
        how = f"exit code {returncode}" if returncode is not None and returncode >= 0 else (
            f"killed by signal {-returncode}" if returncode is not None else "no exit code")
        self._fail(f"the program exited ({how}); see its stderr below. Navi starts it again when it is next "
                   f"used, by itself after {RESTART_AFTER_EXIT_S:g} s, or press Test{self._launcher_hint()}",
                   retry=True, after=RESTART_AFTER_EXIT_S)
        self.closing.set()

    def _absorb(self, tools: list[Any]) -> None:
        self.tools = list(tools)
        self.specs, self.problems = listing.build(self.config.name, self.tools, reserved_names())

    async def _on_message(self, message: Any) -> None:
        import mcp.types as types

        if isinstance(message, types.ToolListChangedNotification) and self.client is not None:
            asyncio.get_running_loop().create_task(self._relist())

    async def _relist(self) -> None:
        client = self.client
        if client is None:
            return
        try:
            self._absorb((await client.list_tools()).tools)
            self._set("connected", "")
        except Exception as exc:  # noqa: BLE001
            log.info("MCP server %s: tools/list after list_changed failed: %s", self.config.name, exc)

    # --- calls (hub loop) -------------------------------------------------------------------
    async def call(self, tool: str, arguments: dict, progress: Callable[..., Any] | None = None) -> Any:
        """The tool's result; `progress(progress, total, message)` is awaited for each of the
        server's progress notifications (the SDK sends a progressToken when it is given)."""
        await self.ensure(connect_timeout())
        # At most MCP_MAX_CONCURRENT_CALLS at a time per server: one user's slow or hostile
        # server holds a bounded share of the hub (and of the memory its answers may take).
        async with self.slots():
            client = self.client
            if self.state != "connected" or client is None:
                raise Unavailable(self.unavailable_reason())
            return await self._call(client, tool, arguments, progress)

    def slots(self) -> asyncio.Semaphore:
        if self._slots is None:
            self._slots = asyncio.Semaphore(max(1, int(getattr(settings, "MCP_MAX_CONCURRENT_CALLS", 4))))
        return self._slots

    async def _call(self, client: Any, tool: str, arguments: dict, progress: Callable[..., Any] | None = None) -> Any:
        try:
            return await client.call_tool(tool, arguments, progress_callback=progress)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if is_too_large(exc):
                raise
            if is_connection_lost(exc):
                self._fail(f"the connection broke during a call: {describe(exc)}")
                if self.closing is not None:
                    self.closing.set()
            raise

    def unavailable_reason(self) -> str:
        if self.state == "connecting":
            return f"MCP server '{self.config.name}' is still connecting; try again in a moment"
        wait = max(0.0, self.retry_at - time.monotonic())
        again = f" Navi tries again in {wait:.0f} s." if wait >= 1 else ""
        return f"MCP server '{self.config.name}' is not connected: {self.error or self.state}.{again}"

    # --- state --------------------------------------------------------------------------------
    def _fail(self, message: str, *, retry: bool = False, after: float = 0.0) -> None:
        """Failed, with why; a server that was in use (`retry`) is tried again after the backoff
        (by itself no sooner than `after`), and so on while it stays down, so its state follows
        it back to `connected`. The next use may try again once the backoff is over."""
        self.failures += 1
        delay = min(BACKOFF_MAX_S, BACKOFF_MIN_S * (2 ** (self.failures - 1)))
        self.retry_at = time.monotonic() + delay
        self.retrying = self.retrying or retry
        self._set("failed", message)
        if self.ready is not None:
            self.ready.set()  # wakes whoever waits for this attempt (the state says how it ended)
        if self.retrying:
            loop = asyncio.get_running_loop()
            loop.call_later(max(delay, after), lambda: loop.create_task(self._retry()))

    async def _retry(self) -> None:
        current = _hub is not None and _hub.connections.get(self.config.id) is self
        if current and self.retrying and self.closed_as is None and self.state == "failed":
            self.retry_at = 0.0  # the timer may fire a hair before retry_at
            await self.ensure(0, quiet=True)

    def _set(self, state: str, error: str) -> None:
        self.state, self.error = state, error
        if self.on_change is not None:
            self.on_change(self)

    def public_error(self) -> str:
        """The error the page shows: the failure, or the tools that are not offered."""
        if self.state == "connected" and self.problems:
            return f"{len(self.problems)} of its tools are not offered: " + "; ".join(
                f"{name}: {problem}" for name, problem in self.problems.items())
        return self.error

    def remove_stderr(self) -> None:
        if self.stderr_path:
            with contextlib.suppress(OSError):
                os.unlink(self.stderr_path)

    def stderr_tail(self) -> str:
        if not self.stderr_path:
            return ""
        with contextlib.suppress(OSError), open(self.stderr_path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - STDERR_TAIL))
            return handle.read().decode("utf-8", "replace")
        return ""


def pinned_http_client(url: str, addresses: list[str], headers: dict[str, str], *, limit: int) -> Any:
    """The SDK's HTTP client for one server, connecting only to `addresses` (those the SSRF
    check passed, in order) while speaking to the URL's host (Host header, TLS SNI and
    certificate), so a second DNS answer is never used; no proxies from the environment.
    Every body is counted as it arrives and cut at `limit` bytes."""
    import httpx2
    from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT

    host = httpx2.URL(url).host

    class Pinned(httpx2.AsyncHTTPTransport):
        async def handle_async_request(self, request):
            return transport.capped_response(await self._pinned(request), limit)

        async def _pinned(self, request):
            if request.url.host != host:
                return await super().handle_async_request(request)
            extensions = dict(request.extensions)
            if request.url.scheme == "https":
                extensions["sni_hostname"] = host
            for n, address in enumerate(addresses):
                pinned = httpx2.Request(request.method, request.url.copy_with(host=address.split("%")[0]),
                                        headers=request.headers, stream=request.stream, extensions=extensions)
                try:
                    return await super().handle_async_request(pinned)
                except httpx2.ConnectError:
                    if n == len(addresses) - 1:  # e.g. localhost: ::1 refused, then 127.0.0.1
                        raise
            raise httpx2.ConnectError(f"no address to connect to for {host}")

    return httpx2.AsyncClient(headers=headers, trust_env=False, transport=Pinned(trust_env=False),
                              timeout=httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT))


def is_too_large(exc: BaseException) -> bool:
    """The server's answer passed MCP_MAX_RESPONSE_MB (a JSON body, an SSE event, a stdio line)."""
    from mcp.shared.exceptions import MCPError

    exc = first_error(exc)
    return isinstance(exc, MCPError) and transport.is_too_large(exc.error.message)


def is_connection_lost(exc: BaseException) -> bool:
    from mcp.shared.exceptions import MCPError

    exc = first_error(exc)
    if isinstance(exc, MCPError):
        return exc.error.code == -32000 or "closed" in exc.error.message.lower()  # CONNECTION_CLOSED
    return isinstance(exc, (OSError, EOFError)) or type(exc).__name__ in ("ClosedResourceError", "BrokenResourceError")


def _client_info() -> Any:
    from mcp.types import Implementation

    return Implementation(name="navi", version=NAVI_VERSION)


# --- stdio: the sandbox -------------------------------------------------------------------------
def _sandboxed() -> bool:
    return not sandbox.sandbox_disabled()


def stdio_argv(config: ServerConfig) -> list[str]:
    """The command line of a stdio server: inside the tools' bubblewrap sandbox and prlimit
    caps, no network unless allowed, only the folders its config names visible (read-only)."""
    home = data_dir(config.id)
    if config.pending_paths:
        raise ConfigError(
            f"waiting for you to confirm the folders its arguments name ({', '.join(config.pending_paths)}): "
            "on its card (Settings → MCP servers), show each read-only or tick it writable, or remove it"
        )
    # Also rows saved before the rule, or by hand.
    check_paths(config.paths, config.owner_id, allowed=(home,), writable=config.writable_paths)
    program = resolve_command(config.command)
    argv = [program, *config.args]
    if not _sandboxed():
        return argv
    run_as = run_as_user(config.writable_paths, config.owner_id, allowed=(home,))
    if run_as is not None:  # the server writes as the folders' own user: its home is its own too
        home = home.with_name(f"{home.name}-uid{run_as[0]}")
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    binds = [(str(home), SANDBOX_HOME)]
    host_binds = [(p, p) for p in config.writable_paths]
    bwrap = sandbox.bwrap_binary()
    if bwrap is None:
        raise ConfigError(sandbox.missing_bwrap("a stdio MCP server"))
    ro_binds = [(p, p) for p in config.paths]
    ro_binds += [(p, p) for p in sandbox.ca_paths() if p not in config.paths]  # the host's CAs, read-only
    python = None
    real = os.path.realpath(program)
    if real.startswith(sys.prefix.rstrip("/") + "/") or program.startswith(sys.prefix.rstrip("/") + "/"):
        ro_binds.append((sys.prefix, sys.prefix))  # a program pip installed into Navi's own venv
        real_prefix = os.path.realpath(sys.prefix)
        if real_prefix != sys.prefix:  # a linked venv: its scripts' #! lines name the real folder
            ro_binds.append((real_prefix, real_prefix))
        python = sys.executable
    prefix = sandbox.bwrap_argv(
        bwrap, SANDBOX_HOME, network=config.network, throwaway_workspace=True, python=python,
        binds=binds, ro_binds=ro_binds, host_binds=host_binds, env={**sandbox.ca_env(), **dict(config.env)}, run_as=run_as,
    )
    return limited(prefix + argv)


def stdio_limits() -> sandbox.Limits:
    """The tools' caps (SANDBOX_*), with the memory of MCP_STDIO_MEMORY_MB: a server lives long."""
    tools = sandbox.Limits.for_tools()
    memory = int(getattr(settings, "MCP_STDIO_MEMORY_MB", 2048)) * 1024 * 1024
    return sandbox.Limits(memory=max(memory, tools.memory), file_size=tools.file_size, processes=tools.processes)


def limited(argv: list[str]) -> list[str]:
    """`argv` under prlimit. Memory is capped by RLIMIT_DATA (what a process writes: heap,
    buffers), not the address space the tools' RLIMIT_AS caps: V8 reserves far more address
    space than it uses, and Node's WebAssembly-based fetch() fails under any sane RLIMIT_AS."""
    limits = stdio_limits()
    binary = shutil.which("prlimit")
    if binary is None:
        log.warning("prlimit (util-linux) is missing: stdio MCP servers run without memory and file-size limits")
        return argv
    return [binary, f"--data={limits.memory}", f"--fsize={limits.file_size}", "--core=0", "--", *argv]


def cap_cgroup_memory(cgroup: sandbox.PidsCgroup) -> None:
    """Also cap the whole process tree in its cgroup (v2 memory.max) where the controller is on."""
    with contextlib.suppress(OSError):
        (cgroup.path / "memory.max").write_text(str(stdio_limits().memory))


def _stdio_env(config: ServerConfig) -> dict[str, str]:
    """The environment of the process the SDK starts. The SDK adds HOME, LOGNAME, PATH, SHELL,
    TERM and USER from the server's own; they are replaced so bwrap's environment (which the
    sandbox can read as /proc/1/environ) holds nothing of the server's, only the tool's."""
    # The host's CA settings too (a TLS-inspecting proxy); the server's own config wins.
    neutral = {"LOGNAME": "mcp", "USER": "mcp", "SHELL": "/bin/sh", "TERM": "dumb", **sandbox.ca_env()}
    if not _sandboxed():  # no sandbox: its data folder is its home on the host
        home = data_dir(config.id)
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        return sandbox.safe_env(home, {**neutral, **dict(config.env)})
    return sandbox.sandbox_env(SANDBOX_HOME, {**neutral, **dict(config.env)})


# --- the hub: one thread, one loop, every connection -----------------------------------------
class Hub:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.connections: dict[int, Connection] = {}
        self.thread = threading.Thread(target=self._serve, name="navi-mcp", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coro) -> concurrent.futures.Future:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    async def run(self, coro) -> Any:
        """Await `coro` on the hub from any loop; cancelling the caller cancels it there."""
        return await asyncio.wrap_future(self.submit(coro))

    def run_sync(self, coro, timeout: float) -> Any:
        return self.submit(coro).result(timeout)

    # --- on the hub loop ------------------------------------------------------------------------
    async def connection(self, config: ServerConfig) -> Connection:
        """The connection for this config; a changed config closes the old one first."""
        conn = self.connections.get(config.id)
        if conn is not None and conn.config.connection_key() != config.connection_key():
            await conn.close()
            conn.remove_stderr()
            conn = None
        if conn is None:
            conn = Connection(config)
            conn.on_change = _save_state
            self.connections[config.id] = conn
        conn.config = config
        return conn

    async def ensure(self, config: ServerConfig, wait: float) -> Connection:
        conn = await self.connection(config)
        await conn.ensure(wait)
        return conn

    async def reconnect(self, config: ServerConfig, wait: float) -> Connection:
        """`test connection`: close, forget the backoff, connect again."""
        conn = await self.connection(config)
        await conn.close()
        conn.retry_at = 0.0
        conn.task = None
        await conn.ensure(wait)
        return conn

    async def drop(self, server_id: int, state: str | None = None) -> None:
        conn = self.connections.pop(server_id, None)
        if conn is not None:
            await conn.close(state)
            conn.remove_stderr()

    async def close_all(self) -> None:
        for server_id in list(self.connections):
            await self.drop(server_id)


def _listing(conn: Connection) -> dict:
    """What a connection shows of itself: its state and error, and the tools, resources and
    prompts it listed (the row's fields of the same names)."""
    tools = [{"name": s.name, "description": s.summary[:300], "read_only": s.read_only, "destructive": s.destructive}
             for s in conn.specs]
    tools += [{"name": name, "description": "", "problem": problem} for name, problem in conn.problems.items()]
    return {"state": conn.state, "last_error": conn.public_error()[:4000], "tools": tools,
            "resources": list(conn.resources), "prompts": list(conn.prompts)}


def _save_state(conn: Connection) -> None:
    """Write the state to the row (another process's page reads it), off the hub loop."""
    if not _shares_state:
        return
    fields = {**_listing(conn), "stderr_tail": conn.stderr_tail(), "state_at": timezone.now()}
    _writer.submit(_write_state, conn.config.id, fields)


def _write_state(server_id: int, fields: dict) -> None:
    """One state write, retried while the database is busy (SQLite under load): a lost
    `failed` would leave the page showing `connected` with no reason."""
    for attempt in range(5):
        close_old_connections()
        try:
            MCPServer.objects.filter(pk=server_id).update(**fields)
            return
        except OperationalError:
            log.info("MCP server %s: state write failed (attempt %d)", server_id, attempt + 1, exc_info=True)
            time.sleep(0.2 * (attempt + 1))
        except Exception:  # noqa: BLE001 - the state is a display; a gone table is no crash
            log.info("could not save the state of MCP server %s", server_id, exc_info=True)
            return
        finally:
            connections.close_all()


_writer = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="navi-mcp-state")
_shares_state = True


def keep_state_here() -> None:
    """This process (`navi_mcp serve`, `navi_chat`: beside the web server, maybe with other
    settings) keeps its servers' states to itself; the rows show what the web server sees."""
    global _shares_state
    _shares_state = False
_lock = threading.Lock()
_hub: Hub | None = None


def get_hub() -> Hub:
    global _hub
    with _lock:
        if _hub is None:
            _hub = Hub()
        return _hub


def _held(server_id: int) -> Connection | None:
    """This process's connection to a server, when it holds one that is live or failed."""
    hub = _hub
    conn = hub.connections.get(server_id) if hub is not None else None
    if conn is None or conn.task is None or conn.state not in ("connecting", "connected", "failed"):
        return None
    return conn


def live_state(server_id: int) -> tuple[str, str] | None:
    """This process's own state of a server it holds a connection to (state, error), or None.
    Each process answers with what it sees: another process (a `navi_mcp serve` with other
    settings, another worker) writing the row cannot make this one's state wrong."""
    conn = _held(server_id)
    return (conn.state, conn.public_error()) if conn is not None else None


def live_listing(server_id: int) -> dict | None:
    """`live_state` with the tools, resources and prompts of the same moment (see `_listing`):
    the row's copy is written a moment later, by a thread of its own; read beside this process's
    live state, it showed `connected` with no tools while that write waited (a loaded machine)."""
    conn = _held(server_id)
    return _listing(conn) if conn is not None else None


def flush_state_writes() -> None:
    """Wait for the state writes queued so far (tests, commands that print the state)."""
    _writer.submit(lambda: None).result(30)


def shutdown(timeout: float = 10.0) -> None:
    """Close every connection (stdio process groups end); at exit and in tests."""
    hub = _hub
    if hub is not None:
        with contextlib.suppress(Exception):
            hub.run_sync(hub.close_all(), timeout)


atexit.register(shutdown)


def connect_all(sender=None, **kwargs) -> None:
    """`server_started`: open every enabled server's connection in the background, so each
    state follows its server from the start (a row from before the restart is no news of it)."""
    hub = get_hub()
    for row in MCPServer.objects.filter(enabled=True):
        hub.submit(hub.ensure(ServerConfig.from_row(row), 0))


def apply_change(server_id: int, *, disabled: bool = False) -> None:
    """A server row was saved or deleted: its connection in this process ends now (a stdio
    server's process group with it); the next use connects with the new settings."""
    hub = _hub
    if hub is not None and server_id in hub.connections:
        hub.run_sync(hub.drop(server_id, "disabled" if disabled else None), 30)
