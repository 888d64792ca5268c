"""Session.objects.owned_by and the signals sessions_app sends."""

from __future__ import annotations

import pytest

from sessions_app.models import Session
from sessions_app.signals import send_session_created, session_created

pytestmark = pytest.mark.django_db


def test_it_finds_the_owners_session(owner):
    session = Session.objects.create(owner=owner, profile_id="secretary")
    assert list(Session.objects.owned_by(owner, str(session.pk))) == [session]


def test_it_hides_someone_elses_session(owner, other_user):
    session = Session.objects.create(owner=owner, profile_id="secretary")
    assert not Session.objects.owned_by(other_user, str(session.pk)).exists()


@pytest.mark.parametrize("raw", ["", "nope", "123", "../etc", None])
def test_a_malformed_id_is_simply_not_found(owner, raw):
    assert not Session.objects.owned_by(owner, raw).exists()


def test_a_failing_session_created_receiver_never_breaks_creation(owner, caplog):
    seen = []

    def broken(sender, session, **kwargs):
        raise RuntimeError("boom")

    def working(sender, session, **kwargs):
        seen.append(session)

    session = Session.objects.create(owner=owner, profile_id="secretary")
    session_created.connect(broken, dispatch_uid="test.broken")
    session_created.connect(working, dispatch_uid="test.working")
    try:
        send_session_created(session)
    finally:
        session_created.disconnect(dispatch_uid="test.broken")
        session_created.disconnect(dispatch_uid="test.working")
    assert seen == [session] and "boom" in caplog.text
