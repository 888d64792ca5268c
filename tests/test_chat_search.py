"""GET /sessions?q=: full-text search over titles and displayed messages (SQLite FTS5 here),
best first, the user's own chats only, safe HTML snippets, FTS syntax treated as text."""

from __future__ import annotations

import json

import pytest
from django.db import connection

from sessions_app import search
from sessions_app.models import Message, Session

pytestmark = pytest.mark.django_db


def _chat(owner, title="", *texts, role="user", **flags) -> Session:
    session = Session.objects.create(owner=owner, profile_id="secretary", title=title)
    for seq, text in enumerate(texts, start=1):
        Message.objects.create(session=session, seq=seq, role=role if seq % 2 else "assistant", content=text, **flags)
    return session


def _search(client, q: str) -> list[dict]:
    response = client.get("/sessions", {"q": q})
    assert response.status_code == 200, response.content
    return json.loads(response.content)["sessions"]


class TestSearch:
    def test_it_finds_messages_and_titles_with_the_list_shape_and_a_snippet(self, owner, owner_client):
        by_text = _chat(owner, "Groceries", "remember to buy oat milk", "Noted: oat milk.")
        by_title = _chat(owner, "Oat recipes", "pancakes please")
        _chat(owner, "Unrelated", "the weather is nice")
        found = _search(owner_client, "oat")
        assert [s["session_id"] for s in found] == [str(by_title.id), str(by_text.id)]  # a title match ranks first
        listing = json.loads(owner_client.get("/sessions").content)["sessions"][0]
        assert set(found[0]) == set(listing) | {"snippet", "match_message_id"}
        assert found[0]["snippet"] == "<mark>Oat</mark> recipes" and found[0]["match_message_id"] is None
        assert "<mark>oat</mark> milk" in found[1]["snippet"]
        # The page opens a result at the message that matched.
        matched = Message.objects.get(session=by_text, content__startswith="remember")
        assert found[1]["match_message_id"] in {matched.id, Message.objects.get(session=by_text, seq=2).id}

    def test_every_word_must_match_and_prefixes_count(self, owner, owner_client):
        docker = _chat(owner, "", "my docker compose file is broken")
        _chat(owner, "", "compose a poem")
        assert [s["session_id"] for s in _search(owner_client, "dock compose")] == [str(docker.id)]
        assert _search(owner_client, "docker poem") == []

    def test_better_matches_come_first(self, owner, owner_client):
        weak = _chat(owner, "", "a long message about many things, gardening among them, and much more text here")
        strong = _chat(owner, "", "gardening gardening gardening")
        assert [s["session_id"] for s in _search(owner_client, "gardening")] == [str(strong.id), str(weak.id)]

    def test_only_displayed_user_and_assistant_messages_count(self, owner, owner_client):
        _chat(owner, "", "secretword hidden", in_display=False)
        tool = Session.objects.create(owner=owner, profile_id="secretary")
        Message.objects.create(session=tool, seq=1, role="tool", content="secretword from a tool")
        Message.objects.create(session=tool, seq=2, role="system", content="secretword error")
        assert _search(owner_client, "secretword") == []

    def test_the_index_follows_edits_hides_and_deletes(self, owner, owner_client):
        session = _chat(owner, "", "original wording")
        row = session.messages.get()
        row.content = "rewritten wording"
        row.save()
        assert _search(owner_client, "original") == []
        assert len(_search(owner_client, "rewritten")) == 1
        Message.objects.filter(pk=row.pk).update(in_display=False, in_context=False)  # an edit hid it
        assert _search(owner_client, "rewritten") == []
        Session.objects.filter(pk=session.pk).update(title="renamed chat")
        assert len(_search(owner_client, "renamed")) == 1
        owner_client.delete(f"/sessions/{session.id}")
        assert _search(owner_client, "renamed") == []
        if connection.vendor != "sqlite":
            return
        with connection.cursor() as cur:
            cur.execute(f"SELECT count(*) FROM {search.MESSAGE_FTS}")
            assert cur.fetchone()[0] == 0

    def test_an_answer_is_found_once_it_stops_streaming(self, owner, owner_client):
        session = _chat(owner, "", "tell me about herons")
        answer = Message.objects.create(session=session, seq=2, role="assistant", content="egrets and", status="partial")
        assert _search(owner_client, "egrets") == []  # still streaming: not indexed yet
        Message.objects.filter(pk=answer.pk).update(content="egrets and bitterns")  # a partial save
        assert _search(owner_client, "bitterns") == []
        Message.objects.filter(pk=answer.pk).update(content="egrets and bitterns, storks", status="complete")
        assert len(_search(owner_client, "storks")) == 1
        stopped = Message.objects.create(session=session, seq=3, role="assistant", content="cormorant", status="partial")
        Message.objects.filter(pk=stopped.pk).update(status="interrupted")  # a run stopped mid-answer
        assert len(_search(owner_client, "cormorant")) == 1
        Message.objects.filter(pk=stopped.pk).update(content="shag", status="partial")  # never happens, but stays true
        assert _search(owner_client, "cormorant") == [] and _search(owner_client, "shag") == []

    def test_it_is_per_user(self, owner, owner_client, other_user):
        _chat(other_user, "private plans", "private plans of mallory")
        assert _search(owner_client, "private") == []

    def test_snippets_escape_everything_but_the_marks(self, owner, owner_client):
        _chat(owner, "<b>bold</b> title", '<script>alert("x")</script> needle & <img src=x onerror=alert(1)>')
        snippet = _search(owner_client, "needle")[0]["snippet"]
        assert "<script>" not in snippet and "<img" not in snippet
        assert "&lt;script&gt;" in snippet and "<mark>needle</mark>" in snippet and "&amp;" in snippet
        title_snippet = _search(owner_client, "bold")[0]["snippet"]
        assert title_snippet == "&lt;b&gt;<mark>bold</mark>&lt;/b&gt; title"

    @pytest.mark.parametrize(
        "q",
        [
            '"',
            '"unbalanced',
            "*",
            "NEAR(a b",
            "a AND OR NOT",
            "^start",
            "col:umn",
            "(((",
            "-x",
            "'; DROP TABLE x; --",
            "ä ö ü",
        ],
    )
    def test_fts_syntax_is_plain_text(self, owner, owner_client, q):
        _chat(owner, "", "NEAR the start of a column, unbalanced text")
        found = _search(owner_client, q)
        assert isinstance(found, list)

    def test_fts_words_in_quotes_still_match(self, owner, owner_client):
        s = _chat(owner, "", "meet NEAR the station")
        assert [x["session_id"] for x in _search(owner_client, '"near" station*')] == [str(s.id)]

    def test_an_empty_query_is_the_plain_list_and_a_huge_one_is_400(self, owner, owner_client):
        _chat(owner, "", "anything")
        assert len(json.loads(owner_client.get("/sessions?q=").content)["sessions"]) == 1
        assert owner_client.get("/sessions", {"q": "x" * 501}).status_code == 400

    def test_anonymous_is_401(self, anon_client):
        assert anon_client.get("/sessions?q=x").status_code == 401

    @pytest.mark.skipif(connection.vendor != "sqlite", reason="the FTS5 index is SQLite's")
    def test_upgrading_drops_streaming_rows_from_an_older_index(self, owner, owner_client):
        session = _chat(owner, "", "question about lichens")
        answer = Message.objects.create(session=session, seq=2, role="assistant", content="x", status="partial")
        with connection.cursor() as cur:  # as the triggers before migration 0004 left it
            cur.execute(f"INSERT INTO {search.MESSAGE_FTS}(rowid, content, session_id) VALUES (%s, 'mosses', %s)",
                        [answer.pk, session.id.hex])
        assert len(_search(owner_client, "mosses")) == 1
        search.reinstall_message_triggers(connection)
        assert _search(owner_client, "mosses") == []
        assert len(_search(owner_client, "lichens")) == 1  # the rest of the index is kept
        Message.objects.filter(pk=answer.pk).update(content="mosses", status="complete")
        assert len(_search(owner_client, "mosses")) == 1

    def test_a_title_is_indexed_once_through_first_title_renames_and_delete(self, owner, owner_client):
        session = _chat(owner, "")  # a new chat: no title yet
        Session.objects.filter(pk=session.pk).update(title="first words about ferns")
        Session.objects.filter(pk=session.pk).update(title="first words about ferns")  # unchanged
        assert len(_search(owner_client, "ferns")) == 1
        Session.objects.filter(pk=session.pk).update(title="now about orchids")
        assert _search(owner_client, "ferns") == [] and len(_search(owner_client, "orchids")) == 1
        Session.objects.filter(pk=session.pk).update(title="")
        assert _search(owner_client, "orchids") == []
        Session.objects.filter(pk=session.pk).update(title="back to mosses")
        owner_client.delete(f"/sessions/{session.id}")
        assert _search(owner_client, "mosses") == []
        if connection.vendor == "sqlite":
            with connection.cursor() as cur:
                cur.execute(f"SELECT count(*) FROM {search.TITLE_FTS}")
                assert cur.fetchone()[0] == 0

    @pytest.mark.skipif(connection.vendor != "sqlite", reason="the FTS5 index is SQLite's")
    def test_upgrading_keeps_the_title_index(self, owner, owner_client):
        _chat(owner, "Kept title about lichens")
        search.reinstall_session_triggers(connection)  # migration 0005
        assert len(_search(owner_client, "lichens")) == 1

    @pytest.mark.skipif(connection.vendor != "sqlite", reason="the FTS5 index is SQLite's")
    def test_a_lost_index_is_rebuilt(self, owner, owner_client):
        _chat(owner, "Kept title", "kept words")
        with connection.cursor() as cur:
            cur.execute("DROP TRIGGER message_fts_ai")
            cur.execute(f"DELETE FROM {search.MESSAGE_FTS}")
        search.ensure_search_index(connection)  # what post_migrate does after a table rebuild
        assert len(_search(owner_client, "kept words")) == 1


class TestHighlight:
    def test_marks_whole_words_and_prefixes(self):
        assert search.highlight("Docker and dock", ["dock"]) == "<mark>Docker</mark> and <mark>dock</mark>"
        assert search.highlight("an ant", ["an"]) == "<mark>an</mark> ant"

    def test_unbalanced_markers_stay_balanced(self):
        assert search.marked_to_html("\ue000a < b") == "<mark>a &lt; b</mark>"
        assert search.marked_to_html("x\ue001y") == "xy"
