"""Every model is editable in the Django admin: each changelist, search and change page renders."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.urls import reverse

from agent.models import Profile
from memory_app.models import MemoryFact
from sessions_app.models import Message

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client, django_user_model, profiles):
    user = django_user_model.objects.create_superuser("root", password="pw-for-tests")
    client.force_login(user)
    return client


def test_every_registered_model_has_a_working_changelist(admin_client, session):
    Message.objects.create(session=session, seq=1, role="user", content="hello admin")
    MemoryFact.objects.create(owner=session.owner, category="home", key="city", value="Lisbon")
    for model in admin.site._registry:
        meta = model._meta
        url = reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist")
        assert admin_client.get(url).status_code == 200, url
        assert admin_client.get(url, {"q": "hello"}).status_code == 200, url


def test_a_session_page_shows_its_messages_read_only(admin_client, session):
    Message.objects.create(session=session, seq=1, role="user", content="visible in the inline")
    response = admin_client.get(reverse("admin:sessions_app_session_change", args=[session.pk]))
    assert response.status_code == 200
    assert b"visible in the inline" in response.content
    assert b'name="messages-0-content"' not in response.content  # read-only, not a form field


def test_profiles_are_editable(admin_client):
    response = admin_client.get(reverse("admin:agent_profile_change", args=["secretary"]))
    assert response.status_code == 200 and b"Personal Secretary" in response.content
    assert Profile.objects.count() == 3
