"""GET /sessions/<id> pages its messages: the newest page by default, older ones with
`?before=<message id>&limit=N`, `has_more` / `older_than` saying whether there are more."""

from __future__ import annotations

import json

import pytest

from sessions_app.models import Message, Session

pytestmark = pytest.mark.django_db


@pytest.fixture
def long_chat(owner) -> Session:
    """450 displayed messages (seq 1-500, every tenth hidden: an edited-away row)."""
    session = Session.objects.create(owner=owner, profile_id="secretary")
    Message.objects.bulk_create(
        Message(session=session, seq=seq, role="user" if seq % 2 else "assistant", content=f"m{seq}",
                in_display=seq % 10 != 0)
        for seq in range(1, 501)
    )
    return session


def _get(client, session_id, **params):
    response = client.get(f"/sessions/{session_id}", params)
    return response.status_code, json.loads(response.content)


def _contents(body) -> list[str]:
    return [m["content"] for m in body["messages"]]


def _shown(first: int, last: int) -> list[str]:
    return [f"m{seq}" for seq in range(first, last + 1) if seq % 10 != 0]


def test_the_newest_page_comes_first_oldest_message_first(owner_client, long_chat):
    status, body = _get(owner_client, long_chat.id)
    assert status == 200 and len(body["messages"]) == 200
    assert _contents(body) == _shown(278, 500)[-200:]
    assert body["has_more"] is True and body["older_than"] == body["messages"][0]["id"]
    assert body["session_id"] == str(long_chat.id)  # the session fields are still there


def test_before_walks_back_to_the_first_message_without_gaps(owner_client, long_chat):
    seen, params = [], {"limit": 120}
    while True:
        status, body = _get(owner_client, long_chat.id, **params)
        assert status == 200 and len(body["messages"]) <= 120
        seen = _contents(body) + seen
        if not body["has_more"]:
            assert body["older_than"] is None
            break
        params = {"limit": 120, "before": body["older_than"]}
    assert seen == _shown(1, 500)


def test_before_a_hidden_message_still_pages_from_there(owner_client, long_chat):
    hidden = Message.objects.get(session=long_chat, seq=300)
    status, body = _get(owner_client, long_chat.id, before=hidden.id, limit=5)
    assert status == 200 and _contents(body) == ["m295", "m296", "m297", "m298", "m299"]


def test_a_small_chat_reads_whole_as_before(owner_client, session):
    Message.objects.create(session=session, seq=1, role="user", content="hi")
    Message.objects.create(session=session, seq=2, role="assistant", content="hello")
    status, body = _get(owner_client, session.id)
    assert status == 200 and _contents(body) == ["hi", "hello"]
    assert body["has_more"] is False and body["older_than"] is None


@pytest.mark.parametrize(
    "params, expected",
    [
        ({"limit": "0"}, "limit must be a whole number from 1 to 1000"),
        ({"limit": "1001"}, "limit must be a whole number from 1 to 1000"),
        ({"limit": "ten"}, "limit must be"),
        ({"limit": "-5"}, "limit must be"),
        ({"before": "abc"}, "before must be the integer id"),
        ({"before": "999999"}, "no message 999999 in this chat"),
    ],
)
def test_bad_before_or_limit_is_400_saying_what_to_send(owner_client, long_chat, params, expected):
    status, body = _get(owner_client, long_chat.id, **params)
    assert status == 400 and expected in body["error"]


def test_a_message_of_another_chat_is_not_a_cursor(owner_client, long_chat, owner):
    elsewhere = Session.objects.create(owner=owner, profile_id="secretary")
    foreign = Message.objects.create(session=elsewhere, seq=1, role="user", content="other chat")
    status, body = _get(owner_client, long_chat.id, before=foreign.id)
    assert status == 400 and f"no message {foreign.id} in this chat" in body["error"]


def test_another_users_session_is_404_whatever_the_paging(client, other_user, long_chat):
    client.force_login(other_user)
    first = Message.objects.filter(session=long_chat).order_by("-seq").first()
    for params in ({}, {"before": first.id}, {"limit": 5}):
        status, body = _get(client, long_chat.id, **params)
        assert status == 404 and "no session" in body["error"]
