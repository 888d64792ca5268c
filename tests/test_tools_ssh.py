"""ssh_exec against a real in-process asyncssh server (generated host key, known_hosts written
by the test): run, pooled reuse, unknown host, missing and mismatched host keys, timeout that
ends the remote command, output cap."""

from __future__ import annotations

import asyncio
import json
import signal as signals

import asyncssh
import pytest

from tools_app.builtin import ssh
from tools_app.builtin.ssh import SshExecTool
from tools_app.context import current_session_id


class _State:
    def __init__(self) -> None:
        self.connections = 0
        self.commands: list[str] = []
        self.signals: list[str] = []
        self.subprocesses: list[asyncio.subprocess.Process] = []


class _Session(asyncssh.SSHServerSession):
    """Runs `echo ...` in-process and `sleep N` as a real child process; forwards signals."""

    def __init__(self, state: _State) -> None:
        self.state, self.chan, self.command, self.task = state, None, "", None

    def connection_made(self, chan):
        self.chan = chan

    def exec_requested(self, command):
        self.command = command
        return True

    def session_started(self):
        self.state.commands.append(self.command)
        if self.command.startswith("echo "):
            self.chan.write(self.command[5:] + "\n")
            self.chan.exit(0)
        elif self.command == "flood":
            self.chan.write("y\n" * 50_000)
            self.chan.exit(0)
        elif self.command.startswith("sleep "):
            self.task = asyncio.ensure_future(self._sleep(self.command.split()[1]))
        else:
            self.chan.write_stderr(f"{self.command}: command not found\n")
            self.chan.exit(127)

    async def _sleep(self, seconds: str) -> None:
        proc = await asyncio.create_subprocess_exec("sleep", seconds)
        self.state.subprocesses.append(proc)
        code = await proc.wait()
        if code < 0:
            self.chan.exit_with_signal(signals.Signals(-code).name.removeprefix("SIG"))
        else:
            self.chan.exit(code)

    def signal_received(self, signal):
        self.state.signals.append(signal)
        for proc in self.state.subprocesses:
            if proc.returncode is None:
                proc.send_signal(getattr(signals, f"SIG{signal}"))

    def connection_lost(self, exc):
        for proc in self.state.subprocesses:
            if proc.returncode is None:
                proc.kill()


class _Server(asyncssh.SSHServer):
    def __init__(self, state: _State) -> None:
        self.state = state

    def connection_made(self, conn):
        self.state.connections += 1

    def session_requested(self):
        return _Session(self.state)


@pytest.fixture
async def ssh_server(tmp_path, settings):
    state = _State()
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    client_key = asyncssh.generate_private_key("ssh-ed25519")
    key_file = tmp_path / "id_ed25519"
    key_file.write_bytes(client_key.export_private_key())
    server = await asyncssh.create_server(
        lambda: _Server(state),
        "127.0.0.1",
        0,
        server_host_keys=[host_key],
        authorized_client_keys=asyncssh.import_authorized_keys(client_key.export_public_key().decode()),
    )
    port = server.sockets[0].getsockname()[1]
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{port} {host_key.export_public_key().decode()}")
    hosts = {"box": {"host": "127.0.0.1", "port": port, "username": "navi", "key_file": str(key_file), "known_hosts": str(known_hosts)}}
    settings.SSH_HOSTS_FILE = tmp_path / "ssh_hosts.json"
    settings.SSH_HOSTS_FILE.write_text(json.dumps(hosts))
    state.port, state.known_hosts, state.hosts = port, known_hosts, hosts
    token = current_session_id.set("sess-1")
    yield state
    current_session_id.reset(token)
    ssh.pool.close_all()
    for proc in state.subprocesses:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    server.close()
    await server.wait_closed()


def _write_hosts(settings, hosts: dict) -> None:
    settings.SSH_HOSTS_FILE.write_text(json.dumps(hosts))


async def test_run_command(ssh_server):
    result = await SshExecTool().execute({"host": "box", "command": "echo hello world"})
    assert result.success, result.error
    assert result.output == "[box] exit: 0\nhello world"


async def test_nonzero_exit_is_reported(ssh_server):
    result = await SshExecTool().execute({"host": "box", "command": "frobnicate"})
    assert not result.success and "status 127" in result.error
    assert "command not found" in result.output


async def test_pooled_connection_reused_per_session(ssh_server):
    tool = SshExecTool()
    before = ssh.pool.connects
    for word in ("one", "two", "three"):
        assert (await tool.execute({"host": "box", "command": f"echo {word}"})).success
    assert ssh_server.connections == 1 and ssh.pool.connects - before == 1
    current_session_id.set("sess-2")  # another session gets its own connection
    assert (await tool.execute({"host": "box", "command": "echo four"})).success
    assert ssh_server.connections == 2 and len(ssh.pool) == 2
    assert ssh.pool.close_idle(max_idle=0) == 2 and len(ssh.pool) == 0
    assert (await tool.execute({"host": "box", "command": "echo five"})).success
    assert ssh_server.connections == 3


async def test_dead_pooled_connection_replaced(ssh_server):
    tool = SshExecTool()
    assert (await tool.execute({"host": "box", "command": "echo a"})).success
    conn = ssh.pool._conns[("sess-1", "box")].conn
    conn.close()
    await conn.wait_closed()
    result = await tool.execute({"host": "box", "command": "echo b"})
    assert result.success and ssh_server.connections == 2


async def test_unknown_host_name_refused(ssh_server):
    result = await SshExecTool().execute({"host": "prod-db", "command": "echo hi"})
    assert not result.success
    assert "unknown SSH host 'prod-db'" in result.error and "box" in result.error
    assert ssh_server.connections == 0


async def test_missing_hosts_file_explains(settings, tmp_path):
    settings.SSH_HOSTS_FILE = tmp_path / "absent.json"
    result = await SshExecTool().execute({"host": "box", "command": "echo hi"})
    assert not result.success and "create" in result.error


async def test_host_not_in_known_hosts_refused_with_keyscan_hint(ssh_server, settings, tmp_path):
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    hosts = {"box": {**ssh_server.hosts["box"], "known_hosts": str(empty)}}
    _write_hosts(settings, hosts)
    result = await SshExecTool().execute({"host": "box", "command": "echo hi"})
    assert not result.success
    assert f"ssh-keyscan -p {ssh_server.port} 127.0.0.1 >> {empty}" in result.error
    assert ssh_server.connections == 0


async def test_verification_cannot_be_disabled(ssh_server, settings):
    _write_hosts(settings, {"box": {**ssh_server.hosts["box"], "known_hosts": None}})
    result = await SshExecTool().execute({"host": "box", "command": "echo hi"})
    assert not result.success and "cannot be disabled" in result.error


async def test_host_key_mismatch_refused(ssh_server):
    impostor = asyncssh.generate_private_key("ssh-ed25519")
    ssh_server.known_hosts.write_text(f"[127.0.0.1]:{ssh_server.port} {impostor.export_public_key().decode()}")
    result = await SshExecTool().execute({"host": "box", "command": "echo hi"})
    assert not result.success and "does NOT match" in result.error
    assert ssh_server.commands == []


async def test_timeout_ends_remote_command(ssh_server):
    result = await SshExecTool().execute({"host": "box", "command": "sleep 30", "timeout": 1})
    assert not result.success and "stopped on the remote host" in result.error
    assert ssh_server.signals[:1] == ["TERM"]
    [proc] = ssh_server.subprocesses
    assert proc.returncode == -signals.SIGTERM  # the remote process really ended
    # The pooled connection is still usable afterwards.
    assert (await SshExecTool().execute({"host": "box", "command": "echo after"})).success


async def test_output_capped(ssh_server):
    result = await SshExecTool().execute({"host": "box", "command": "flood"})
    assert result.success
    assert "[output truncated:" in result.output
    assert len(result.output) < ssh.OUTPUT_MAX_CHARS + 500


@pytest.mark.django_db(transaction=True)
async def test_ssh_exec_end_to_end_through_a_run(ssh_server, llm, session, host_tools_allowed):
    from agent.frames.events import to_frame
    from agent.models import Profile
    from agent.registry import get_agent
    from tests.llm_server import Turn

    await Profile.objects.aupdate(planning_enabled=False)
    llm.script(
        Turn(tool_calls=[{"name": "ssh_exec", "arguments": {"host": "box", "command": "echo from the run"}}]),
        Turn(content="The host said hello."),
    )
    frames = [to_frame(e) async for e in get_agent().run_stream(str(session.id), "check box")]
    assert [f["type"] for f in frames if f["type"].startswith("tool")] == ["tool_started", "tool_call"]
    [call] = [f for f in frames if f["type"] == "tool_call"]
    assert call["success"] and "from the run" in call["result"]
    assert frames[-1]["type"] == "stream_end"
    assert (str(session.id), "box") in ssh.pool._conns  # pooled under the chat session's id
