"""Which host folders a stdio MCP server may be shown, and as whom it runs.

Never a place of Navi's (its checkout, venv, data folders, database files, keys) or of the host
(/etc, /root, /proc, /sys, /dev, other users' homes), nor a path that resolves into one (symlinks,
`..`): navi_project.places holds the list. Navi never changes the owner or mode of a folder it
shows: a writable folder is written by a server running as the folder's own user (the server
runs as root) or as the server's user (it does not)."""

from __future__ import annotations

import os
from pathlib import Path

from django.conf import settings

from navi_project import places
from tools_app.mcp.config import ConfigError


def _own_folders(owner_id: int | None, allowed: tuple[Path, ...]) -> list[Path]:
    own = [places.real(Path(settings.NAVI_WORKSPACE) / str(int(owner_id)))] if owner_id is not None else []
    return own + [places.real(p) for p in allowed]


def check_paths(
    paths: list[str] | tuple[str, ...], owner_id: int | None, *, allowed: tuple[Path, ...] = (),
    writable: list[str] | tuple[str, ...] = (),
) -> None:
    """Refuse (ConfigError naming the path and why) a folder that is, holds or lies in one of
    Navi's or the host's places; the owner's own workspace (NAVI_WORKSPACE/<owner id>) and
    `allowed` may be shown. `writable` folders are checked as writable (stricter), and as root
    they must all belong to one user other than root (the user the server then runs as)."""
    own = _own_folders(owner_id, allowed)
    for raw, is_writable in [*((p, False) for p in paths), *((p, True) for p in writable)]:
        if not isinstance(raw, str) or not raw.startswith("/"):
            raise ConfigError(f"paths: {raw!r} is not an absolute path; give the full path of a folder (e.g. /srv/notes)")
        if "\x00" in raw or len(raw) > 4096:
            raise ConfigError("paths: a path holds a NUL byte or is longer than 4096 characters; give a real folder")
        why = places.refusal(raw, writable=is_writable, own=own)
        if why:
            raise ConfigError(f"paths: {why}; a server may not be shown it. Give a folder of your own data instead")
    run_as(writable, owner_id, allowed=allowed)


def run_as(writable: list[str] | tuple[str, ...], owner_id: int | None = None, *,
           allowed: tuple[Path, ...] = ()) -> tuple[int, int] | None:
    """The (uid, gid) a server with these writable folders runs as when Navi runs as root: their
    owner, never root (None: the sandbox's own user will do — no writable folder of the owner's).
    A folder that does not exist yet is refused: Navi does not make folders for a server."""
    if os.geteuid() != 0 or not writable:
        return None
    own = _own_folders(owner_id, allowed)
    owners: dict[tuple[int, int], str] = {}
    for raw in writable:
        if any(places.under(places.real(raw), folder) for folder in own):
            continue  # Navi's own folder for this user: handed to the sandbox user as it always is
        try:
            st = os.stat(raw)
        except OSError:
            raise ConfigError(f"paths: {raw!r} does not exist; make the folder first, then tick it writable") from None
        if st.st_uid == 0:
            raise ConfigError(
                f"paths: {raw!r} belongs to root. Navi runs stdio servers as an unprivileged user and never "
                "changes who owns your files: show it read-only, or give the folder to the user the server should "
                f"write as (e.g. `sudo chown -R youruser {raw}`) and tick it writable again"
            )
        owners.setdefault((st.st_uid, st.st_gid), raw)
    if len(owners) > 1:
        listed = ", ".join(f"{path} (uid {uid})" for (uid, _), path in owners.items())
        raise ConfigError(f"paths: the writable folders belong to different users ({listed}); one server runs as "
                          "one user: keep the folders of one user writable, show the others read-only")
    return next(iter(owners), None)
