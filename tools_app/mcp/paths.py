"""Which host folders a stdio MCP server may be shown: never one that holds Navi's data (the
database, session files, other users' workspaces, user tools), its secrets or its checkout."""

from __future__ import annotations

import os
from pathlib import Path

from django.conf import settings

from tools_app.mcp.config import ConfigError


def _real(path: str | Path) -> Path:
    return Path(os.path.realpath(os.path.expanduser(str(path))))


def _under(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def protected() -> list[tuple[Path, str, bool]]:
    """Navi's own places: (path, what it is, whether a folder inside it is refused too). Inside
    the checkout is only code (node_modules, a script): refused only where it holds one of them."""
    base = Path(settings.BASE_DIR)
    places: list[tuple[str | Path, str, bool]] = [
        (base, "Navi's checkout (its code, .env and key files)", False),
        (base / ".env", "Navi's settings file (.env)", False),
        (base / ".navi_secret_key", "Navi's secret key", False),
        (base / ".navi_vapid_key", "Navi's push key", False),
        (settings.SSH_HOSTS_FILE, "the SSH hosts file", False),
        (settings.SESSION_FILES_DIR, "the chats' session files", True),
        (settings.NAVI_WORKSPACE, "the users' workspaces", True),
        (settings.TOOLS_DIR, "the user tools (user_tools)", True),
    ]
    for variable, what in (("SECRET_KEY_FILE", "Navi's secret key"), ("VAPID_PRIVATE_KEY_FILE", "Navi's push key")):
        if os.environ.get(variable):
            places.append((os.environ[variable], what, False))
    database = database_file()
    if database:
        places.append((database, "Navi's database", False))
    data = getattr(settings, "MCP_DATA_DIR", None)
    if data:
        places.append((data, "the MCP servers' data folders", True))
    return [(_real(place), what, inside) for place, what, inside in places]


def database_file() -> str:
    """The SQLite database's file ("" on PostgreSQL, or for an in-memory database)."""
    database = settings.DATABASES["default"]
    name = str(database.get("NAME") or "")
    return name if "sqlite" in database["ENGINE"] and name.startswith("/") else ""


def check_paths(paths: list[str] | tuple[str, ...], owner_id: int | None, *, allowed: tuple[Path, ...] = ()) -> None:
    """Refuse (ConfigError) a path that is or holds one of Navi's places, or lies inside one;
    the owner's own workspace (NAVI_WORKSPACE/<owner id>) and `allowed` may be shown."""
    own = [_real(Path(settings.NAVI_WORKSPACE) / str(int(owner_id)))] if owner_id is not None else []
    own += [_real(p) for p in allowed]
    for raw in paths:
        if not raw.startswith("/"):
            raise ConfigError(f"paths: {raw!r} is not an absolute path; give the full path of a folder (e.g. /srv/notes)")
        path = _real(raw)
        mine = any(_under(path, folder) for folder in own)
        for place, what, inside in protected():
            if _under(place, path):
                raise ConfigError(f"paths: {raw!r} holds {what} ({place}); a server may not be shown it. "
                                  "Give a folder of your own data instead")
            if inside and _under(path, place) and not mine:
                raise ConfigError(f"paths: {raw!r} lies inside {what} ({place}); a server may not be shown it. "
                                  "Give a folder outside Navi's data instead")
