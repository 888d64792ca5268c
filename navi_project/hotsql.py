"""The statements every run makes, written once as SQL instead of built by the ORM each time.

A run start and a stream make ~25 small queries (claim, session and context, guard, the user's
row, the answer's partial saves, the release). On the 2-vCPU VM Django spends 0.5-1 ms of Python
compiling each one (joins, converters, model state) for a statement SQLite answers in 0.04 ms:
that was most of the 15 ms between "send" and the LLM call, and, under load, most of the one
database thread's CPU, holding the GIL while streams in flight waited (bench/README "hot path").

These helpers keep what the ORM does for values (`get_db_prep_save` in, the backend's and the
field's converters out, `Model.from_db`), so rows come back as the same model instances with the
same Python values on SQLite and PostgreSQL. Sync, like the ORM: call them from a thread
(`sync_to_async`), never on the event loop. Anything not on the hot path uses the ORM.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from functools import lru_cache
from typing import Any, Sequence

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import Model
from django.utils import timezone

# Each `django.db.connection.<attribute>` is a lookup through asgiref's context-local storage
# (~3-6 us here): the helpers below take the connection once per call, and what depends only
# on the model (table and column names, an INSERT's shape) is worked out once per process.


def _db():
    return connections[DEFAULT_DB_ALIAS]


@lru_cache(maxsize=None)
def table(model: type[Model]) -> str:
    return _db().ops.quote_name(model._meta.db_table)


@lru_cache(maxsize=None)
def column(model: type[Model], field: str) -> str:
    return _db().ops.quote_name(model._meta.get_field(field).column)


def prep(model: type[Model], field: str, value: Any) -> Any:
    """`value` as the database stores it in `field` (UUID hex on SQLite, JSON text, datetimes)."""
    return model._meta.get_field(field).get_db_prep_save(value, _db())


@lru_cache(maxsize=256)
def _qmark(sql: str) -> str:
    """`sql` in sqlite3's placeholder style, as Django's SQLite cursor converts it on every call."""
    return _FORMAT_PLACEHOLDER.sub("?", sql).replace("%%", "%")


_FORMAT_PLACEHOLDER = re.compile(r"(?<!%)%s")


@contextmanager
def _cursor(db, sql: str, params: Sequence[Any]):
    """A cursor that has run `sql`. On SQLite, the driver's own cursor on Django's connection
    (same transaction, same errors as Django's, mapped by `wrap_database_errors`): Django's
    cursor wrapper layers and its placeholder regex, redone for every statement, were ~35 us of
    the ~60 us a small statement took, on the ~20 statements of every run. Elsewhere Django's."""
    if db.vendor != "sqlite":
        with db.cursor() as cursor:
            cursor.execute(sql, params)
            yield cursor
        return
    db.ensure_connection()
    db.validate_no_broken_transaction()
    with db.wrap_database_errors:
        cursor = db.connection.cursor()
        try:
            cursor.execute(_qmark(sql), params)
            yield cursor
        finally:
            cursor.close()


def execute(sql: str, params: Sequence[Any] = ()) -> int:
    """Run one statement; the number of rows it changed."""
    with _cursor(_db(), sql, params) as cursor:
        return cursor.rowcount


def values(sql: str, params: Sequence[Any] = ()) -> list[tuple]:
    """Rows of plain values, unconverted (ids, counts, text)."""
    with _cursor(_db(), sql, params) as cursor:
        return cursor.fetchall()


def select(model: type[Model], where: str, params: Sequence[Any] = (), *, tail: str = "") -> list[Model]:
    """Model instances of every row of `model` matching `where` (SQL over its columns), as the
    ORM would build them. `tail`: ORDER BY / LIMIT."""
    db = _db()
    names, columns, converters = _shape(model, db.vendor)
    sql = f"SELECT {columns} FROM {table(model)} WHERE {where} {tail}"
    with _cursor(db, sql, params) as cursor:
        rows = cursor.fetchall()
    return _built(model, db, names, converters, rows)


def update_returning(model: type[Model], assignments: str, where: str, params: Sequence[Any] = ()) -> list[Model] | None:
    """`UPDATE <model> SET <assignments> WHERE <where>` in one statement that also returns the
    changed rows, as `select` would read them right after; None where the database cannot
    return rows from an UPDATE (SQLite before 3.35): run it with `execute` then."""
    db = _db()
    if not db.features.can_return_columns_from_insert:  # the same SQLite versions as for UPDATE
        return None
    names, columns, converters = _shape(model, db.vendor)
    sql = f"UPDATE {table(model)} SET {assignments} WHERE {where} RETURNING {columns}"
    with _cursor(db, sql, params) as cursor:
        rows = cursor.fetchall()
    return _built(model, db, names, converters, rows)


def _built(model: type[Model], db, names: list[str], converters: list[tuple], rows: list[tuple]) -> list[Model]:
    out = []
    for row in rows:
        row = list(row)
        for i, convs, expression in converters:
            value = row[i]
            for convert in convs:
                value = convert(value, expression, db)
            row[i] = value
        out.append(model.from_db(db.alias, names, row))
    return out


def insert(model: type[Model], /, **fields: Any) -> Any:
    """Insert one row (fields not given take their model default); its primary key."""
    db = _db()
    sql, plan = _insert_plan(model, frozenset(fields), db.vendor)
    params = []
    for field, key, default in plan:
        if key is not None:
            value = fields[key]
        elif default == "now":
            value = timezone.now()
        else:
            value = field.get_default()  # as Model(): the default, else "" or None
        params.append(field.get_db_prep_save(value, db))
    if db.features.can_return_columns_from_insert:
        with _cursor(db, sql + f" RETURNING {db.ops.quote_name(model._meta.pk.column)}", params) as cursor:
            return cursor.fetchone()[0]
    with _cursor(db, sql, params) as cursor:
        return cursor.lastrowid


@lru_cache(maxsize=64)
def _insert_plan(model: type[Model], given: frozenset[str], vendor: str) -> tuple[str, list[tuple]]:
    """(the INSERT without RETURNING, [(field, the keyword giving its value or None, "now" when
    it is auto_now(_add))]) for one set of given keywords."""
    left, cols, plan = set(given), [], []
    for field in model._meta.concrete_fields:
        if field.primary_key and field.name not in given and field.attname not in given and not field.has_default():
            continue  # an auto-incremented id
        key = field.attname if field.attname in given else field.name if field.name in given else None
        left.discard(key)
        auto = key is None and (getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False))
        plan.append((field, key, "now" if auto else None))
        cols.append(_db().ops.quote_name(field.column))
    if left:
        raise TypeError(f"{model.__name__} has no field(s) {', '.join(sorted(left))}")
    sql = f"INSERT INTO {table(model)} ({', '.join(cols)}) VALUES ({', '.join(['%s'] * len(cols))})"
    return sql, plan


@lru_cache(maxsize=64)
def _shape(model: type[Model], vendor: str) -> tuple[list[str], str, list[tuple]]:
    """(attnames, the SELECT column list, [(index, converters, column expression)]) of a model:
    the converters the ORM's compiler would apply to each column (datetimes, JSON, booleans and
    UUIDs on SQLite; JSON on PostgreSQL)."""
    db = _db()
    fields = model._meta.concrete_fields
    names = [f.attname for f in fields]
    columns = ", ".join(db.ops.quote_name(f.column) for f in fields)
    converters = []
    for i, field in enumerate(fields):
        expression = field.get_col(model._meta.db_table)
        convs = db.ops.get_db_converters(expression) + expression.get_db_converters(db)
        if convs:
            converters.append((i, tuple(convs), expression))
    return names, columns, converters
