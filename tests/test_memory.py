"""Long-term memory: extraction parsing, staleness, the background trigger, search, the tools,
injection into every entry point, and `memory_saved` frames."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.core.management import call_command
from django.utils import timezone

from agent.memory import extraction
from agent.memory import tasks as memory_tasks
from agent.registry import get_agent
from jobs_app import queue
from jobs_app.worker import drain
from memory_app.extraction import parse_facts, stale_sessions
from memory_app.models import MemoryFact, MemorySummary, SessionMemoryState
from memory_app.search import search_facts
from memory_app.services import upsert_fact
from sessions_app.models import Message, Session
from tests.llm_server import Rule, Turn
from tools_app.context import current_chat_session_id, current_event_sink, current_user_id


def _session(owner, idle_minutes: float = 45, **kw) -> Session:
    s = Session.objects.create(owner=owner, profile_id="secretary", **kw)
    Session.objects.filter(pk=s.pk).update(last_active=timezone.now() - timedelta(minutes=idle_minutes))
    s.refresh_from_db()
    return s


def _say(session: Session, *pairs: tuple[str, str]) -> None:
    seq = 0
    for role, content in pairs:
        seq += 1
        Message.objects.create(session=session, seq=seq, role=role, content=content)


class TestParsing:
    def test_it_parses_good_lines_with_bullets_numbers_quotes_and_spaces(self):
        parsed = parse_facts(
            "preferences: editor = neovim\n"
            "- projects : navi =  a Django agent \n"
            "2. **environment: os = \"Debian 12\"**\n"
            "* 'people': 'wife' = 'Anna'\n"
            "  1) work: employer = ACME\n"
        )
        assert parsed.facts == [
            ("preferences", "editor", "neovim"),
            ("projects", "navi", "a Django agent"),
            ("environment", "os", "Debian 12"),
            ("people", "wife", "Anna"),
            ("work", "employer", "ACME"),
        ]
        assert parsed.malformed == 0

    def test_it_skips_and_counts_malformed_lines(self):
        parsed = parse_facts("Here are the facts:\npreferences: editor = vim\nno separator here\nkey = value\n: x = y\n\nNONE")
        assert parsed.facts == [("preferences", "editor", "vim")]
        assert parsed.malformed == 4

    def test_a_duplicate_keeps_the_last_value(self):
        parsed = parse_facts("preferences: Editor = vim\nPreferences:  editor = neovim")
        assert parsed.facts == [("preferences", "editor", "neovim")]

    def test_it_keeps_unicode(self):
        parsed = parse_facts("• personal: город = Санкт-Петербург\n- préférences: café = noir ☕\nfood: dish = 寿司")
        assert parsed.facts == [
            ("personal", "город", "Санкт-Петербург"),
            ("préférences", "café", "noir ☕"),
            ("food", "dish", "寿司"),
        ]

    def test_value_may_contain_colons_and_equals(self):
        parsed = parse_facts("environment: nas url = http://nas.local:5000/?a=b")
        assert parsed.facts == [("environment", "nas url", "http://nas.local:5000/?a=b")]


@pytest.mark.django_db
class TestStaleness:
    def test_idle_and_never_extracted_is_stale(self, owner):
        stale = _session(owner, idle_minutes=45)
        _session(owner, idle_minutes=5)
        assert list(stale_sessions()) == [stale]

    def test_extracted_after_last_activity_is_not_stale_until_new_activity(self, owner):
        s = _session(owner, idle_minutes=45)
        SessionMemoryState.objects.create(session=s, extracted_at=timezone.now() - timedelta(minutes=40))
        assert list(stale_sessions()) == []
        Session.objects.filter(pk=s.pk).update(last_active=timezone.now() - timedelta(minutes=35))
        assert list(stale_sessions()) == [s]

    def test_it_filters_by_owner(self, owner, other_user):
        mine = _session(owner)
        _session(other_user)
        assert list(stale_sessions(owner_id=owner.id)) == [mine]


@pytest.mark.django_db
class TestExtraction:
    def test_it_upserts_facts_regenerates_the_summary_and_marks_the_session(self, owner, llm):
        s = _session(owner)
        _say(s, ("user", "I use neovim and live in Lyon"), ("assistant", "Noted!"))
        upsert_fact(owner.id, "preferences", "editor", "vim")
        llm.add_rule(Rule(match="Conversation:", turns=[Turn(content="preferences: editor = neovim\nbad line\npersonal: city = Lyon")]))
        llm.add_rule(Rule(match="preferences: editor", system="narrative summary", turns=[Turn(content="The user lives in Lyon.")]))
        sent = []
        result = extraction.extract_session(s, notify=lambda sid, fact: sent.append((sid, fact)))
        assert (len(result.facts), result.saved, result.malformed) == (2, 2, 1)
        facts = {(f.category, f.key): f.value for f in MemoryFact.objects.filter(owner=owner)}
        assert facts == {("preferences", "editor"): "neovim", ("personal", "city"): "Lyon"}
        assert MemorySummary.objects.get(owner=owner).content == "The user lives in Lyon."
        assert SessionMemoryState.objects.filter(session=s).exists()
        assert sent == [(str(s.pk), {"category": "preferences", "key": "editor", "value": "neovim"}),
                        (str(s.pk), {"category": "personal", "key": "city", "value": "Lyon"})]
        assert llm.requests[0]["think"] is False
        assert list(stale_sessions()) == []

    def test_an_llm_failure_leaves_the_session_stale(self, owner, llm):
        s = _session(owner)
        _say(s, ("user", "hello"))
        llm.script(Turn(status=500, error="boom"))
        assert extraction.extract_stale_sessions(owner.id) == 0
        assert list(stale_sessions()) == [s]

    def test_the_command_prints_progress_and_a_count(self, owner, llm, capsys):
        s = _session(owner, title="chat about editors")
        _say(s, ("user", "I use emacs"))
        _session(owner, idle_minutes=1)  # fresh: not processed without --all
        llm.add_rule(Rule(match="Conversation:", turns=[Turn(content="preferences: editor = emacs")]))
        call_command("extract_memory", "--dry-run")
        out = capsys.readouterr().out
        assert "[1/1]" in out and "preferences: editor = emacs" in out and "1 session(s) processed" in out
        assert not MemoryFact.objects.exists()  # dry run
        call_command("extract_memory", "--session", str(s.pk))
        assert MemoryFact.objects.get(owner=owner).value == "emacs"
        call_command("extract_memory", "--all")
        assert "2 session(s) processed" in capsys.readouterr().out


@pytest.mark.django_db(transaction=True)
class TestBackgroundTrigger:
    """A new chat queues an extraction job when some of the owner's chats are stale; a job
    worker runs it (here: the engine's worker loop, jobs_app.worker.drain)."""

    def test_creating_a_session_queues_extraction_and_does_not_run_it(self, owner, owner_client, llm):
        _session(owner)
        response = owner_client.post("/sessions", {"new": True}, content_type="application/json")
        assert response.status_code == 201
        assert queue.pending(memory_tasks.extract_memory, owner_id=owner.pk)  # queued, for a worker
        assert not llm.requests  # the web process never asks the model for it
        owner_client.post("/sessions", {}, content_type="application/json")
        assert queue.rows(memory_tasks.extract_memory, owner_id=owner.pk).count() == 1  # once

    def test_the_background_job_extracts_stale_sessions(self, owner, owner_client, llm, settings):
        settings.MEMORY_EXTRACTION_IDLE_S = 0
        s = _session(owner)
        _say(s, ("user", "my dog is called Rex"))
        llm.add_rule(Rule(match="Conversation:", turns=[Turn(content="people: dog = Rex")]))
        assert owner_client.post("/sessions", {}, content_type="application/json").status_code == 201
        assert drain(30)
        assert MemoryFact.objects.get(owner=owner, key="dog").value == "Rex"
        assert llm.requests[0]["options"]["num_predict"] == 512  # LLM_MAX_EXTRACTION_TOKENS
        assert llm.requests[1]["options"]["num_predict"] == 1024  # the summary: LLM_MAX_SUMMARY_TOKENS

    def test_it_waits_until_the_owner_has_been_idle(self, owner, owner_client, llm, settings):
        settings.MEMORY_EXTRACTION_IDLE_S = 1.5
        _say(_session(owner), ("user", "my cat is called Tom"))
        started = timezone.now()
        assert owner_client.post("/sessions", {}, content_type="application/json").status_code == 201
        assert drain(30)
        first_call = (timezone.now() - started).total_seconds()
        assert llm.requests and first_call >= 1.5  # not beside the owner's first message

    def test_it_never_runs_beside_a_turn_of_the_owner(self, owner, owner_client, llm, settings):
        settings.MEMORY_EXTRACTION_IDLE_S = 0
        _say(_session(owner), ("user", "my cat is called Tom"))
        busy = _session(owner, idle_minutes=0, active_run_id="run-1", active_run_heartbeat=timezone.now())
        assert owner_client.post("/sessions", {}, content_type="application/json").status_code == 201
        assert not drain(1.5)  # the turn is running: the job defers itself, no call
        assert not llm.requests and queue.pending(memory_tasks.extract_memory, owner_id=owner.pk)
        Session.objects.filter(pk=busy.pk).update(active_run_id="", active_run_heartbeat=None)
        assert drain(20) and llm.requests

    def test_a_turn_that_starts_makes_a_running_extraction_give_way(self, owner, owner_client, llm, settings, caplog):
        settings.MEMORY_EXTRACTION_IDLE_S = 0
        stale = _session(owner)
        _say(stale, ("user", "my cat is called Tom"))
        llm.add_rule(Rule(match="Conversation:", turns=[Turn(content="people: cat = Tom ", endless=True, delay=0.05)]))
        assert owner_client.post("/sessions", {}, content_type="application/json").status_code == 201
        worker = threading.Thread(target=drain, args=(20,))  # the worker's loop beside this "owner"
        worker.start()
        assert llm.wait_for_requests(1, timeout=10)
        Session.objects.filter(pk=stale.pk).update(active_run_id="run-2", active_run_heartbeat=timezone.now())
        assert llm.wait_for_disconnect(timeout=5)  # the call was abandoned: the slot is free for the turn
        worker.join(30)
        assert not MemoryFact.objects.exists() and list(stale_sessions()) == [stale]
        assert "gave way" in caplog.text

    def test_extraction_is_one_call_at_a_time_and_has_its_own_wording(self, owner, other_user, llm, settings, caplog):
        from django.test import Client

        settings.MEMORY_EXTRACTION_IDLE_S = 0
        for user in (owner, other_user):
            for _ in range(3):
                _say(_session(user), ("user", f"I am {user.username}"))
        llm.add_rule(Rule(match="Conversation:", turns=[Turn(content="personal: name = x", first_delay=0.1)]))
        llm.script(Turn(content="half an answ", no_finish=True))  # the first call fails like llama-cpp-python
        for user in (owner, other_user):
            client = Client()
            client.force_login(user)
            assert client.post("/sessions", {}, content_type="application/json").status_code == 201
        assert drain(30)
        assert len([r for r in llm.requests if "Conversation:" in r["messages"][-1]["content"]]) == 6
        assert llm.max_active == 1  # a single-slot server is never asked twice at once
        assert "did not finish" in caplog.text and "partial answer" not in caplog.text
        assert len(list(stale_sessions())) == 1  # the failed one stays stale for the next trigger

    def test_no_job_is_queued_when_nothing_is_stale(self, owner, owner_client):
        assert owner_client.post("/sessions", {}, content_type="application/json").status_code == 201
        assert not queue.rows(memory_tasks.extract_memory).exists()


@pytest.mark.django_db
class TestSearch:
    def test_it_ranks_and_ors_terms_and_is_per_user(self, owner, other_user):
        upsert_fact(owner.id, "preferences", "editor", "neovim with lua config")
        upsert_fact(owner.id, "projects", "navi", "python django agent")
        upsert_fact(owner.id, "environment", "python version", "python 3.11 on debian")
        upsert_fact(owner.id, "people", "wife", "Anna")
        upsert_fact(other_user.id, "environment", "python", "secret python fact")
        keys = [f.key for f in search_facts(owner.id, "python debian")]
        assert keys[0] == "python version"  # matches both terms, one in the key
        assert set(keys) == {"python version", "navi"}
        assert {f.key for f in search_facts(owner.id, "anna neovim")} == {"wife", "editor"}
        assert search_facts(owner.id, "nothing-matches-this") == []
        assert search_facts(owner.id, '"*) OR (') == []  # FTS syntax is not interpreted

    def test_the_limit_is_honoured_and_defaults_to_15(self, owner):
        for i in range(30):
            upsert_fact(owner.id, "notes", f"item {i}", "common word")
        assert len(search_facts(owner.id, "common")) == 15
        assert len(search_facts(owner.id, "common", limit=4)) == 4

    def test_long_terms_match_as_prefixes_short_ones_as_words(self, owner):
        upsert_fact(owner.id, "environment", "language", "python 3.11")
        upsert_fact(owner.id, "people", "initial", "a")
        assert [f.key for f in search_facts(owner.id, "pyth")] == ["language"]
        assert search_facts(owner.id, "py") == []  # two letters: whole words only
        assert [f.key for f in search_facts(owner.id, "a")] == ["initial"]

    def test_a_very_common_term_ranks_only_the_newest_matches(self, owner, other_user, monkeypatch):
        from memory_app import search

        monkeypatch.setattr(search, "MAX_RANKED", 5)
        upsert_fact(owner.id, "work", "old but best", "work work work")  # best match, but old
        for i in range(8):
            upsert_fact(owner.id, "notes", f"note {i}", f"work item {i}")
        upsert_fact(other_user.id, "work", "theirs", "work work work work")  # never counted in
        keys = [f.key for f in search_facts(owner.id, "work")]
        assert sorted(keys) == [f"note {i}" for i in range(3, 8)]
        assert [f.key for f in search_facts(owner.id, "best")] == ["old but best"]  # rare terms: all ranked

    def test_updates_and_deletes_reach_the_index(self, owner):
        upsert_fact(owner.id, "preferences", "shell", "bash")
        upsert_fact(owner.id, "preferences", "shell", "fish")
        assert search_facts(owner.id, "bash") == []
        assert [f.value for f in search_facts(owner.id, "fish")] == ["fish"]
        MemoryFact.objects.all().delete()
        assert search_facts(owner.id, "fish") == []


@pytest.mark.django_db(transaction=True)
class TestTools:
    async def _call(self, owner, name, args, session_id=None):
        current_user_id.set(owner.id)
        current_chat_session_id.set(session_id)
        sink: asyncio.Queue = asyncio.Queue()
        current_event_sink.set(sink)
        agent = await sync_to_async(get_agent)()
        result = await agent.tools.call(name, args, [name])
        events = [sink.get_nowait() for _ in range(sink.qsize())]
        return result, events

    async def test_save_emits_memory_saved_and_search_finds_it(self, owner, session):
        result, events = await self._call(owner, "memory_save", {"category": "Preferences", "key": "Editor", "value": "neovim"}, str(session.pk))
        assert result.success, result.error
        assert [(e.type, e.category, e.key, e.value) for e in events] == [("memory_saved", "preferences", "editor", "neovim")]
        result, _ = await self._call(owner, "memory_search", {"query": "editor"})
        assert "preferences: editor = neovim" in result.output

    async def test_forget_by_key_and_by_key_and_category(self, owner):
        for cat in ("work", "hobby"):
            await self._call(owner, "memory_save", {"category": cat, "key": "project", "value": f"{cat} project"})
        await self._call(owner, "memory_save", {"category": "work", "key": "laptop", "value": "thinkpad"})
        result, _ = await self._call(owner, "memory_forget", {"key": "project", "category": "hobby"})
        assert result.success and "hobby: project" in result.output
        keys = await sync_to_async(lambda: sorted(MemoryFact.objects.values_list("category", "key")))()
        assert keys == [("work", "laptop"), ("work", "project")]
        result, _ = await self._call(owner, "memory_forget", {"key": "project"})
        assert result.success
        missing, _ = await self._call(owner, "memory_forget", {"key": "project"})
        assert not missing.success and "memory_search" in missing.error
        keys = await sync_to_async(lambda: list(MemoryFact.objects.values_list("key", flat=True)))()
        assert keys == ["laptop"]


    async def test_forget_takes_underscores_and_hyphens_for_spaces(self, owner):
        await self._call(owner, "memory_save", {"category": "pets", "key": "dog name", "value": "Rex"})
        await self._call(owner, "memory_save", {"category": "pets", "key": "dog_walker", "value": "Ann"})
        result, _ = await self._call(owner, "memory_forget", {"key": "Dog_Name"})
        assert result.success and "pets: dog name" in result.output
        result, _ = await self._call(owner, "memory_forget", {"key": "dog-walker"})
        assert result.success and "pets: dog_walker" in result.output
        assert not await MemoryFact.objects.aexists()
        assert not (await self._call(owner, "memory_forget", {"key": "dog"}))[0].success  # a prefix is not a key

    async def test_a_guessed_category_is_ignored_only_when_the_key_is_unique(self, owner):
        await self._call(owner, "memory_save", {"category": "pets", "key": "dog name", "value": "Rex"})
        for cat in ("work", "hobby"):
            await self._call(owner, "memory_save", {"category": cat, "key": "project", "value": f"{cat} project"})
        await self._call(owner, "memory_save", {"category": "work", "key": "laptop", "value": "thinkpad"})
        result, _ = await self._call(owner, "memory_forget", {"key": "dog_name", "category": "personal secretary"})
        assert result.success and "pets: dog name" in result.output  # no such category: a guess; one dog name
        missing, _ = await self._call(owner, "memory_forget", {"key": "project", "category": "personal"})
        assert not missing.success  # two facts have the key: not a guess to act on
        wrong, _ = await self._call(owner, "memory_forget", {"key": "project", "category": "Work "})
        assert wrong.success and "work: project" in wrong.output and "hobby" not in wrong.output
        kept, _ = await self._call(owner, "memory_forget", {"key": "project", "category": "work"})
        assert not kept.success  # a category the owner has facts in is never taken for a guess
        assert await sync_to_async(lambda: sorted(MemoryFact.objects.values_list("category", "key")))() == [
            ("hobby", "project"), ("work", "laptop")]



    async def test_forget_without_the_exact_key_takes_the_one_closest_fact(self, owner):
        """"Forget my gym number" (issue 57): a model writes the key as the owner said it."""
        await self._call(owner, "memory_save", {"category": "fitness", "key": "gym membership number", "value": "88031"})
        await self._call(owner, "memory_save", {"category": "home", "key": "phone number", "value": "0176 550"})
        await self._call(owner, "memory_save", {"category": "garden", "key": "favourite flower", "value": "tulip"})
        result, _ = await self._call(owner, "memory_forget", {"key": "gym number", "category": "personal"})
        assert result.success and "fitness: gym membership number" in result.output and "Forgot 1 fact" in result.output
        keys = await sync_to_async(lambda: sorted(MemoryFact.objects.values_list("key", flat=True)))()
        assert keys == ["favourite flower", "phone number"]

    async def test_forget_by_the_value_or_a_key_of_other_words_needs_every_word(self, owner):
        await self._call(owner, "memory_save", {"category": "fitness", "key": "gym membership number", "value": "88031"})
        await self._call(owner, "memory_save", {"category": "people", "key": "sister name", "value": "Anna"})
        assert not (await self._call(owner, "memory_forget", {"key": "sister birthday"}))[0].success
        result, _ = await self._call(owner, "memory_forget", {"key": "88031", "category": "gym"})
        assert result.success and "fitness: gym membership number" in result.output
        assert await sync_to_async(lambda: list(MemoryFact.objects.values_list("key", flat=True)))() == ["sister name"]

    async def test_forget_without_the_exact_key_never_guesses_between_equals(self, owner):
        for key, value in (("work phone", "0171"), ("home phone", "0172")):
            await self._call(owner, "memory_save", {"category": "contact", "key": key, "value": value})
        result, _ = await self._call(owner, "memory_forget", {"key": "phone"})
        assert not result.success and "contact: home phone" in result.error and "contact: work phone" in result.error
        assert await MemoryFact.objects.acount() == 2

    async def test_forget_everything_forgets_nothing(self, owner):
        """No word of "everything", "all my facts" or "what you know" names a fact: nothing goes
        (the tool forgets one fact at a time and never empties memory)."""
        for key in ("dog name", "car plate", "memory palace"):
            await self._call(owner, "memory_save", {"category": "personal", "key": key, "value": "x"})
        for said in ("everything", "all my facts", "what you know about me", "memory", "*"):
            result, _ = await self._call(owner, "memory_forget", {"key": said})
            assert not result.success, said
        assert await MemoryFact.objects.acount() == 3

    async def test_forget_without_the_exact_key_stays_in_a_category_the_owner_has(self, owner):
        await self._call(owner, "memory_save", {"category": "work", "key": "laptop", "value": "thinkpad"})
        await self._call(owner, "memory_save", {"category": "work", "key": "desk chair", "value": "aeron"})
        await self._call(owner, "memory_save", {"category": "hobby", "key": "gaming laptop", "value": "rog"})
        result, _ = await self._call(owner, "memory_forget", {"key": "my laptop", "category": "work"})
        assert result.success and "work: laptop" in result.output
        assert not (await self._call(owner, "memory_forget", {"key": "old laptop", "category": "work"}))[0].success
        keys = await sync_to_async(lambda: sorted(MemoryFact.objects.values_list("key", flat=True)))()
        assert keys == ["desk chair", "gaming laptop"]

    async def test_forget_of_another_owners_fact_by_words_finds_nothing(self, owner, other_user):
        await sync_to_async(upsert_fact)(other_user.id, "fitness", "gym membership number", "12345")
        result, _ = await self._call(owner, "memory_forget", {"key": "gym number"})
        assert not result.success
        assert await MemoryFact.objects.acount() == 1

    async def test_the_fact_an_update_means_is_found_only_among_the_owners_own(self, owner, other_user):
        # The small-model repair that moves an update onto the fact it means (guards.facts) looks
        # facts up by value and by the key the request says: never another owner's.
        from memory_app.services import kept_key_named, kept_with_value

        await sync_to_async(upsert_fact)(other_user.id, "health", "dentist", "Dr. Moreau")
        assert await sync_to_async(kept_with_value)(owner.id, "Dr. Moreau") is None
        assert await sync_to_async(kept_key_named)(owner.id, "My dentist changed, it's now Dr. Haddad.") is None
        await sync_to_async(upsert_fact)(owner.id, "health", "dentist", "Dr. Moreau")
        assert await sync_to_async(kept_with_value)(owner.id, "  dr. MOREAU ") == ("health", "dentist")
        assert await sync_to_async(kept_key_named)(owner.id, "My DENTIST changed!") == ("health", "dentist")
        # Oversized, empty, other scripts, or two facts that would both fit: no fact is picked.
        for value in ("", "   ", "x" * 100_000, "Dr. Ｍoreau", "Dr. Moreau\u200b"):
            assert await sync_to_async(kept_with_value)(owner.id, value) is None
        assert await sync_to_async(kept_key_named)(owner.id, "my dentist " * 20_000) == ("health", "dentist")
        await sync_to_async(upsert_fact)(owner.id, "people", "landlady", "Dr. Moreau")
        assert await sync_to_async(kept_with_value)(owner.id, "Dr. Moreau") is None
        await sync_to_async(upsert_fact)(owner.id, "work", "dentist", "Dr. Lind")
        assert await sync_to_async(kept_key_named)(owner.id, "my dentist changed") is None
        # A model's update through the tool changes the owner's fact, never the other owner's.
        result, _ = await self._call(owner, "memory_save", {"category": "health", "key": "dentist", "value": "Dr. Haddad"})
        assert result.success
        theirs = await MemoryFact.objects.aget(owner=other_user)
        assert (theirs.category, theirs.key, theirs.value) == ("health", "dentist", "Dr. Moreau")

    async def test_the_summary_is_injected_in_run_stream_run_and_run_ephemeral(self, owner, session, llm, profiles):
        from agent.models import Profile

        await Profile.objects.all().aupdate(planning_enabled=False)
        await MemorySummary.objects.acreate(owner=owner, content="The user is called Sam.")
        agent = await sync_to_async(get_agent)()

        def memory_msgs():
            return [m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "system" and "remember" in m["content"]]

        async for _ in agent.run_stream(str(session.pk), "hi"):
            pass
        # One system message (some chat templates drop a second one): persona, profile, memory.
        system = [m for m in llm.requests[-1]["messages"] if m["role"] == "system"]
        assert len(system) == 1 and system[0]["content"].startswith("You are Navi (test persona).")
        assert system[0]["content"].endswith("\n\n---\n\n## What I remember about the user\n\nThe user is called Sam.")
        assert "\n\n---\nCurrent date and time: " in llm.requests[-1]["messages"][-1]["content"]  # after the history
        assert len(memory_msgs()) == 1
        await agent.run(str(session.pk), "again")
        assert len(memory_msgs()) == 1
        current_user_id.set(owner.id)
        await agent.run_ephemeral("sub task", "secretary")
        assert len(memory_msgs()) == 1

    async def test_no_summary_means_no_memory_message(self, owner, session, llm, profiles):
        from agent.models import Profile

        await Profile.objects.all().aupdate(planning_enabled=False)
        agent = await sync_to_async(get_agent)()
        await agent.run(str(session.pk), "hi")
        assert not any("remember" in m["content"] for m in llm.requests[-1]["messages"])


@pytest.mark.django_db(transaction=True)
async def test_extraction_frames_reach_the_session_socket(owner, session):
    from channels.testing import WebsocketCommunicator

    from navi_project.asgi import application

    communicator = WebsocketCommunicator(
        application, f"/ws/sessions/{session.pk}", headers=[(b"origin", b"http://testserver"), (b"host", b"testserver")]
    )
    communicator.scope["user"] = owner
    connected, _ = await communicator.connect()
    assert connected
    await sync_to_async(extraction.notify_memory_saved)(str(session.pk), {"category": "a", "key": "b", "value": "c"})
    frame = await communicator.receive_json_from(timeout=5)
    assert frame == {"type": "memory_saved", "category": "a", "key": "b", "value": "c"}
    await communicator.disconnect()


@pytest.mark.django_db
def test_the_extraction_transcript_shows_tool_calls_and_leaves_out_plans(owner):
    from memory_app.extraction import render_session
    from sessions_app.models import Message, Session

    session = Session.objects.create(owner=owner, profile_id="secretary")
    rows = [
        dict(role="user", content="I moved to Porto last week"),
        dict(role="assistant", name="plan", content="1. save it\n2. confirm"),
        dict(role="assistant", content="", tool_calls=[{"id": "c1", "name": "memory_save", "arguments": {"key": "city", "value": "Porto"}}]),
        dict(role="tool", name="memory_save", content="saved " + "x" * 1000),
        dict(role="assistant", content="Noted: you live in Porto."),
    ]
    for seq, row in enumerate(rows, 1):
        Message.objects.create(session=session, seq=seq, **row)
    text = render_session(session)
    assert text.split("\n\n") == [
        "User: I moved to Porto last week",
        'Assistant called memory_save({"key": "city", "value": "Porto"})',
        "Tool result (memory_save): saved " + "x" * 293 + "…",  # 300 characters of the result
        "Assistant: Noted: you live in Porto.",
    ]
