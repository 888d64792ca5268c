"""The SQLite driver: pysqlite3 (PyPI `pysqlite3-binary`) in place of the standard library's.

Python builds without loadable-extension support (pyenv's default) cannot load `sqlite-vec`,
the vector index knowledge_app keeps in the same database file. pysqlite3 is the same module
over a newer SQLite built with extension loading; installed under the name `sqlite3` before
Django's SQLite backend imports it, every connection can load the extension. Without the
package the standard library's module stays and search by meaning falls back to words.
"""

from __future__ import annotations

import sys


def install() -> bool:
    """Make `import sqlite3` give pysqlite3 (True), or leave the standard one (False)."""
    if "sqlite3" in sys.modules and getattr(sys.modules["sqlite3"], "__name__", "") == "pysqlite3":
        return True
    try:
        import pysqlite3
        from pysqlite3 import dbapi2
    except ImportError:
        return False
    sys.modules["sqlite3"] = pysqlite3
    sys.modules["sqlite3.dbapi2"] = dbapi2
    return True
