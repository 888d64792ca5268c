"""The server's boot leaves out the libraries only some paths use (issue 41): the MCP SDK (~600 ms
of pydantic models), pywebpush with aiohttp, Apprise, python-telegram-bot and PIL are imported on
first use (navi_project.lazy), so a restart and every worker's memory do not pay for them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAZY = ["mcp", "mcp_types", "pywebpush", "aiohttp", "apprise", "telegram", "PIL"]

PROBE = """
import json, sys
import django
django.setup()
from navi_project.asgi import application  # what daphne loads: every app ready, every URL and route
print(json.dumps(sorted(m for m in {lazy!r} if m in sys.modules)))
"""


def _loaded_at_boot(tmp_path: Path) -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "TELEGRAM_"))}
    env.update(DJANGO_SETTINGS_MODULE="navi_project.settings", NAVI_TESTING="1", PYTHONPATH=str(ROOT),
               DB_PATH=str(tmp_path / "navi.sqlite3"))
    done = subprocess.run([sys.executable, "-c", PROBE.format(lazy=LAZY)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_boot_imports_none_of_the_libraries_loaded_on_first_use(tmp_path):
    assert _loaded_at_boot(tmp_path) == []


def test_a_lazy_library_is_there_at_its_first_use():
    from agent.web import mcp_server
    from navi_project.lazy import lazy_module

    # The hint the SDK resolves when /mcp builds its server: the real Context class.
    assert mcp_server.mcpserver.Context.__module__.startswith("mcp.")
    assert lazy_module("PIL.Image").open is not None
