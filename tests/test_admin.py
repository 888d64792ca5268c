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


def test_the_tool_policy_is_a_choice_per_tool_and_saves(admin_client):
    url = reverse("admin:agent_profile_change", args=["secretary"])
    page = admin_client.get(url).content.decode()
    assert 'name="policy__terminal"' in page and "<select" in page
    assert 'name="tool_policy"' not in page  # no JSON text box
    assert 'type="checkbox" name="enabled_tools"' in page
    form = admin_client.get(url).context["adminform"].form
    data = {k: v for k, v in form.initial.items() if v is not None and not k.startswith("policy__")}
    data["enabled_tools"] = ["todo", "terminal"]
    data["scratchpad_sections"] = "[]"
    data.update({"policy__terminal": "allow", "policy__web_search": "deny", "policy__todo": ""})
    response = admin_client.post(url, data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    profile = Profile.objects.get(pk="secretary")
    assert profile.tool_policy == {"terminal": "allow", "web_search": "deny"}
    assert profile.enabled_tools == ["todo", "terminal"]


def test_the_audit_is_read_only_and_filterable(admin_client, session):
    from agent.models import ToolCallRecord

    ToolCallRecord.objects.create(user=session.owner, session=session, tool="terminal", decision="denied", arguments={"command": "ls"})
    url = reverse("admin:agent_toolcallrecord_changelist")
    page = admin_client.get(url, {"decision__exact": "denied"})
    assert page.status_code == 200 and b"terminal" in page.content
    assert admin_client.get(reverse("admin:agent_toolcallrecord_add")).status_code == 403
    record = ToolCallRecord.objects.get()
    change = admin_client.post(reverse("admin:agent_toolcallrecord_change", args=[record.pk]), {"tool": "x"})
    assert change.status_code == 403 and ToolCallRecord.objects.get().tool == "terminal"


def test_staff_without_run_host_tools_cannot_enable_user_tools(client, django_user_model):
    from django.contrib.auth.models import Permission

    from tools_app.models import UserTool

    tool = UserTool.objects.create(name="spy", path="/x/spy.py", enabled=False)
    staff = django_user_model.objects.create_user("staffer", password="pw-for-tests", is_staff=True)
    staff.user_permissions.add(*Permission.objects.filter(codename__in=["view_usertool", "change_usertool"]))
    client.force_login(staff)
    url = reverse("admin:tools_app_usertool_change", args=[tool.pk])
    client.post(url, {"name": "spy", "enabled": "on", "created_by": "owner"})
    assert UserTool.objects.get().enabled is False
    client.post(reverse("admin:tools_app_usertool_changelist"), {"action": "enable", "_selected_action": [tool.pk]})
    assert UserTool.objects.get().enabled is False
