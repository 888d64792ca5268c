"""The embeddings in a backup: `vectors.bin`, a part of navi_backup's archive (sessions_app.backup
`register_part`). Restore writes them back into the vector index of whichever database it
restores into, so a restored install searches by meaning at once: no passage or fact is
embedded again (one restore re-embedded 16 964 passages before, issue 51).

Format: `NAVIVEC1\\n`, then for each vector table a JSON line `{"space", "model", "dim", "kind",
"count"}` followed by `count` records of id and owner id (little-endian int64) and `dim`
float32s. The spaces' rows themselves (and each passage's space) travel with the database rows.
"""

from __future__ import annotations

import json
import sqlite3  # pysqlite3 once navi_project.settings ran (navi_project.sqlite_driver): it loads sqlite-vec
import struct
from array import array
from contextlib import closing
from pathlib import Path
from typing import Iterator

from django.db import connection

from . import vectors
from .models import VectorSpace

MAGIC = b"NAVIVEC1\n"
RECORD_HEAD = struct.Struct("<qq")
BATCH = 1000


def _floats(blob) -> list[float]:
    values = array("f")
    values.frombytes(bytes(blob))
    return values.tolist()


def _tables(spaces: list[tuple[int, str, int]], existing: set[str]) -> Iterator[tuple[int, str, int, str, str]]:
    for space_id, model, dim in spaces:
        for kind in vectors.KINDS:
            name = f"knowledge_vec_{int(space_id)}_{kind}"
            if name in existing:
                yield space_id, model, dim, kind, name


def dump(target: Path, snapshot: Path | None) -> int:
    """Every vector, from the SQLite snapshot file when given (its own connection, sqlite-vec
    loaded), else from the live database (PostgreSQL: inside the backup's transaction)."""
    if snapshot is not None:
        with closing(sqlite3.connect(snapshot)) as db:
            try:
                import sqlite_vec  # noqa: PLC0415 - present wherever vectors could be written

                db.enable_load_extension(True)
                sqlite_vec.load(db)
            except (ImportError, AttributeError, sqlite3.Error):
                target.write_bytes(MAGIC)
                return 0
            names = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            spaces = db.execute("SELECT id, model, dim FROM knowledge_app_vectorspace").fetchall()
            return _write(target, spaces, names, lambda table: db.execute(
                f"SELECT rowid, owner_id, embedding FROM {table} ORDER BY rowid"), blob=True)
    names = set(connection.introspection.table_names())
    spaces = list(VectorSpace.objects.values_list("id", "model", "dim"))
    column = "embedding" if connection.vendor == "sqlite" else "embedding::real[]"
    key = "rowid" if connection.vendor == "sqlite" else "id"
    with connection.cursor() as cursor:
        def rows(table: str):
            cursor.execute(f"SELECT {key}, owner_id, {column} FROM {table} ORDER BY {key}")
            return iter(lambda: cursor.fetchmany(BATCH), [])

        return _write(target, spaces, names, lambda table: (r for chunk in rows(table) for r in chunk),
                      blob=connection.vendor == "sqlite")


def _write(target: Path, spaces, names: set[str], read, *, blob: bool) -> int:
    total = 0
    with open(target, "wb") as out:
        out.write(MAGIC)
        for space_id, model, dim, kind, table in _tables(spaces, names):
            rows = list(read(table))
            out.write(json.dumps({"space": space_id, "model": model, "dim": dim, "kind": kind,
                                  "count": len(rows)}).encode() + b"\n")
            for row_id, owner_id, vector in rows:
                values = array("f", _floats(vector) if blob else vector)
                out.write(RECORD_HEAD.pack(int(row_id), int(owner_id)) + values.tobytes())
            total += len(rows)
    return total


def load(source: Path) -> int:
    """Write the backup's vectors into this database's index (tables made as needed); how many."""
    if vectors.available() != "ok":
        return 0  # no vector index here: search uses the words until one is installed and backfill runs
    total = 0
    with open(source, "rb") as data:
        if data.readline() != MAGIC:
            raise ValueError(f"{source.name} is not a Navi vectors file")
        while header := data.readline():
            section = json.loads(header)
            dim, size = int(section["dim"]), RECORD_HEAD.size + 4 * int(section["dim"])
            space = VectorSpace.objects.filter(pk=section["space"], model=section["model"], dim=dim).first()
            if space is None:
                data.seek(size * int(section["count"]), 1)  # its space did not come with the rows: skip
                continue
            vectors.space_for(space.model, space.dim)  # its tables
            left = int(section["count"])
            while left:
                chunk = data.read(size * min(left, BATCH))
                rows = []
                for at in range(0, len(chunk), size):
                    row_id, owner_id = RECORD_HEAD.unpack_from(chunk, at)
                    rows.append((row_id, owner_id, _floats(chunk[at + RECORD_HEAD.size:at + size])))
                vectors.write(space, section["kind"], rows)
                left -= len(rows)
                total += len(rows)
    return total
