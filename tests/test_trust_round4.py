"""Trust, fourth round (issue 50): each attack as written and its variants.

1. Schedules in words, time zones and schedule edge values are a 400 saying what works (a tool
   error for the agent), never a 500 or a raw exception, and nothing is saved.
2. An embedding server that answers [0, 0, …] (or NaN, or values float32 cannot hold) for a
   passage or fact never breaks search: the vector is not stored, the text is found by its words,
   and vectors stored so before are skipped; other texts and other accounts are unaffected.
"""

from __future__ import annotations

import json
import math

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test import Client

from agent.registry import get_agent
from knowledge_app import vectors
from knowledge_app.models import Passage, VectorSpace
from knowledge_app.worker import worker
from memory_app.models import MemoryFact
from memory_app.search import search_facts
from memory_app.services import upsert_fact
from tests import llm_server
from routines_app.models import Routine
from sessions_app.models import UserSettings
from tools_app.context import current_user_id

YEARS_100 = "within the next 100 years"
ZONE_HINT = "IANA time zone such as Europe/Paris"


def _client(user) -> Client:
    client = Client(raise_request_exception=False)  # a 500 is an answer to check, not an exception
    client.force_login(user)
    return client


def _json(client: Client, method: str, path: str, data) -> tuple[int, dict]:
    response = getattr(client, method)(path, json.dumps(data), content_type="application/json")
    assert response["Content-Type"].startswith("application/json"), response.content[:200]
    return response.status_code, response.json()


SAYS_WHAT_WORKS = ("e.g.", "such as", "give", "one of")
ROUTINE = {"name": "Water", "instruction": "Remind me to water the plants.", "schedule": {"cron": "0 8 * * *"},
           "time_zone": "Europe/Berlin"}

# Too far ahead for a date: overflowed datetime before, in every spelling.
FAR_WORDS = ["in 600000 weeks", "in 99999999999999999999 weeks", "In 600000 Weeks.", "remind me in 600000 weeks",
             "in 99999999999999999999999 minutes", "in 5300 weeks", "in 40000 days", "in 999999999 hrs"]
# Not a zone: too long for a file name, a folder of the zone database, paths, a data file.
BAD_ZONES = ["x" * 5000, "x" * 65, "Europe", "America", "Europe/", "..", "../../etc/passwd", "zone.tab", "Mars/Olympus"]
BAD_ZONE_TYPES = [5, 1.5, True, ["Europe/Paris"], {"zone": "Europe/Paris"}]
BAD_SCHEDULES = [
    {"every_s": 10**30}, {"every_s": 1e308}, {"every_s": -5}, {"every_s": 0}, {"every_s": True}, {"every_s": "3600"},
    {"every_s": None}, {"every_s": 3600.5}, {"every_s": 366 * 86400 + 1},
    {"at": "10000-01-01T00:00:00"}, {"at": "+10000-01-01T00:00:00+00:00"}, {"at": "99999-01-01"},
    {"at": "9999-12-31T23:59:59-14:00"}, {"at": "9999-12-31T23:59:59"}, {"at": "0001-01-01T00:00:00+14:00"},
    {"at": "-0001-01-01"}, {"at": 5}, {"at": None}, {"at": "2001-01-01T08:00:00+00:00"},
    {"cron": "99999999999999999999 * * * *"}, {"cron": "0 0 31 2 *"}, {"cron": "*/0 * * * *"}, {"cron": 5},
    {"cron": ["0", "8", "*", "*", "*"]}, {"cron": "0 0 1 1 * 2020"},
    [], "every day", None, {"every_s": 3600, "cron": "0 8 * * *"},
]


@pytest.mark.django_db
class TestSchedulesInWords:
    @pytest.mark.parametrize("text", FAR_WORDS)
    def test_a_time_too_far_ahead_is_a_400_giving_the_range(self, owner, other_user, text):
        for user in (owner, other_user):
            response = _client(user).get("/routines/preview", {"text": text})
            assert response.status_code == 400, response.content[:300]
            assert YEARS_100 in response.json()["error"] and "in 20 minutes" in response.json()["error"]
        assert not Routine.objects.exists()

    def test_a_hundred_years_ahead_still_works(self, owner):
        response = _client(owner).get("/routines/preview", {"text": "in 5200 weeks"})
        assert response.status_code == 200 and response.json()["schedule"]["at"]

    @pytest.mark.parametrize("zone", BAD_ZONES)
    def test_a_bad_zone_in_the_preview_is_a_400_naming_a_good_one(self, owner, zone):
        response = _client(owner).get("/routines/preview", {"text": "every day at 8", "time_zone": zone})
        assert response.status_code == 400, response.content[:300]
        error = response.json()["error"]
        assert ZONE_HINT in error and len(error) < 300  # 5 000 characters are not echoed back

    @pytest.mark.parametrize("zone", BAD_ZONES + BAD_ZONE_TYPES)
    def test_a_bad_zone_creates_nothing(self, owner, zone):
        status, body = _json(_client(owner), "post", "/routines", {**ROUTINE, "time_zone": zone})
        assert status == 400 and "Europe/" in body["error"] and len(body["error"]) < 300
        assert not Routine.objects.exists()

    @pytest.mark.parametrize("zone", BAD_ZONES + BAD_ZONE_TYPES)
    def test_a_bad_zone_changes_nothing(self, owner, zone):
        client = _client(owner)
        status, created = _json(client, "post", "/routines", ROUTINE)
        assert status == 201
        status, body = _json(client, "patch", f"/routines/{created['id']}", {"time_zone": zone, "name": "Changed"})
        assert status == 400 and "Europe/" in body["error"]
        routine = Routine.objects.get()
        assert (routine.time_zone, routine.name, routine.schedule) == ("Europe/Berlin", "Water", {"cron": "0 8 * * *"})

    @pytest.mark.parametrize("zone", BAD_ZONES + BAD_ZONE_TYPES)
    def test_a_bad_zone_in_settings_changes_nothing(self, owner, other_user, zone):
        client = _client(owner)
        assert _json(client, "patch", "/settings", {"time_zone": "Asia/Tokyo"})[0] == 200
        status, body = _json(client, "patch", "/settings", {"time_zone": zone, "theme": "dark"})
        assert status == 400 and "Europe/" in body["error"] and len(body["error"]) < 300
        assert client.get("/settings").json()["time_zone"] == "Asia/Tokyo"
        assert UserSettings.objects.get(user=owner).theme != "dark"
        status, _ = _json(_client(other_user), "patch", "/settings", {"time_zone": zone})
        assert status == 400 and not UserSettings.objects.filter(user=other_user).exclude(time_zone="").exists()

    @pytest.mark.parametrize("schedule", BAD_SCHEDULES, ids=[str(s)[:40] for s in BAD_SCHEDULES])
    def test_edge_schedules_are_a_400_and_nothing_is_saved(self, owner, schedule):
        client = _client(owner)
        status, body = _json(client, "post", "/routines", {**ROUTINE, "schedule": schedule})
        assert status == 400 and body["error"]
        assert not Routine.objects.exists()
        status, created = _json(client, "post", "/routines", ROUTINE)
        status, body = _json(client, "patch", f"/routines/{created['id']}", {"schedule": schedule, "name": "Changed"})
        assert status == 400 and any(hint in body["error"] for hint in SAYS_WHAT_WORKS), body["error"]
        routine = Routine.objects.get()
        assert (routine.name, routine.schedule) == ("Water", {"cron": "0 8 * * *"})

    def test_the_longest_interval_is_named(self, owner):
        status, body = _json(_client(owner), "post", "/routines", {**ROUTINE, "schedule": {"every_s": 10**30}})
        assert status == 400 and "60 to 31622400 seconds" in body["error"]
        status, body = _json(_client(owner), "post", "/routines", {**ROUTINE, "schedule": {"at": "10000-01-01T00:00:00"}})
        assert status == 400 and YEARS_100 in body["error"]


@pytest.mark.django_db(transaction=True)
class TestTheToolSaysWhatWorks:
    async def _call(self, owner, **params) -> str:
        token = current_user_id.set(owner.id)
        try:
            result = await get_agent().tools.call("schedule_routine", {"name": "Far", "instruction": "x", **params})
        finally:
            current_user_id.reset(token)
        assert not result.success
        assert "Error" not in result.error and "failed:" not in result.error, result.error  # no raw exception
        return result.error

    @pytest.mark.parametrize("when", FAR_WORDS[:3])
    async def test_a_time_too_far_ahead(self, owner, when):
        error = await self._call(owner, when=when)
        assert error.startswith("not scheduled:") and YEARS_100 in error
        assert not await Routine.objects.aexists()

    @pytest.mark.parametrize("zone", ["x" * 5000, "Europe", "../../etc/passwd", "Mars/Olympus"])
    async def test_a_bad_zone(self, owner, zone):
        for schedule in ({"when": "every day at 8"}, {"cron": "0 8 * * *"}, {"every_s": 3600}):
            error = await self._call(owner, time_zone=zone, **schedule)
            assert error.startswith("not scheduled:") and ZONE_HINT in error and len(error) < 400
        assert not await Routine.objects.aexists()

    async def test_a_zone_that_is_not_text(self, owner):
        for zone in (5, ["Europe/Paris"]):
            error = await self._call(owner, time_zone=zone, when="every day at 8")
            assert "time_zone" in error and "string" in error  # the schema's check names the field
        assert not await Routine.objects.aexists()

    async def test_edge_values(self, owner):
        for params in ({"every_s": 10**30}, {"at": "10000-01-01T00:00:00"}, {"cron": "in 600000 weeks"}):
            error = await self._call(owner, **params)
            assert error.startswith("not scheduled:")
        assert not await Routine.objects.aexists()


# --- 2. vectors that point nowhere -------------------------------------------------------------
WAIT_S = 60
POISON = "poisoned"  # a text the hostile embedding server answers for with a bad vector
BAD_VECTORS = {
    "zeros": lambda dim: [0.0] * dim,
    "nan": lambda dim: [float("nan")] + [0.1] * (dim - 1),
    "infinity": lambda dim: [float("inf")] + [0.1] * (dim - 1),
    "tiny": lambda dim: [1e-30] * dim,  # float32 squares vanish: sqlite-vec's distance is -inf
    "huge": lambda dim: [3e38] * dim,  # float32's sum of squares overflows
    "past float32": lambda dim: [1e39] * dim,
}

NO_DIRECTION = {"zeros", "nan", "infinity"}


@pytest.fixture
def hostile_embeddings(embed, monkeypatch):
    """The test LLM server answering /api/embed (and /v1/embeddings) with `bad(dim)` for any
    text that says POISON: what an attacker's embedding server, or a broken one, sends."""
    honest = llm_server.embed_text
    chosen = {"bad": BAD_VECTORS["zeros"]}

    def answer(text: str) -> list[float]:
        return chosen["bad"](llm_server.EMBED_DIM) if POISON in text.lower() else honest(text)

    monkeypatch.setattr(llm_server, "embed_text", answer)
    return chosen


def _index(client: Client, name: str, text: str) -> None:
    response = client.post("/knowledge", {"file": SimpleUploadedFile(name, text.encode())})
    assert response.status_code == 201, response.content
    assert worker.wait_idle(WAIT_S)
    assert client.get(f"/knowledge/{response.json()['id']}").json()["status"] == "ready"


def _search(client: Client, query: str) -> list[dict]:
    response = client.get("/knowledge/search", {"q": query, "k": 10})
    assert response.status_code == 200, response.content[:500]
    return response.json()["results"]


def _stored_vector_ids(kind: str) -> set[int]:
    found = set()
    with connection.cursor() as cur:
        for space in VectorSpace.objects.all():
            key = "rowid" if connection.vendor == "sqlite" else "id"
            cur.execute(f"SELECT {key} FROM {vectors.table(space, kind)}")
            found |= {int(row[0]) for row in cur.fetchall()}
    return found


def _store_raw(kind: str, item_id: int, owner_id: int, vector: list[float]) -> None:
    """A vector written straight into the index, as a database filled before the check has it."""
    space = VectorSpace.objects.get()
    name = vectors.table(space, kind)
    with connection.cursor() as cur:
        if connection.vendor == "sqlite":
            import sqlite_vec

            blob = sqlite_vec.serialize_float32(vector)
            cur.execute(f"DELETE FROM {name} WHERE rowid = %s", [item_id])
            cur.execute(f"INSERT INTO {name}(rowid, owner_id, coarse, embedding) "
                        f"VALUES (%s, %s, {vectors._coarse('%s', space.dim)}, %s)", [item_id, owner_id, blob, blob])
        else:
            cur.execute(f"DELETE FROM {name} WHERE id = %s", [item_id])
            literal = "[" + ",".join(repr(float(x)) for x in vector) + "]"
            cur.execute(f"INSERT INTO {name}(id, owner_id, embedding) VALUES (%s, %s, %s::vector)",
                        [item_id, owner_id, literal])


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("knowledge_state")
class TestVectorsThatPointNowhere:
    @pytest.mark.parametrize("bad", list(BAD_VECTORS))
    def test_a_passage_embedded_to_a_bad_vector_is_found_by_its_words(self, owner, other_user, hostile_embeddings,
                                                                       settings, bad):
        hostile_embeddings["bad"] = BAD_VECTORS[bad]
        owner_client, mallory = _client(owner), _client(other_user)
        _index(owner_client, "coffee.txt", "I drink a double espresso every morning before work.")
        _index(owner_client, "garden.txt", "The poisoned ivy by the fence must be cut in spring.")
        _index(mallory, "mallory.txt", "Mallory drinks a cappuccino at noon.")
        poisoned = Passage.objects.get(text__icontains=POISON)
        # No direction: no vector, nothing to break a search. Tiny or huge numbers have one:
        # stored scaled to length 1, where float32 holds them.
        assert (poisoned.pk in _stored_vector_ids("passage")) is (bad not in NO_DIRECTION)
        assert "espresso" in _search(owner_client, "coffee")[0]["text"]  # meaning still works for the rest
        assert any("fence" in hit["text"] for hit in _search(owner_client, "ivy fence"))  # the words find it
        assert [h["text"] for h in _search(owner_client, "poisoned ivy")][:1] == [poisoned.text]  # query itself bad
        assert "cappuccino" in _search(mallory, "coffee")[0]["text"]
        assert all("fence" not in hit["text"] for hit in _search(mallory, "ivy fence"))

    def test_the_openai_compatible_server_too(self, owner, hostile_embeddings, settings, embed):
        settings.EMBEDDING_BASE_URL = embed.openai_url
        client = _client(owner)
        _index(client, "coffee.txt", "I drink a double espresso every morning before work.")
        _index(client, "garden.txt", "The poisoned ivy by the fence must be cut in spring.")
        assert "espresso" in _search(client, "coffee")[0]["text"]
        assert any("fence" in hit["text"] for hit in _search(client, "ivy fence"))
        assert {e["path"] for e in embed.embeds} == {"/v1/embeddings"}

    @pytest.mark.parametrize("bad", ["zeros", "nan", "tiny", "huge"])
    def test_bad_vectors_stored_before_are_skipped(self, owner, other_user, embed, bad):
        owner_client, mallory = _client(owner), _client(other_user)
        _index(owner_client, "coffee.txt", "I drink a double espresso every morning before work.")
        _index(owner_client, "tea.txt", "Green tea in the afternoon keeps me awake.")
        _index(mallory, "mallory.txt", "Mallory drinks a cappuccino at noon.")
        tea = Passage.objects.get(text__startswith="Green tea")
        _store_raw("passage", tea.pk, owner.pk, BAD_VECTORS[bad](llm_server.EMBED_DIM))
        hits = _search(owner_client, "coffee")
        assert "espresso" in hits[0]["text"]
        assert all(math.isfinite(hit["score"]) for hit in hits)
        assert any("Green tea" in hit["text"] for hit in _search(owner_client, "green tea"))  # by its words
        if bad == "tiny":  # -inf distance once put it first for every question
            assert "Green tea" not in hits[0]["text"]
        assert "cappuccino" in _search(mallory, "coffee")[0]["text"]
        # Every vector of the owner's bad: still a 200.
        espresso = Passage.objects.get(text__contains="espresso")
        _store_raw("passage", espresso.pk, owner.pk, [0.0] * llm_server.EMBED_DIM)
        assert _search(owner_client, "coffee") == [] or all("cappuccino" not in h["text"] for h in _search(owner_client, "coffee"))
        assert "espresso" in _search(owner_client, "espresso")[0]["text"]

    def test_vectors_are_stored_as_unit_vectors_and_those_pointing_nowhere_are_not(self):
        assert vectors.unit([3.0, 4.0]) == [0.6, 0.8]
        assert vectors.unit([3e38, 4e38]) == pytest.approx([0.6, 0.8])
        assert vectors.unit([3e-320, 4e-320]) == pytest.approx([0.6, 0.8], rel=1e-3)
        for bad in ([], [0.0, 0.0], [0.0, -0.0], [float("nan"), 1.0], [float("inf"), 1.0], ["x", 1.0], None):
            assert vectors.unit(bad) is None


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("knowledge_state")
class TestFactsByMeaning:
    def _save(self, owner_id: int, key: str, value: str) -> MemoryFact:
        upsert_fact(owner_id, "preferences", key, value)
        assert worker.wait_idle(WAIT_S)
        return MemoryFact.objects.get(owner_id=owner_id, key=key)

    @pytest.mark.parametrize("bad", ["zeros", "nan", "tiny"])
    def test_a_fact_embedded_to_a_bad_vector_is_found_by_its_words(self, owner, other_user, hostile_embeddings, bad):
        hostile_embeddings["bad"] = BAD_VECTORS[bad]
        self._save(owner.id, "morning drink", "a double espresso")
        poisoned = self._save(owner.id, "plant", "the poisoned ivy by the fence")
        self._save(other_user.id, "drink", "cappuccino")
        assert (poisoned.pk in _stored_vector_ids("fact")) is (bad not in NO_DIRECTION)
        assert [f.key for f in search_facts(owner.id, "coffee")] == ["morning drink"]  # by meaning
        assert [f.key for f in search_facts(owner.id, "ivy")] == ["plant"]  # by words
        assert [f.key for f in search_facts(other_user.id, "coffee")] == ["drink"]

    def test_a_bad_fact_vector_stored_before_leaves_the_others_found_by_meaning(self, owner, other_user, embed):
        self._save(owner.id, "morning drink", "a double espresso")
        tea = self._save(owner.id, "afternoon", "green tea with lemon")
        self._save(other_user.id, "drink", "cappuccino")
        _store_raw("fact", tea.pk, owner.pk, [0.0] * llm_server.EMBED_DIM)
        assert [f.key for f in search_facts(owner.id, "coffee")] == ["morning drink"]
        assert [f.key for f in search_facts(owner.id, "lemon")] == ["afternoon"]
        assert [f.key for f in search_facts(other_user.id, "coffee")] == ["drink"]
