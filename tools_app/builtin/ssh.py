"""ssh_exec: run a command on a named host from SSH_HOSTS_FILE over asyncssh.

Host keys are always verified against a known_hosts file (the host entry's `known_hosts`, or
~/.ssh/known_hosts); there is no way to turn that off. One connection is pooled per
(session, host) and closed after SSH_IDLE_S without use. A command past its timeout is sent
TERM, then KILL, and its channel closed, so it does not keep running remotely (servers that
ignore SSH signal requests — OpenSSH before 7.9 — only see the channel close).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

from navi_project.lazy import lazy_module
from tools_app.base import Tool, ToolResult
from tools_app.context import current_session_id

asyncssh = lazy_module("asyncssh")  # ~130 ms of boot for one tool (navi_project.lazy)
log = logging.getLogger(__name__)

SSH_IDLE_S = 300.0  # a pooled connection unused this long is closed
OUTPUT_MAX_CHARS = 20_000
CONNECT_TIMEOUT_S = 15.0
STOP_GRACE_S = 2.0


class SSHConfigError(Exception):
    """The host entry or the hosts file is unusable; the message says how to fix it."""


# --- hosts file ----------------------------------------------------------------------------
def load_hosts() -> dict[str, dict]:
    path = Path(settings.SSH_HOSTS_FILE)
    if not path.exists():
        raise SSHConfigError(
            f"no SSH hosts are configured: create {path} with entries like "
            '{"web1": {"host": "10.0.0.5", "port": 22, "username": "navi", "key_file": "~/.ssh/id_ed25519"}}'
        )
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise SSHConfigError(f"{path} is not valid JSON ({exc}); fix the file") from None
    if not isinstance(data, dict):
        raise SSHConfigError(f"{path} must hold a JSON object of named hosts")
    return data


def host_entry(name: str) -> dict:
    hosts = load_hosts()
    entry = hosts.get(name)
    if not isinstance(entry, dict):
        known = ", ".join(sorted(hosts)) or "(none)"
        raise SSHConfigError(f"unknown SSH host '{name}'; configured hosts: {known}")
    if not entry.get("host") or not entry.get("username"):
        raise SSHConfigError(f"SSH host '{name}' needs 'host' and 'username' in {settings.SSH_HOSTS_FILE}")
    if not entry.get("key_file") and not entry.get("password"):
        raise SSHConfigError(f"SSH host '{name}' needs 'key_file' or 'password' in {settings.SSH_HOSTS_FILE}")
    return entry


def _known_hosts_path(entry: dict) -> Path:
    if "known_hosts" in entry and not entry["known_hosts"]:
        raise SSHConfigError(
            "host key verification cannot be disabled (known_hosts is empty/null for this host); "
            "point 'known_hosts' at a file that contains the host's key"
        )
    return Path(entry.get("known_hosts") or "~/.ssh/known_hosts").expanduser()


def _check_known(entry: dict) -> Path:
    """Refuse before connecting when the host is not in known_hosts at all."""
    path = _known_hosts_path(entry)
    host, port = entry["host"], int(entry.get("port") or 22)
    keyscan = f"ssh-keyscan -p {port} {host} >> {path}"
    if not path.exists():
        raise SSHConfigError(
            f"known_hosts file {path} does not exist, so {host} cannot be verified. After checking the "
            f"host's fingerprint, add it with: {keyscan}"
        )
    try:
        known = asyncssh.read_known_hosts(str(path))
        trusted, _ca, revoked, *_rest = asyncssh.match_known_hosts(known, host, "", port)
    except (OSError, ValueError, asyncssh.Error) as exc:
        raise SSHConfigError(f"cannot read known_hosts file {path} ({exc}); fix or recreate it") from None
    if not trusted and not _ca:
        raise SSHConfigError(
            f"{host}:{port} is not in {path}, so its identity cannot be verified. After checking the "
            f"host's fingerprint, add it with: {keyscan}"
        )
    return path


# --- connection pool -----------------------------------------------------------------------
@dataclass
class _Pooled:
    conn: asyncssh.SSHClientConnection
    loop: asyncio.AbstractEventLoop
    last_used: float


class SSHPool:
    """One connection per (session, host name), closed when idle."""

    def __init__(self) -> None:
        self._conns: dict[tuple[str, str], _Pooled] = {}
        self._locks: dict[tuple[str, str], tuple[asyncio.AbstractEventLoop, asyncio.Lock]] = {}
        self.connects = 0  # how many new connections were opened (observability, tests)
        self._sweeping: "weakref.WeakSet[asyncio.AbstractEventLoop]" = weakref.WeakSet()

    def _lock(self, key: tuple[str, str]) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        held = self._locks.get(key)
        if held is None or held[0] is not loop:
            held = (loop, asyncio.Lock())
            self._locks[key] = held
        return held[1]

    async def get(self, session: str, name: str, entry: dict) -> asyncssh.SSHClientConnection:
        key = (session, name)
        self.close_idle()
        async with self._lock(key):
            pooled = self._conns.get(key)
            if pooled and pooled.loop is asyncio.get_running_loop() and not pooled.conn.is_closed():
                pooled.last_used = time.monotonic()
                return pooled.conn
            self.drop(session, name)
            conn = await _connect(entry)
            self.connects += 1
            self._conns[key] = _Pooled(conn, asyncio.get_running_loop(), time.monotonic())
            self._schedule_sweep()
            return conn

    def drop(self, session: str, name: str) -> None:
        pooled = self._conns.pop((session, name), None)
        if pooled is not None:
            _close_quietly(pooled)

    def close_idle(self, max_idle: float | None = None) -> int:
        limit = SSH_IDLE_S if max_idle is None else max_idle
        now = time.monotonic()
        stale = [k for k, p in self._conns.items() if now - p.last_used >= limit or p.conn.is_closed()]
        for key in stale:
            self.drop(*key)
        return len(stale)

    def close_session(self, session: str) -> None:
        for key in [k for k in self._conns if k[0] == session]:
            self.drop(*key)

    def close_all(self) -> None:
        for key in list(self._conns):
            self.drop(*key)

    def __len__(self) -> int:
        return len(self._conns)

    def _schedule_sweep(self) -> None:
        """One periodic idle sweep per event loop while it has pooled connections."""
        loop = asyncio.get_running_loop()
        if loop in self._sweeping:
            return
        self._sweeping.add(loop)

        def sweep() -> None:
            self.close_idle()
            if any(p.loop is loop for p in self._conns.values()):
                loop.call_later(SSH_IDLE_S / 2, sweep)
            else:
                self._sweeping.discard(loop)

        loop.call_later(SSH_IDLE_S / 2, sweep)


def _close_quietly(pooled: _Pooled) -> None:
    try:
        if pooled.loop.is_running() and _running_loop() is not pooled.loop:
            pooled.loop.call_soon_threadsafe(pooled.conn.close)  # e.g. a session deleted by a view
        elif not pooled.loop.is_closed():
            pooled.conn.close()
    except Exception:  # closing a dead connection must never fail a call
        log.debug("closing pooled SSH connection failed", exc_info=True)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


pool = SSHPool()


async def _connect(entry: dict) -> asyncssh.SSHClientConnection:
    known_hosts = _check_known(entry)
    options: dict[str, Any] = {
        "port": int(entry.get("port") or 22),
        "username": entry["username"],
        "known_hosts": str(known_hosts),
        "connect_timeout": CONNECT_TIMEOUT_S,
        "agent_path": None,
    }
    if entry.get("key_file"):
        options["client_keys"] = [str(Path(entry["key_file"]).expanduser())]
    else:
        options["client_keys"] = None
    if entry.get("password"):
        options["password"] = entry["password"]
    return await asyncssh.connect(entry["host"], **options)


# --- running a command ---------------------------------------------------------------------
class _Capped:
    """Collects a stream's text up to a cap, counting what was dropped."""

    def __init__(self, cap: int) -> None:
        self.cap, self.parts, self.size, self.dropped = cap, [], 0, 0

    async def drain(self, reader) -> None:
        while True:
            chunk = await reader.read(8192)
            if not chunk:
                return
            room = self.cap - self.size
            if room > 0:
                self.parts.append(chunk[:room])
                self.size += min(room, len(chunk))
            self.dropped += max(0, len(chunk) - max(room, 0))

    def text(self) -> str:
        out = "".join(self.parts)
        if self.dropped:
            out += f"\n[output truncated: {self.dropped} more characters not shown; filter it (grep, head, tail)]"
        return out


async def _stop_process(process: asyncssh.SSHClientProcess) -> None:
    """End the remote command: TERM, then KILL, then close the channel."""
    for signal in ("TERM", "KILL"):
        try:
            process.send_signal(signal)
        except (OSError, asyncssh.Error):
            break
        try:
            await asyncio.wait_for(process.wait_closed(), STOP_GRACE_S)
            return
        except asyncio.TimeoutError:
            continue
    process.close()


async def run_command(conn: asyncssh.SSHClientConnection, command: str, timeout: float) -> tuple[str, str, Any, bool]:
    """(stdout, stderr, exit status or signal, timed_out)."""
    process = await conn.create_process(command, encoding="utf-8", errors="replace")
    process.stdin.write_eof()
    out, err = _Capped(OUTPUT_MAX_CHARS), _Capped(OUTPUT_MAX_CHARS // 4)
    timed_out, finished = False, False
    try:
        await asyncio.wait_for(
            asyncio.gather(out.drain(process.stdout), err.drain(process.stderr), process.wait_closed()), timeout
        )
        finished = True
    except asyncio.TimeoutError:
        timed_out = True
    finally:
        if not finished:  # timeout, Stop or the registry's own timeout: never leave it running
            await asyncio.shield(_stop_process(process))
    status = process.exit_status if process.exit_signal is None else f"signal {process.exit_signal[0]}"
    return out.text(), err.text(), status, timed_out


class SshExecTool(Tool):
    name = "ssh_exec"
    keywords = "ssh remote host server machine"
    examples = (
        "check the disk space on my home server",
        "restart nginx on the remote machine",
        "how long has the raspberry pi been up?",
        "run uptime on the backup host over ssh",
    )
    description = (
        "Run a shell command on a named SSH host (names from the owner's SSH hosts file; call "
        "with a wrong name to see the list). The connection is reused within this session. "
        "Give `timeout` for long commands; a command past it is stopped on the remote host."
    )
    parameters = {
        "type": "object",
        "properties": {
            "host": {"type": "string", "description": "configured host name, not an address"},
            "command": {"type": "string", "minLength": 1},
            "timeout": {"type": "number", "minimum": 1, "maximum": 1800, "default": 60},
        },
        "required": ["host", "command"],
    }
    timeout = 1800.0 + CONNECT_TIMEOUT_S + 2 * STOP_GRACE_S + 5  # the per-command timeout governs

    def usable(self) -> bool:
        """Only with a host configured: a call could only fail without one."""
        try:
            return bool(load_hosts())
        except SSHConfigError:
            return False

    async def execute(self, params: dict[str, Any]) -> ToolResult:
        name, command = params["host"], params["command"]
        timeout = float(params.get("timeout") or 60)
        session = current_session_id.get() or "no-session"
        try:
            entry = host_entry(name)
            conn = await pool.get(session, name, entry)
        except SSHConfigError as exc:
            return ToolResult(False, error=str(exc))
        except asyncssh.HostKeyNotVerifiable as exc:
            return ToolResult(False, error=_key_mismatch(entry, exc))
        except asyncssh.PermissionDenied:
            return ToolResult(False, error=f"authentication to '{name}' failed; check username and key_file/password in {settings.SSH_HOSTS_FILE}")
        except (OSError, asyncio.TimeoutError, asyncssh.Error) as exc:
            return ToolResult(False, error=f"could not connect to '{name}' ({entry['host']}): {exc or type(exc).__name__}; check that the host is up and reachable")
        try:
            stdout, stderr, status, timed_out = await run_command(conn, command, timeout)
        except (asyncssh.ChannelOpenError, asyncssh.ConnectionLost, asyncssh.DisconnectError, OSError) as exc:
            pool.drop(session, name)  # a stale pooled connection: the next call reconnects
            return ToolResult(False, error=f"the SSH connection to '{name}' failed ({exc}); retry the command")
        return _result(name, stdout, stderr, status, timed_out, timeout)


def _key_mismatch(entry: dict, exc: Exception) -> str:
    return (
        f"the host key of {entry['host']} does NOT match known_hosts ({exc}). This can mean the server was "
        "reinstalled or that someone is intercepting the connection: do not retry; ask the owner to verify "
        "the new fingerprint and update known_hosts"
    )


def _result(name: str, stdout: str, stderr: str, status: Any, timed_out: bool, timeout: float) -> ToolResult:
    parts = [f"[{name}] exit: {status}"]
    if stdout:
        parts.append(stdout.rstrip("\n"))
    if stderr:
        parts.append("stderr:\n" + stderr.rstrip("\n"))
    output = "\n".join(parts)
    if timed_out:
        return ToolResult(False, output=output, error=f"the command ran longer than {timeout:g} s and was stopped on the remote host; raise `timeout` or run it in the background (nohup ... &)")
    return ToolResult(status == 0, output=output, error=None if status == 0 else f"the command exited with status {status}")
