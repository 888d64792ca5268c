"""Shared set-up for the Django benchmarks: a throwaway SQLite database, migrated.

Import first in a benchmark: `from _django import setup; setup()`.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def setup() -> Path:
    """Point Django at a temp SQLite DB, set it up and migrate. Returns the temp dir."""
    sys.path.insert(0, str(ROOT))
    tmp = Path(tempfile.mkdtemp(prefix="navi-bench-"))
    os.environ.setdefault("DATABASE_URL", f"sqlite:///{tmp}/bench.db")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    os.environ["DJANGO_SETTINGS_MODULE"] = "navi_project.settings"
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    return tmp
