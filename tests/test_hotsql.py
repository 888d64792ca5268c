"""navi_project.hotsql: the hot-path statements behave as the ORM's would (values, errors,
transactions), on SQLite through the driver's own cursor and elsewhere through Django's."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction
from django.db.transaction import TransactionManagementError

from agent.models import LLMCall
from navi_project import hotsql
from sessions_app.models import Message, Session

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_row_comes_back_as_the_orm_builds_it(session):
    session.title, session.pinned = "100% sure", True
    session.save()
    [row] = hotsql.select(Session, "id = %s", [hotsql.prep(Session, "id", session.pk)])
    orm = Session.objects.get(pk=session.pk)
    for field in Session._meta.concrete_fields:
        assert getattr(row, field.attname) == getattr(orm, field.attname), field.name


def test_json_fields_and_the_returned_key_of_an_insert(session):
    pk = hotsql.insert(Message, session_id=session.pk, seq=1, role="assistant", content="hi",
                       tool_calls=[{"name": "todo", "arguments": {"a": [1, 2]}}], meta={"k": "v"})
    stored = Message.objects.get(pk=pk)
    assert stored.tool_calls == [{"name": "todo", "arguments": {"a": [1, 2]}}] and stored.meta == {"k": "v"}
    [row] = hotsql.select(Message, "id = %s", [pk])
    assert row.tool_calls == stored.tool_calls and row.meta == stored.meta


def test_a_literal_percent_sign_is_not_a_placeholder(session):
    Session.objects.filter(pk=session.pk).update(title="100% done")
    found = hotsql.values(
        f"SELECT title FROM {hotsql.table(Session)} WHERE title LIKE '100%%' AND id = %s",
        [hotsql.prep(Session, "id", session.pk)],
    )
    assert found == [("100% done",)]


def test_a_constraint_violation_is_djangos_integrity_error(session):
    hotsql.insert(Message, session_id=session.pk, seq=1, role="user", content="first")
    with pytest.raises(IntegrityError):
        hotsql.insert(Message, session_id=session.pk, seq=1, role="user", content="same seq")


def test_statements_in_an_atomic_block_roll_back_with_it(session):
    with pytest.raises(RuntimeError), transaction.atomic():
        hotsql.insert(Message, session_id=session.pk, seq=1, role="user", content="kept?")
        hotsql.execute(f"UPDATE {hotsql.table(Session)} SET title = %s WHERE id = %s",
                       ["changed", hotsql.prep(Session, "id", session.pk)])
        raise RuntimeError("the block fails")
    assert not Message.objects.filter(session=session).exists()
    assert Session.objects.get(pk=session.pk).title == ""


def test_a_broken_transaction_refuses_further_statements_like_the_orm(session):
    hotsql.insert(Message, session_id=session.pk, seq=1, role="user", content="a")
    with transaction.atomic():
        # failing in an inner block without a savepoint breaks the outer one
        with pytest.raises(IntegrityError), transaction.atomic(savepoint=False):
            hotsql.insert(Message, session_id=session.pk, seq=1, role="user", content="b")
        with pytest.raises(TransactionManagementError):
            hotsql.values(f"SELECT COUNT(*) FROM {hotsql.table(LLMCall)}")


def test_an_update_returns_the_rows_it_changed_as_a_select_would_read_them(session):
    sid = hotsql.prep(Session, "id", session.pk)
    [row] = hotsql.update_returning(Session, "title = %s, pinned = %s", "id = %s", ["Renamed", True, sid])
    [selected] = hotsql.select(Session, "id = %s", [sid])
    for field in Session._meta.concrete_fields:
        assert getattr(row, field.attname) == getattr(selected, field.attname), field.name
    assert row.title == "Renamed" and row.pinned is True
    assert hotsql.update_returning(Session, "title = %s", "id = %s AND title = %s", ["x", sid, "not it"]) == []


def test_a_run_claim_reads_the_session_it_claims_and_works_without_returning(session, monkeypatch):
    from django.db import connection

    from agent.runs.manager import _claim

    claimed = _claim(str(session.pk), "run-1")
    assert isinstance(claimed, Session) and claimed.pk == session.pk and claimed.active_run_id == "run-1"
    assert _claim(str(session.pk), "run-2") is False  # held by a live run
    Session.objects.filter(pk=session.pk).update(active_run_id="")
    monkeypatch.setattr(connection.features, "can_return_columns_from_insert", False)  # SQLite < 3.35
    assert hotsql.update_returning(Session, "title = %s", "id = %s", ["x", hotsql.prep(Session, "id", session.pk)]) is None
    assert _claim(str(session.pk), "run-3") is True
    assert Session.objects.get(pk=session.pk).active_run_id == "run-3"
