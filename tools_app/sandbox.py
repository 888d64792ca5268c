"""One way to run a child process for a tool: own process group, wall-clock timeout, capped
output, and the whole group killed on timeout, on overflow and when the tool task is cancelled
(Stop). code_exec, terminal and user tools all go through `run_process`, and all three run
inside the same bubblewrap sandbox built by `bwrap_argv`, never as host root: a server running
as root has bwrap build the mounts, then setpriv drops to the unprivileged SANDBOX_UID.

`Limits` adds resource limits: address space, file size and no core dumps through `prlimit`
(util-linux), and a process cap from a throwaway `pids` cgroup where one is writable (running
as root; RLIMIT_NPROC would count every process of the server's user, so it is not used)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from django.conf import settings

from navi_project import fstree, places

from . import userns_filter

log = logging.getLogger(__name__)

# Environment variables a child may inherit; everything else (API keys, SECRET_KEY,
# DATABASE_URL...) stays in the server process.
_SAFE_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM")


# Where TLS clients (OpenSSL, Python's requests, curl, Node) look for the certificate
# authorities to trust. Behind a TLS-inspecting proxy the host sets them; a program in the
# sandbox without them fails every HTTPS request (`uvx` servers: "UnknownIssuer").
CA_ENV = ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS")


def ca_env() -> dict[str, str]:
    """The host's CA settings (those naming files or folders that exist): passed to sandboxed
    programs, whose sandbox shows those files read-only (`ca_paths`)."""
    return {key: value for key in CA_ENV if (value := os.environ.get(key)) and _ca_files(value)}


def ca_paths() -> list[str]:
    """The files and folders the host's CA settings name (SSL_CERT_DIR may list several)."""
    return sorted({path for value in ca_env().values() for path in _ca_files(value)})


def _ca_files(value: str) -> list[str]:
    return [os.path.abspath(p) for p in value.split(os.pathsep) if p and os.path.exists(p)]


def safe_env(home: str | Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """A minimal environment for children: no secrets of the server leak into tools."""
    env = {k: os.environ[k] for k in _SAFE_ENV if k in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env["HOME"] = str(home)
    env["PYTHONIOENCODING"] = "utf-8"
    env.update(extra or {})
    return env


# --- the bubblewrap sandbox ------------------------------------------------------------------
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32")
ETC_FILES = (
    "/etc/alternatives", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime",
    "/etc/ssl", "/etc/ca-certificates", "/etc/nsswitch.conf", "/etc/hosts", "/etc/resolv.conf",
    "/etc/mime.types", "/etc/python3", "/etc/python3.11", "/etc/magic", "/etc/passwd", "/etc/group",
)
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"


def missing_bwrap(tool: str) -> str:
    """The refusal when bubblewrap is not installed, with both ways out."""
    return (
        f"{tool} needs bubblewrap (bwrap), which is not installed. Install it with "
        "`sudo apt-get install bubblewrap` (a server running as root also needs setpriv, from "
        "`util-linux`), or set CODE_EXEC_SANDBOX=none in .env to run code_exec, "
        "terminal and user tools without a sandbox (unsafe: they can then read and change everything "
        "the server can, its database and secret key included)."
    )


def sandbox_disabled() -> bool:
    """CODE_EXEC_SANDBOX=none: the owner's explicit, unsafe opt-out for every sandboxed tool."""
    return str(getattr(settings, "CODE_EXEC_SANDBOX", "bwrap")).lower() == "none"


def bwrap_binary() -> str | None:
    """bwrap, or None when the sandbox cannot run here (as root it also needs setpriv)."""
    found = shutil.which("bwrap") or ("/usr/bin/bwrap" if os.path.exists("/usr/bin/bwrap") else None)
    if found and os.geteuid() == 0 and setpriv_binary() is None:
        log.warning("running as root without setpriv (util-linux): refusing to sandbox tools as host root")
        return None
    return found


def setpriv_binary() -> str | None:
    """setpriv inside the sandbox: only a binary under the read-only system folders will do."""
    found = shutil.which("setpriv", path=SANDBOX_PATH)
    return found if found and found.startswith(("/usr/", "/bin/", "/sbin/")) else None


def sandbox_ids() -> tuple[int, int]:
    """The host uid and gid sandboxed programs run as when the server runs as root."""
    return int(getattr(settings, "SANDBOX_UID", 65534)), int(getattr(settings, "SANDBOX_GID", 65534))


def sandbox_env(home: str | Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The whole environment inside the sandbox (and of bwrap itself, whose /proc/1/environ the
    sandbox can read): PATH, HOME, LANG and what the tool adds, nothing of the server."""
    env = {"PATH": SANDBOX_PATH, "HOME": str(home), "LANG": os.environ.get("LANG") or "C.UTF-8"}
    env.update(extra or {})
    return env


def python_dirs(python: str) -> list[str]:
    """Folders an interpreter outside /usr (pyenv) needs, to be bound read-only: its prefix."""
    if os.path.realpath(python).startswith("/usr/"):
        return []
    return [os.path.realpath(sys.base_prefix)]


# Host kernel settings and triggers stay read-only even for a process that could write them
# (bwrap covers /proc/sys only when it looks writable, and the folder itself never does).
# /sys is not mounted at all.
PROC_READ_ONLY = ("--ro-bind", "/proc/sys", "/proc/sys", "--ro-bind-try", "/proc/sysrq-trigger", "/proc/sysrq-trigger")
# As root, bwrap builds the mounts in privileged mode and starts setpriv with only these
# capabilities; setpriv becomes the unprivileged sandbox user and drops them before the program
# runs. DAC_READ_SEARCH lets bwrap (still root) chdir into the workspace the sandbox user owns.
ROOT_SETUP_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP", "CAP_DAC_READ_SEARCH")


def _namespaces(as_root: bool, network: bool) -> list[str]:
    """New namespaces. A user namespace as root would map the sandbox's uid (whatever --uid says)
    to host uid 0, the owner of /proc/sys: as root there is none, and setpriv drops to a real
    unprivileged uid instead. Otherwise bwrap maps the server's own uid."""
    if not as_root:  # and no user namespace inside it (userns_filter does it in both modes)
        return ["--unshare-all", "--unshare-user", *(["--disable-userns"] if _bwrap_disables_userns() else []),
                *(["--share-net"] if network else [])]
    return ["--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try", "--share-net" if network else "--unshare-net"]


@functools.lru_cache(maxsize=1)
def _bwrap_disables_userns() -> bool:
    """bwrap 0.8+ has --disable-userns."""
    binary = bwrap_binary()
    if binary is None:
        return False
    try:
        shown = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    return "--disable-userns" in shown.stdout + shown.stderr


def _drop_root(run_as: tuple[int, int] | None = None) -> list[str]:
    """The command that turns the sandbox into the sandbox user (or `run_as`), without groups or
    capabilities."""
    uid, gid = run_as or sandbox_ids()
    return [
        str(setpriv_binary()), f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
        "--inh-caps=-all", "--bounding-set=-all", "--",
    ]


def _created_dirs(mounts: Sequence[str], host_mounts: Sequence[str]) -> list[str]:
    """Folders bwrap makes (mode 0700) on the way to a mount point: they must be 0755 for a
    sandbox user who is not the root that made them. Mount points and host folders keep theirs."""

    def under(path: str, roots: Sequence[str]) -> bool:
        return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)

    found: list[str] = []
    for target in mounts:
        parent = os.path.dirname(target.rstrip("/"))
        chain = []
        while parent not in ("", "/") and parent not in mounts and not under(parent, host_mounts):
            chain.append(parent)
            parent = os.path.dirname(parent)
        found += [p for p in reversed(chain) if p not in found]
    return found


def bwrap_argv(
    bwrap: str,
    workspace: str | Path,
    *,
    network: bool = False,
    throwaway_workspace: bool = False,
    python: str | None = None,
    binds: Sequence[tuple[str, str]] = (),
    ro_binds: Sequence[tuple[str, str]] = (),
    host_binds: Sequence[tuple[str, str]] = (),
    tmpfs: Sequence[str] = (),
    env: dict[str, str] | None = None,
    run_as: tuple[int, int] | None = None,
) -> list[str]:
    """The bwrap prefix of a sandboxed command: new namespaces (pid, net, ipc...), a fresh /proc
    with /proc/sys read-only, read-only system folders, a private /tmp, the workspace as the only
    writable folder (a tmpfs that vanishes when `throwaway_workspace`), an empty environment, no
    capabilities, and never host uid 0 (see `_namespaces`).

    `binds` are Navi's own folders (handed to the sandbox user as root); `host_binds` are the
    owner's folders, bound writable and never re-owned: as root the program then runs as
    `run_as`, the folders' own user (tools_app.mcp.paths.run_as)."""
    workspace = str(workspace)
    as_root = os.geteuid() == 0
    if run_as is not None and run_as[0] == 0:
        raise ValueError("a sandboxed program never runs as root")
    if as_root:  # the sandbox user must be able to write Navi's folders it is given
        for path in ([] if throwaway_workspace else [workspace]) + [str(source) for source, _ in binds]:
            hand_over(path, to=run_as)
    argv = [bwrap, "--die-with-parent", "--new-session", *_namespaces(as_root, network), "--cap-drop", "ALL"]
    for cap in ROOT_SETUP_CAPS if as_root else ():
        argv += ["--cap-add", cap]
    ro = [(p, p) for p in (*SYSTEM_DIRS, *ETC_FILES)]
    argv += [x for path, _ in ro for x in ("--ro-bind-try", path, path)]
    extra_ro = [(p, p) for p in (python_dirs(python) if python else [])]
    for path, _ in extra_ro:
        argv += ["--ro-bind", path, path]
    # As root, bwrap's tmpfs folders belong to root: open them to the sandbox user (only it sees them).
    shared = (lambda mode: ["--perms", mode]) if as_root else (lambda mode: [])
    argv += ["--proc", "/proc", *PROC_READ_ONLY, "--dev", "/dev", *shared("1777"), "--tmpfs", "/tmp"]
    if throwaway_workspace:
        argv += [*shared("0777"), "--tmpfs", workspace]
    else:
        argv += ["--bind", workspace, workspace]
    for path in tmpfs:
        argv += [*shared("0777"), "--tmpfs", path]
    for source, target in (*binds, *host_binds):
        argv += ["--bind", str(source), target]
    for source, target in ro_binds:  # after the binds: a file may sit inside a bound folder
        argv += ["--ro-bind", str(source), target]
    host = [t for _, t in (*ro, *extra_ro, *binds, *host_binds)] + ([] if throwaway_workspace else [workspace])
    # The system folders too: /etc itself is made by bwrap for /etc/ssl & co, and a 0700 /etc hid
    # them all from the sandbox user (Node could not read /etc/ssl/openssl.cnf and would not start).
    mounts = ["/proc", "/dev", "/tmp", workspace, *tmpfs, *(t for _, t in (*ro, *extra_ro, *binds, *host_binds, *ro_binds))]
    for path in _created_dirs(mounts, host) if as_root else ():
        argv += ["--chmod", "0755", path]
    argv += ["--remount-ro", "/", "--chdir", workspace, "--clearenv"]
    for key, value in sandbox_env(workspace, env).items():
        argv += ["--setenv", key, value]
    # Nested user namespaces (`unshare -r`) are refused by a seccomp filter, as root and not.
    return userns_filter.with_filter(argv + ["--"] + (_drop_root(run_as) if as_root else []))


def navi_folder(path: str | Path) -> bool:
    """Is `path` one of the folders Navi makes for sandboxed programs (a user's workspace, a user
    tool's data folder, an MCP server's home) and no place of the host's or of Navi's code?"""
    real = places.real(path)
    roots = [places.real(settings.NAVI_WORKSPACE), places.real(Path(settings.TOOLS_DIR) / ".data")]
    if getattr(settings, "MCP_DATA_DIR", None):
        roots.append(places.real(settings.MCP_DATA_DIR))
    if not any(places.under(real, root) for root in roots):
        return False
    return not any(places.under(place.path, real) for place in places.host_places())


def hand_over(path: str | Path, *, to: tuple[int, int] | None = None) -> None:
    """Give Navi's own sandbox folder `path`, and what the server wrote in it, to the sandbox user
    (the server runs as root), so the sandbox can change files Navi wrote there. Only a folder of
    `navi_folder`, only entries the server's own user owns: a file of anyone else, a symlink
    (never followed) or a file with other hard links (a name for a file elsewhere) is left alone.
    A loop, not recursion: a tree nested thousands deep is walked like any other."""
    uid, gid = to or sandbox_ids()
    if not navi_folder(path):
        log.warning("not handing %s to the sandbox user: it is not a folder Navi made for the sandbox", path)
        return
    server = os.geteuid()
    try:
        top = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(top.st_mode):
        return
    try:
        if top.st_uid == server and (top.st_uid, top.st_gid) != (uid, gid):
            os.chown(path, uid, gid, follow_symlinks=False)
        for _, dirs, files, dir_fd in fstree.fwalk(path):
            for name in (*dirs, *files):
                _chown_entry(name, dir_fd, uid, gid, server)
    except OSError as exc:  # too many open folders, a folder removed meanwhile: the run goes on
        log.warning("handing %s to the sandbox user stopped early: %s", path, exc)


def _chown_entry(name: str, dir_fd: int, uid: int, gid: int, server: int) -> None:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if (st.st_uid, st.st_gid) == (uid, gid) or st.st_uid != server or stat.S_ISLNK(st.st_mode):
            return
        if not stat.S_ISDIR(st.st_mode) and st.st_nlink > 1:
            log.warning("not handing %s to the sandbox user: it has other hard links", name)
            return
        os.chown(name, uid, gid, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:  # removed meanwhile
        pass


def signal_of(returncode: int | None, sandboxed: bool) -> int | None:
    """The signal that killed the command: bwrap reports a child killed by signal N as 128+N."""
    if returncode is None:
        return None
    if returncode < 0:
        return -returncode
    if sandboxed and 128 < returncode < 128 + 65:
        return returncode - 128
    return None


@dataclass
class ProcessOutcome:
    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool = False
    truncated: bool = False
    timeout: float = 0.0
    output_cap: int = 0

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and not self.truncated

    def describe_exit(self) -> str:
        """One line on how the process ended, with what to do next when it went wrong."""
        if self.timed_out:
            return (
                f"[stopped: still running after {self.timeout:g} s (wall-clock limit); "
                "make it faster, work on less data, or split the job]"
            )
        if self.returncode is not None and self.returncode < 0:
            try:
                sig = signal.Signals(-self.returncode).name
            except ValueError:
                sig = f"signal {-self.returncode}"
            return f"[killed by {sig}; a crash or a resource limit (memory, processes, file size)]"
        return f"[exit code {self.returncode}]"

    def format(self) -> str:
        """stdout, stderr and the exit line as the model reads them."""
        parts = []
        if self.stdout:
            parts.append(self.stdout.rstrip("\n"))
        if self.stderr:
            parts.append("[stderr]\n" + self.stderr.rstrip("\n"))
        if self.truncated:
            parts.append(
                f"[truncated: output exceeded {self.output_cap} bytes, the rest was dropped and the "
                "process stopped; print less, or write big results to a file and read parts of it]"
            )
        parts.append(self.describe_exit())
        return "\n".join(parts)


class _Capture:
    """stdout + stderr share one byte budget, so one stream cannot starve the other's note."""

    def __init__(self, cap: int) -> None:
        self.left = cap
        self.buffers: dict[str, bytearray] = {"out": bytearray(), "err": bytearray()}
        self.overflow = asyncio.Event()

    async def pump(self, stream: asyncio.StreamReader | None, key: str) -> None:
        if stream is None:
            return
        while True:
            chunk = await stream.read(65536)
            if not chunk:
                return
            take = chunk[: max(self.left, 0)]
            self.buffers[key] += take
            self.left -= len(chunk)
            if self.left < 0:
                self.overflow.set()
                return


def kill_group(proc: asyncio.subprocess.Process) -> None:
    """SIGKILL the child's whole process group (it was started in its own session), including
    grandchildren left behind after the leader exited."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    if proc.returncode is None:
        # os.kill, not proc.kill(): Popen.send_signal() polls and may reap the child behind the
        # asyncio child watcher's back ("Unknown child process pid").
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(proc.pid, signal.SIGKILL)


@dataclass(frozen=True)
class Limits:
    """What one tool child may use besides time and output."""

    memory: int  # bytes of address space
    file_size: int  # bytes, the largest file it may write
    processes: int  # enforced only through a pids cgroup (see the module docstring)

    @classmethod
    def for_tools(cls) -> "Limits":
        """terminal and user tools (SANDBOX_* settings)."""
        mb = 1024 * 1024
        return cls(settings.SANDBOX_MEMORY_MB * mb, settings.SANDBOX_MAX_FILE_MB * mb, settings.SANDBOX_MAX_PROCS)

    def wrap(self, argv: list[str]) -> list[str]:
        binary = shutil.which("prlimit")
        if binary is None:
            log.warning("prlimit (util-linux) is missing: tool processes run without memory and file-size limits")
            return argv
        return [binary, f"--as={self.memory}", f"--fsize={self.file_size}", "--core=0", "--", *argv]


class PidsCgroup:
    """A throwaway `pids` cgroup (v1 or v2) capping the process count; None when not writable."""

    ROOTS = ("/sys/fs/cgroup/pids", "/sys/fs/cgroup")

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls, max_pids: int) -> "PidsCgroup | None":
        for root in map(Path, cls.ROOTS):
            if not (root / "cgroup.procs").exists():
                continue
            path = root / f"navi-tool-{uuid.uuid4().hex[:12]}"
            try:
                path.mkdir()
                (path / "pids.max").write_text(str(max_pids))
                return cls(path)
            except OSError:
                if path.exists():
                    _rmdir(path)
        return None

    @classmethod
    def for_root(cls, max_pids: int) -> "PidsCgroup | None":
        """A cgroup when the server runs as root (the kernel ignores RLIMIT_NPROC for root)."""
        if os.geteuid() != 0:
            return None
        cgroup = cls.create(max_pids)
        if cgroup is None:
            log.warning("running as root without a writable pids cgroup: tool processes have no process limit")
        return cgroup

    def wrap(self, argv: list[str]) -> list[str]:
        # The shell joins the cgroup, then becomes the command: everything it starts is counted.
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.path / "cgroup.procs"), *argv]

    def remove(self) -> None:
        _rmdir(self.path)


def _rmdir(path: Path) -> None:
    """Killed processes leave the cgroup a moment after they die; retry briefly."""
    for _ in range(100):
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.01)
    log.warning("could not remove cgroup %s", path)


async def run_process(
    argv: list[str],
    *,
    cwd: str | Path,
    env: dict[str, str],
    timeout: float,
    output_cap: int,
    stdin_data: bytes | None = None,
    limits: Limits | None = None,
) -> ProcessOutcome:
    """Run argv; never outlives the call (timeout, overflow or cancellation kill the group)."""
    if limits is None:
        return await _run(argv, cwd, env, timeout, output_cap, stdin_data)
    cgroup = PidsCgroup.for_root(limits.processes)
    argv = limits.wrap(argv)
    try:
        return await _run(cgroup.wrap(argv) if cgroup else argv, cwd, env, timeout, output_cap, stdin_data)
    finally:
        if cgroup is not None:
            await asyncio.shield(asyncio.to_thread(cgroup.remove))


async def _run(
    argv: list[str], cwd: str | Path, env: dict[str, str], timeout: float, output_cap: int, stdin_data: bytes | None
) -> ProcessOutcome:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=str(cwd),
        env=env,
        stdin=asyncio.subprocess.PIPE if stdin_data is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    capture = _Capture(output_cap)
    timed_out = False
    readers = asyncio.gather(capture.pump(proc.stdout, "out"), capture.pump(proc.stderr, "err"))
    try:
        if stdin_data is not None and proc.stdin is not None:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                proc.stdin.write(stdin_data)
                await proc.stdin.drain()
            proc.stdin.close()
        overflow = asyncio.ensure_future(capture.overflow.wait())
        finished = asyncio.ensure_future(_finish(proc, readers))
        try:
            done, _ = await asyncio.wait({finished, overflow}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            overflow.cancel()
            finished.cancel()
        timed_out = not done
    finally:
        # Also reached on CancelledError (Stop): nothing keeps running, nothing is left unreaped.
        kill_group(proc)
        readers.cancel()
        await asyncio.shield(_reap(proc, readers))
    return ProcessOutcome(
        returncode=proc.returncode,
        stdout=capture.buffers["out"].decode("utf-8", "replace"),
        stderr=capture.buffers["err"].decode("utf-8", "replace"),
        timed_out=timed_out,
        truncated=capture.overflow.is_set(),
        timeout=timeout,
        output_cap=output_cap,
    )


async def _finish(proc: asyncio.subprocess.Process, readers: asyncio.Future) -> None:
    await asyncio.shield(readers)
    await proc.wait()


async def _reap(proc: asyncio.subprocess.Process, readers: asyncio.Future) -> None:
    """Read the pipes to EOF and wait for the exit status. asyncio's wait() only returns once
    the pipes are closed, and a reader paused on a full buffer would never see EOF."""

    async def drain(stream: asyncio.StreamReader | None) -> None:
        while stream is not None and await stream.read(65536):
            pass

    with contextlib.suppress(asyncio.CancelledError, Exception):
        await readers  # let the cancelled pumps finish before draining the same streams
    try:
        await asyncio.wait_for(asyncio.gather(drain(proc.stdout), drain(proc.stderr)), 2.0)
    except (asyncio.TimeoutError, RuntimeError, ConnectionError):
        transport = getattr(proc, "_transport", None)  # a writer escaped the kill: stop listening
        if transport is not None:
            transport.close()
    with contextlib.suppress(asyncio.TimeoutError, ProcessLookupError):
        await asyncio.wait_for(proc.wait(), 2.0)
