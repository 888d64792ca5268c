"""GET /sessions/<id>/export?format=md|json and POST /sessions/import: attachments, full
fidelity, round trip, validation, size cap, ownership."""

from __future__ import annotations

import json

import pytest

from sessions_app.models import Message, Session

pytestmark = pytest.mark.django_db


@pytest.fixture
def chat(owner) -> Session:
    session = Session.objects.create(owner=owner, profile_id="server_admin", title="Disk <check>", pinned=True)
    rows = [
        dict(role="user", content="how full is the disk?", images=["aGVsbG8="]),
        dict(
            role="assistant",
            content="",
            thinking="I should run df",
            tool_calls=[{"id": "c1", "name": "terminal", "arguments": {"command": "df -h"}}],
        ),
        dict(
            role="tool",
            content="/dev/sda1 40% ```",
            tool_call_id="c1",
            name="terminal",
            meta={"files": [{"name": "df.txt", "url": "/x", "mime": "text/plain"}]},
        ),
        dict(role="user", content="[image from terminal]", in_display=False, images=["aGVsbG8="]),
        dict(role="assistant", content="The disk is **40%** full.", thinking="easy"),
        dict(role="user", content="[Summary]", is_summary=True, in_display=False),
        dict(role="system", content="Stopped.", in_context=False, status="interrupted", meta={"kind": "stopped"}),
    ]
    for seq, row in enumerate(rows, start=1):
        Message.objects.create(session=session, seq=seq, **row)
    return session


def _export(client, session_id, fmt="json"):
    return client.get(f"/sessions/{session_id}/export", {"format": fmt})


def _without_ids(messages: list[dict]) -> list[dict]:
    return [{k: v for k, v in m.items() if k != "id"} for m in messages]


class TestExport:
    def test_json_is_a_full_fidelity_attachment(self, owner_client, chat):
        response = _export(owner_client, chat.id)
        assert response.status_code == 200
        assert response["Content-Disposition"] == f'attachment; filename="navi-disk-check-{str(chat.id)[:8]}.json"'
        data = json.loads(response.content)
        assert data["format"] == "navi.session" and data["version"] == 1
        assert data["session"]["title"] == "Disk <check>" and data["session"]["profile_id"] == "server_admin"
        assert data["session"]["pinned"] is True
        assert len(data["messages"]) == 7
        fields = {
            "id",
            "seq",
            "role",
            "content",
            "thinking",
            "images",
            "tool_calls",
            "tool_call_id",
            "name",
            "is_summary",
            "in_display",
            "in_context",
            "status",
            "meta",
            "created_at",
            "version_of",
            "answer_of",
            "selected",
            "parked_by",
            "parked_display",
            "parked_context",
        }
        assert all(set(m) == fields for m in data["messages"])
        assert data["messages"][1]["tool_calls"][0]["arguments"] == {"command": "df -h"}

    def test_markdown_shows_the_chat_with_thinking_and_tools_folded(self, owner_client, chat):
        response = _export(owner_client, chat.id, "md")
        assert response.status_code == 200
        assert response["Content-Type"].startswith("text/markdown")
        assert response["Content-Disposition"].endswith('.md"')
        text = response.content.decode()
        assert text.startswith("# Disk <check>\n")
        assert "<details><summary>Thinking</summary>" in text
        assert "<details><summary>Tool call: terminal</summary>" in text
        assert '"command": "df -h"' in text
        assert "````\n/dev/sda1 40% ```\n````" in text  # a fence longer than the backticks inside
        assert "The disk is **40%** full." in text
        assert "[Summary]" not in text and "[image from terminal]" not in text  # display rows only
        assert "(1 image attached)" in text and "> **Stopped:** Stopped." in text

    def test_bad_format_foreign_and_unknown_sessions(self, owner_client, chat, client, other_user):
        assert _export(owner_client, chat.id, "pdf").status_code == 400
        assert _export(owner_client, "not-a-uuid").status_code == 404
        client.force_login(other_user)
        assert _export(client, chat.id).status_code == 404

    def test_anonymous_is_401(self, anon_client, chat):
        assert _export(anon_client, chat.id).status_code == 401


class TestImport:
    def test_round_trip(self, owner_client, chat, owner):
        exported = json.loads(_export(owner_client, chat.id).content)
        response = owner_client.post("/sessions/import", exported, content_type="application/json")
        assert response.status_code == 201, response.content
        body = json.loads(response.content)
        assert body["session_id"] != str(chat.id) and body["message_count"] == 7
        # Marked as imported and listed first (issue #38); everything else as exported.
        assert body["profile_id"] == "server_admin" and body["title"] == "Disk <check> (imported)"
        new = Session.objects.get(pk=body["session_id"])
        assert new.owner == owner
        assert owner_client.get("/sessions").json()["sessions"][0]["id"] == str(new.id)
        again = json.loads(_export(owner_client, new.id).content)
        assert _without_ids(again["messages"]) == _without_ids(exported["messages"])
        changed = {"id", "title", "title_source", "last_active"}
        assert {k: v for k, v in again["session"].items() if k not in changed} == {
            k: v for k, v in exported["session"].items() if k not in changed
        }
        assert again["session"]["title_source"] == "user"  # the mark is not replaced by a generated title

    def test_it_belongs_to_the_importer_with_a_default_profile_when_unknown(
        self, owner_client, chat, client, other_user
    ):
        exported = json.loads(_export(owner_client, chat.id).content)
        exported["session"]["profile_id"] = "pirate"
        client.force_login(other_user)
        response = client.post("/sessions/import", exported, content_type="application/json")
        assert response.status_code == 201
        new = Session.objects.get(pk=json.loads(response.content)["session_id"])
        assert new.owner == other_user and new.profile_id == "secretary"
        assert Session.objects.filter(owner=other_user).count() == 1

    def test_a_partial_answer_comes_back_interrupted(self, owner_client):
        data = {
            "format": "navi.session",
            "version": 1,
            "session": {},
            "messages": [{"seq": 1, "role": "assistant", "content": "half", "status": "partial"}],
        }
        response = owner_client.post("/sessions/import", data, content_type="application/json")
        assert response.status_code == 201
        assert Message.objects.get().status == "interrupted"

    @pytest.mark.parametrize(
        "body,expected",
        [
            ("{nope", "not valid JSON"),
            ("[]", "JSON object"),
            ({"format": "other"}, "not a Navi export"),
            ({"format": "navi.session", "version": 9}, "unsupported export version"),
            ({"format": "navi.session", "version": 1, "session": [], "messages": []}, '"session" must be an object'),
            ({"format": "navi.session", "version": 1, "session": {}, "messages": {}}, '"messages" must be a list'),
            (
                {"format": "navi.session", "version": 1, "session": {}, "messages": [{"seq": 1, "role": "robot"}]},
                "messages[0].role",
            ),
            (
                {"format": "navi.session", "version": 1, "session": {}, "messages": [{"seq": 0, "role": "user"}]},
                "messages[0].seq",
            ),
            (
                {
                    "format": "navi.session",
                    "version": 1,
                    "session": {},
                    "messages": [{"seq": 1, "role": "user"}, {"seq": 1, "role": "user"}],
                },
                "unique",
            ),
            (
                {
                    "format": "navi.session",
                    "version": 1,
                    "session": {},
                    "messages": [{"seq": 1, "role": "user", "content": 5}],
                },
                "content must be a string",
            ),
            (
                {
                    "format": "navi.session",
                    "version": 1,
                    "session": {},
                    "messages": [{"seq": 1, "role": "user", "images": [1]}],
                },
                "images",
            ),
            (
                {
                    "format": "navi.session",
                    "version": 1,
                    "session": {},
                    "messages": [{"seq": 1, "role": "user", "tool_calls": ["x"]}],
                },
                "tool_calls",
            ),
            (
                {
                    "format": "navi.session",
                    "version": 1,
                    "session": {},
                    "messages": [{"seq": 1, "role": "user", "created_at": "yesterday"}],
                },
                "ISO 8601",
            ),
            (
                {"format": "navi.session", "version": 1, "session": {"title": "x" * 201}, "messages": []},
                "session.title",
            ),
            ({"format": "navi.session", "version": 1, "session": {"pinned": "yes"}, "messages": []}, "session.pinned"),
        ],
    )
    def test_malformed_exports_are_400_and_create_nothing(self, owner_client, body, expected):
        payload = body if isinstance(body, str) else json.dumps(body)
        response = owner_client.post("/sessions/import", payload, content_type="application/json")
        assert response.status_code == 400, response.content
        assert expected in json.loads(response.content)["error"]
        assert Session.objects.count() == 0

    def test_an_oversized_export_is_413(self, owner_client, settings):
        settings.SESSION_IMPORT_MAX_MB = 1
        big = {
            "format": "navi.session",
            "version": 1,
            "session": {},
            "messages": [{"seq": 1, "role": "user", "content": "x" * (1024 * 1024 + 10)}],
        }
        response = owner_client.post("/sessions/import", big, content_type="application/json")
        assert response.status_code == 413
        assert "SESSION_IMPORT_MAX_MB" in json.loads(response.content)["error"]
        assert Session.objects.count() == 0

    def test_it_needs_login_csrf_and_post(self, anon_client, owner):
        from django.test import Client

        assert anon_client.post("/sessions/import", {}, content_type="application/json").status_code == 401
        csrf_client = Client(enforce_csrf_checks=True)
        csrf_client.force_login(owner)
        assert csrf_client.post("/sessions/import", {}, content_type="application/json").status_code == 403
        csrf_client.force_login(owner)
        assert csrf_client.get("/sessions/import").status_code == 405


class TestImportLimits:
    def test_deeply_nested_json_is_400_naming_the_problem(self, owner_client):
        body = '{"format": "navi.session", "version": 1, "session": {}, "messages": [' + "[" * 100_000 + "]" * 100_000 + "]}"
        response = owner_client.post("/sessions/import", body, content_type="application/json")
        assert response.status_code == 400, response.content
        assert "nested too deeply" in json.loads(response.content)["error"]
        assert Session.objects.count() == 0

    def test_deeply_nested_json_elsewhere_is_400_too(self, owner_client):
        body = "[" * 100_000 + "]" * 100_000
        response = owner_client.patch("/settings", body, content_type="application/json")
        assert response.status_code == 400 and "nested too deeply" in json.loads(response.content)["error"]

    def test_many_messages_keep_their_order_and_content(self, owner_client, owner):
        count = 20_000
        messages = [
            {
                "seq": count - i,  # listed newest first: the import orders by seq
                "role": "user" if i % 2 else "assistant",
                "content": f"message {count - i} ✓",
                "tool_calls": [{"name": "terminal", "arguments": {"n": i}}] if i % 1000 == 0 else [],
                "meta": {"kind": "note"} if i % 777 == 0 else {},
                "in_display": i % 10 != 3,
                "created_at": "2026-01-02T03:04:05+00:00",
            }
            for i in range(count)
        ]
        data = {"format": "navi.session", "version": 1, "session": {"title": "long"}, "messages": messages}
        response = owner_client.post("/sessions/import", data, content_type="application/json")
        assert response.status_code == 201, response.content
        assert json.loads(response.content)["message_count"] == count
        rows = list(Message.objects.filter(session_id=json.loads(response.content)["session_id"]).order_by("id"))
        assert [r.seq for r in rows] == list(range(1, count + 1))  # stored in seq order
        by_seq = {m["seq"]: m for m in messages}
        for row in rows:
            sent = by_seq[row.seq]
            assert (row.content, row.role, row.in_display) == (sent["content"], sent["role"], sent["in_display"])
            assert row.tool_calls == sent["tool_calls"] and row.meta == sent["meta"]
            assert row.created_at.isoformat() == "2026-01-02T03:04:05+00:00"

    def test_a_bad_message_deep_in_a_long_import_creates_nothing(self, owner_client):
        messages = [{"seq": i + 1, "role": "user", "content": "x"} for i in range(5000)]
        messages[4321]["role"] = "pirate"
        data = {"format": "navi.session", "version": 1, "session": {}, "messages": messages}
        response = owner_client.post("/sessions/import", data, content_type="application/json")
        assert response.status_code == 400 and "messages[4321].role" in json.loads(response.content)["error"]
        assert Session.objects.count() == 0 and Message.objects.count() == 0
