"""Who may use host tools, as every run start asks it: one statement with Django's ModelBackend,
the same answer as `User.has_perm` for every kind of account (direct, through a group,
superuser, inactive, none), and the backends' own answer when another backend decides."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, Permission

from tools_app.permissions import PERMISSION, user_has_host_tools

pytestmark = pytest.mark.django_db


@pytest.fixture
def host_permission():
    app_label, codename = PERMISSION.split(".")
    return Permission.objects.get(content_type__app_label=app_label, codename=codename)


def accounts(django_user_model, host_permission) -> dict:
    make = django_user_model.objects.create_user
    direct, grouped, plain = make("direct"), make("grouped"), make("plain")
    direct.user_permissions.add(host_permission)
    team = Group.objects.create(name="ops")
    team.permissions.add(host_permission)
    grouped.groups.add(team)
    other_team = Group.objects.create(name="readers")  # a group with some other permission
    other_team.permissions.add(Permission.objects.exclude(pk=host_permission.pk).first())
    plain.groups.add(other_team)
    retired = make("retired", is_active=False)
    retired.user_permissions.add(host_permission)
    boss = django_user_model.objects.create_superuser("boss")
    fired_boss = django_user_model.objects.create_superuser("fired", is_active=False)
    return {"direct": direct, "grouped": grouped, "plain": plain, "retired": retired, "boss": boss, "fired": fired_boss}


def test_the_same_answer_as_has_perm_for_every_kind_of_account(django_user_model, host_permission):
    users = accounts(django_user_model, host_permission)
    got = {name: user_has_host_tools(user.pk) for name, user in users.items()}
    assert got == {name: django_user_model.objects.get(pk=user.pk).has_perm(PERMISSION) for name, user in users.items()}
    assert got == {"direct": True, "grouped": True, "plain": False, "retired": False, "boss": True, "fired": False}


def test_a_removed_permission_counts_at_the_next_question(django_user_model, host_permission):
    users = accounts(django_user_model, host_permission)
    assert user_has_host_tools(users["direct"].pk) is True
    users["direct"].user_permissions.remove(host_permission)
    assert user_has_host_tools(users["direct"].pk) is False  # nothing cached between runs


@pytest.mark.parametrize("user_id", [None, 10**12, "1 OR 1=1", "x"])
def test_nobody_and_malformed_ids_have_no_host_tools(user_id):
    assert user_has_host_tools(user_id) is False


def test_another_backend_decides_itself(django_user_model, host_permission, settings):
    users = accounts(django_user_model, host_permission)
    settings.AUTHENTICATION_BACKENDS = ["tests.test_host_permission.NobodyBackend"]
    assert user_has_host_tools(users["direct"].pk) is False
    assert user_has_host_tools(users["boss"].pk) is True  # an active superuser has every permission


class NobodyBackend:
    """A backend that grants nothing (as a site with its own rules might)."""

    def has_perm(self, user, perm, obj=None) -> bool:
        return False
