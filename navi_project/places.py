"""The places on this machine that Navi never hands to anyone: its own (the checkout, the venv,
its data folders and database files, its keys) and the host's (/etc, /root, /proc, /sys, /dev,
the system's programs, other users' homes). One list, read by the MCP folder check and by the
sandbox before it gives a folder to the sandbox user."""

from __future__ import annotations

import os
import pwd
import site
import sys
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings


@dataclass(frozen=True)
class Place:
    path: Path
    what: str
    inside: bool  # a folder inside it is refused too (not only the place and what holds it)
    read_only_ok: bool = False  # shown read-only is fine (code anyone can read), writable never


def real(path: str | Path) -> Path:
    return Path(os.path.realpath(os.path.expanduser(str(path))))


def under(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


# The host's own: settings, secrets, the kernel's files and devices. Never shown to a server.
HOST_PLACES = (
    ("/etc", "the system's settings (/etc)"), ("/root", "root's home (/root)"), ("/proc", "the kernel's process files (/proc)"),
    ("/sys", "the kernel's device files (/sys)"), ("/dev", "the device files (/dev)"), ("/boot", "the boot files (/boot)"),
    ("/run", "the running system's files (/run)"), ("/var/run", "the running system's files (/var/run)"),
    ("/var/lib", "the system services' data (/var/lib)"), ("/var/log", "the system's logs (/var/log)"),
    ("/var/spool", "the system's queues (/var/spool)"), ("/var/backups", "the system's backups"),
)
# Programs and libraries every sandbox already sees read-only: never writable.
SYSTEM_CODE = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt/venv")


def database_files() -> list[str]:
    """The SQLite database's file and its journals ("" on PostgreSQL or in memory: none)."""
    database = settings.DATABASES["default"]
    name = str(database.get("NAME") or "")
    if "sqlite" not in database["ENGINE"] or not name.startswith("/"):
        return []
    return [name, f"{name}-wal", f"{name}-shm", f"{name}-journal"]


def venv_places() -> list[Path]:
    """Navi's Python: the venv (sys.prefix), its real folder, its site-packages and the
    interpreter it was made from (sys.base_prefix: pyenv's lies under /root)."""
    found = [sys.prefix, os.path.realpath(sys.prefix), sys.base_prefix]
    try:
        found += site.getsitepackages()
    except AttributeError:  # a virtualenv without getsitepackages
        pass
    return [real(p) for p in dict.fromkeys(found)]


def other_homes() -> list[Path]:
    """The home folders of this machine's other accounts (the server's own user's is its own)."""
    mine = os.geteuid()
    homes: list[Path] = []
    for account in pwd.getpwall():
        home = account.pw_dir or ""
        if account.pw_uid == mine or home in ("", "/") or not home.startswith("/"):
            continue
        if account.pw_uid >= 1000 or home.startswith("/home/"):
            homes.append(real(home))
    home_root = Path("/home")
    if home_root.is_dir():  # accounts not in /etc/passwd (LDAP, a container's mounts)
        own = real(os.path.expanduser("~"))
        for entry in home_root.iterdir():
            path = real(entry)
            if path != own and not under(own, path):
                homes.append(path)
    return list(dict.fromkeys(homes))


def navi_places() -> list[Place]:
    """Navi's own places. Inside the checkout only third-party code (node_modules) may be shown,
    read-only: a script an MCP server runs from there needs it."""
    base = Path(settings.BASE_DIR)
    places: list[tuple[str | Path, str, bool]] = [
        (base, "Navi's checkout (its code, .env and key files)", True),
        (base / ".env", "Navi's settings file (.env)", False),
        (base / ".navi_secret_key", "Navi's secret key", False),
        (base / ".navi_vapid_key", "Navi's push key", False),
        (settings.SSH_HOSTS_FILE, "the SSH hosts file", False),
        (settings.SESSION_FILES_DIR, "the chats' session files", True),
        (settings.NAVI_WORKSPACE, "the users' workspaces", True),
        (settings.TOOLS_DIR, "the user tools (user_tools)", True),
    ]
    for name, what in (("KNOWLEDGE_DIR", "the knowledge documents"), ("MCP_DATA_DIR", "the MCP servers' data folders")):
        if getattr(settings, name, None):
            places.append((getattr(settings, name), what, True))
    for variable, what in (("SECRET_KEY_FILE", "Navi's secret key"), ("VAPID_PRIVATE_KEY_FILE", "Navi's push key")):
        if os.environ.get(variable):
            places.append((os.environ[variable], what, False))
    for name in database_files():
        places.append((name, "Navi's database", False))
    found = [Place(real(p), what, inside) for p, what, inside in places]
    # Code anyone may read (a server pip-installed into Navi's venv runs from there): never writable.
    found += [Place(p, "Navi's Python (its venv and packages)", True, read_only_ok=True) for p in venv_places()]
    found.append(Place(real(base / "node_modules"), "the page's and servers' npm packages", True, read_only_ok=True))
    return found


def host_places() -> list[Place]:
    found = [Place(real(p), what, True) for p, what in HOST_PLACES]
    found += [Place(Path(p), f"the system's programs ({p})", True, read_only_ok=True) for p in SYSTEM_CODE]
    found += [Place(home, f"another account's home folder ({home})", True) for home in other_homes()]
    return found


def refusal(raw: str, *, writable: bool, own: list[Path] = ()) -> str | None:
    """Why `raw` may not be shown to a sandboxed program (None: it may). A path that holds one of
    these places, or lies inside one, is refused; `own` folders (the caller's workspace, the
    server's data folder) may be shown."""
    path = real(raw)
    if any(under(path, folder) for folder in own):
        return None
    places = navi_places() + host_places()
    allowed_inside: list[Place] = [p for p in places if p.read_only_ok and not writable and under(path, p.path)]
    for place in places:
        if under(place.path, path) and not (place.read_only_ok and not writable):
            return f"{raw!r} holds {place.what}"
    for place in places:
        if place.inside and under(path, place.path) and not any(under(a.path, place.path) for a in allowed_inside):
            return f"{raw!r} lies inside {place.what}"
    return None
