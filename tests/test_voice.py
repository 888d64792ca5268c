"""Voice over REST against the protocol-level fake speech server (tests/speech_server.py): a
recording checked (really audio, not too long) and transcribed, text spoken and streamed back,
the speech servers set on the settings page taking effect at once, and the "Test" button."""

from __future__ import annotations

import json

import pytest
from django.test import AsyncClient

from sessions_app.models import Message, Session
from tests import audio_samples as samples
from tests.speech_server import SpeechServer
from voice_app import audio, speakable
from voice_app.models import SpeechServers, VoiceClip
from voice_app.views import TEST_PHRASE

MB = 1024 * 1024


@pytest.fixture
def speech(settings):
    server = SpeechServer(transcript="what is the weather tomorrow").start()
    settings.STT_BASE_URL = server.url
    settings.TTS_BASE_URL = server.url + "/v1"  # with or without /v1: both are read
    settings.STT_API_KEY = ""
    settings.TTS_API_KEY = ""
    settings.TTS_FORMAT = "mp3"
    yield server
    server.stop()


async def client_of(user) -> AsyncClient:
    client = AsyncClient()
    await client.aforce_login(user)
    return client


async def post_audio(client: AsyncClient, session_id, data: bytes, name: str = "speech.webm", **extra):
    from django.core.files.uploadedfile import SimpleUploadedFile

    return await client.post(f"/sessions/{session_id}/audio", {"file": SimpleUploadedFile(name, data)}, **extra)


class TestRecordingsAreReadFromTheirHeaders:
    @pytest.mark.parametrize(("kind", "data", "seconds"), [
        ("wav", samples.wav_tone(2.5), 2.5),
        ("ogg", samples.ogg_opus(3.0), 3.0),
        ("webm", samples.webm(4.2), 4.18),  # the last 20 ms block starts at 4.18 s
        ("mp3", samples.mp3(5.0), 5.0),
        ("m4a", samples.m4a(6.0), 6.0),
        ("m4a", samples.m4a(6.0, fragmented=True), 5.97),  # whole AAC frames of 1024 samples
        ("flac", samples.flac(7.0), 7.0),
    ])
    def test_it_finds_the_kind_and_the_length(self, kind, data, seconds):
        info = audio.inspect(data)
        assert info.kind == kind
        assert info.duration_s == pytest.approx(seconds, abs=0.05)

    def test_an_mp3_without_a_tag_is_found_by_its_frames(self):
        assert audio.inspect(samples.mp3(1.0, id3=False)).kind == "mp3"

    @pytest.mark.parametrize(("data", "why"), [
        (b"%PDF-1.7\n" + b"x" * 100, "a PDF"),
        (b"hello, this is plain text and not a recording", "text"),
        (samples.webm(2.0, video=True), "video"),
        (samples.webm(2.0, with_audio=False), "no audio track"),
        (samples.m4a(2.0, video=True), "video"),
        (b"RIFF\x00\x00\x00\x00WAVEjunk" + b"\x00" * 20, "no audio format"),
        (b"OggS" + b"\x00" * 60, "no Opus, Vorbis or Speex"),
        (b"\xff\xfb" + b"\x13" * 100, "no MP3 frames"),
        (b"", "too short"),
    ])
    def test_what_is_not_audio_is_named(self, data, why):
        with pytest.raises(audio.NotAudio, match=why):
            audio.inspect(data)

    def test_a_truncated_webm_counts_what_arrived(self):
        data = samples.webm(3.0)
        assert 1.0 < audio.inspect(data[: len(data) // 2]).duration_s < 2.0


class TestSpeakableText:
    def test_code_math_and_images_are_not_read_and_links_are_read_as_their_text(self):
        answer = ("## Plan\nRun this:\n\n```bash\nrm -rf /tmp/x\n```\n\nSee [the docs](https://example.org/a_(b)) or "
                  "<https://navi.example.net/x>. The sum is $x^2$ here.\n\n$$\\int f$$\n\n"
                  "- **first** item\n- second `make run`\n\n![chart](c.png)\n| a | b |\n|---|---|\n| 1 | 2 |")
        said = speakable.speakable(answer)
        assert "rm -rf" not in said and "bash" not in said and "x^2" not in said and "int f" not in said
        assert "chart" not in said and "https" not in said and "**" not in said
        assert "See the docs or navi.example.net." in said
        assert speakable.sentences(said) == [
            "Plan.", "Run this:", "See the docs or navi.example.net.", "The sum is here.", "first item.",
            "second make run.", "a, b.", "1, 2.",
        ]

    def test_snake_case_words_keep_their_underscores(self):
        assert speakable.speakable("Use *file_name* and snake_case_words.") == "Use file_name and snake_case_words."

    def test_an_unclosed_code_block_at_the_end_is_dropped(self):
        assert speakable.speakable("Here:\n```python\nprint(1)\n") == "Here:"

    def test_first_part_keeps_whole_sentences(self):
        assert speakable.first_part("One two. Three four. Five six.", 22) == "One two. Three four."


@pytest.mark.django_db(transaction=True)
class TestTranscription:
    async def test_a_recording_becomes_text_and_nothing_is_kept(self, speech, owner, session):
        response = await post_audio(await client_of(owner), session.pk, samples.webm(2.0))
        assert response.status_code == 200, response.content
        assert response.json() == {"text": "what is the weather tomorrow", "duration_s": 1.98}
        heard = speech.of("transcriptions")[0]
        assert heard.fields["model"] == "whisper-1"
        assert heard.file[0] == "speech.webm" and heard.file[1] == "audio/webm"
        assert heard.file[2] == samples.webm(2.0)
        assert not await VoiceClip.objects.aexists()
        assert not await Message.objects.filter(session_id=session.pk).aexists()  # nothing sent to the chat

    async def test_a_script_sends_a_recording_with_its_token(self, speech, owner, session, owner_token):
        response = await AsyncClient().post(
            f"/sessions/{session.pk}/audio", {"file": _upload(samples.ogg_opus(1.0), "note.ogg")},
            headers={"Authorization": f"Bearer {owner_token}"})
        assert response.status_code == 200 and response.json()["text"] == "what is the weather tomorrow"
        assert speech.of("transcriptions")[0].file[:2] == ("speech.ogg", "audio/ogg")

    async def test_the_owner_may_keep_recordings_with_their_chat(self, speech, owner, session, settings):
        client = await client_of(owner)
        assert (await client.patch("/settings/voice", {"keep_audio": True}, content_type="application/json")).status_code == 200
        data = samples.wav_tone(1.0)
        assert (await post_audio(client, session.pk, data, "a.wav")).status_code == 200
        clip = await VoiceClip.objects.aget()
        assert (bytes(clip.data), clip.kind, clip.source, clip.transcript) == (data, "wav", "page", "what is the weather tomorrow")
        await Session.objects.filter(pk=session.pk).adelete()
        assert not await VoiceClip.objects.aexists()  # deleted with its chat

    async def test_what_is_not_audio_is_refused_before_the_speech_server(self, speech, owner, session):
        response = await post_audio(await client_of(owner), session.pk, b"%PDF-1.4 a document", "speech.webm")
        assert response.status_code == 400
        assert "not audio" in response.json()["error"] and "a PDF" in response.json()["error"]
        assert speech.heard == []

    async def test_a_recording_over_the_limit_is_refused_saying_why(self, speech, owner, session, settings):
        settings.VOICE_MAX_SECONDS = 30
        response = await post_audio(await client_of(owner), session.pk, samples.ogg_opus(31.0), "long.ogg")
        assert response.status_code == 400
        assert response.json()["error"].startswith("the recording is 31 s long; Navi transcribes up to 30 s")
        assert speech.heard == []

    async def test_no_file_is_a_400(self, speech, owner, session):
        response = await (await client_of(owner)).post(f"/sessions/{session.pk}/audio", {"other": "x"})
        assert response.status_code == 400 and 'field named "file"' in response.json()["error"]

    async def test_another_users_session_is_not_found_and_anonymous_is_refused(self, speech, owner, other_user, session):
        response = await post_audio(await client_of(other_user), session.pk, samples.webm(1.0))
        assert response.status_code == 404
        response = await post_audio(AsyncClient(), session.pk, samples.webm(1.0))
        assert response.status_code in (401, 403)
        assert (await (await client_of(owner)).get(f"/sessions/{session.pk}/audio")).status_code == 405
        assert speech.heard == []

    async def test_an_oversized_body_is_refused_with_413_before_it_is_read(self, owner_token, settings):
        from tests.test_body_limit import _through_guard

        settings.VOICE_MAX_MB = 1
        headers = [(b"content-length", str(2 * MB).encode()), (b"authorization", f"Bearer {owner_token}".encode())]
        app, sent = await _through_guard(headers, [], path="/sessions/0b5e2a9c-0000-4000-8000-000000000000/audio")
        assert not app.called and sent[0]["status"] == 413
        assert "VOICE_MAX_MB" in json.loads(sent[1]["body"])["error"]

    async def test_without_a_server_the_error_says_how_to_set_one_up(self, owner, session, settings):
        settings.STT_BASE_URL = ""
        response = await post_audio(await client_of(owner), session.pk, samples.webm(1.0))
        assert response.status_code == 503
        assert "Settings → Voice" in response.json()["error"] and "/v1/audio/transcriptions" in response.json()["error"]

    async def test_a_server_that_fails_or_is_down_is_reported(self, speech, owner, session, settings):
        speech.fail("transcriptions", 404, "Model whisper-1 is not installed")
        response = await post_audio(await client_of(owner), session.pk, samples.webm(1.0))
        assert response.status_code == 502
        assert response.json()["error"] == ("the speech-to-text server answered HTTP 404: Model whisper-1 is not "
                                            "installed (model 'whisper-1')")
        settings.STT_BASE_URL = "http://127.0.0.1:9"
        response = await post_audio(await client_of(owner), session.pk, samples.webm(1.0))
        assert response.status_code == 503 and "cannot reach the speech-to-text server at http://127.0.0.1:9" in response.json()["error"]

    async def test_the_api_key_is_sent(self, speech, owner, session, settings):
        speech.key = settings.STT_API_KEY = "sk-local"
        assert (await post_audio(await client_of(owner), session.pk, samples.webm(1.0))).status_code == 200
        assert speech.of("transcriptions")[0].authorization == "Bearer sk-local"


def _upload(data: bytes, name: str):
    from django.core.files.uploadedfile import SimpleUploadedFile

    return SimpleUploadedFile(name, data)


async def _streamed(response) -> bytes:
    return b"".join([chunk async for chunk in response.streaming_content])


@pytest.mark.django_db(transaction=True)
class TestSpeech:
    async def test_text_comes_back_as_the_servers_audio_streamed(self, speech, owner):
        speech.chunk_bytes = 4096
        response = await (await client_of(owner)).post("/speech", {"text": "Hello there."}, content_type="application/json")
        assert response.status_code == 200 and response["Content-Type"] == "audio/mpeg"
        data = await _streamed(response)
        assert audio.inspect(data).kind == "mp3"
        heard = speech.of("speech")[0]
        assert heard.fields == {"model": "tts-1", "input": "Hello there.", "voice": "alloy", "response_format": "mp3"}

    async def test_a_format_and_a_voice_may_be_asked_for(self, speech, owner_token):
        response = await AsyncClient().post("/speech", {"text": "Hi", "format": "opus", "voice": "af_bella"},
                                            content_type="application/json",
                                            headers={"Authorization": f"Bearer {owner_token}"})
        assert response["Content-Type"] == "audio/ogg"
        assert audio.inspect(await _streamed(response)).kind == "ogg"
        assert speech.of("speech")[0].fields["voice"] == "af_bella"

    async def test_signed_in_only_and_bad_input_is_a_400(self, speech, owner):
        assert (await AsyncClient().post("/speech", {"text": "hi"}, content_type="application/json")).status_code in (401, 403)
        client = await client_of(owner)
        for body, fragment in [({}, '"text" is required'), ({"text": "x" * 5000}, "up to 4096"),
                               ({"text": "hi", "format": "ogg"}, "format must be one of")]:
            response = await client.post("/speech", body, content_type="application/json")
            assert response.status_code == 400 and fragment in response.json()["error"]
        assert speech.heard == []

    async def test_a_refusing_or_missing_server_is_reported(self, speech, owner, settings):
        speech.fail("speech", 400, "Voice 'alloy' not found")
        response = await (await client_of(owner)).post("/speech", {"text": "hi"}, content_type="application/json")
        assert response.status_code == 502 and "Voice 'alloy' not found" in response.json()["error"]
        settings.TTS_BASE_URL = ""
        response = await (await client_of(owner)).post("/speech", {"text": "hi"}, content_type="application/json")
        assert response.status_code == 503 and "/v1/audio/speech" in response.json()["error"]


@pytest.mark.django_db(transaction=True)
class TestVoiceSettings:
    async def test_env_gives_the_first_values_and_the_key_is_never_shown(self, speech, owner, settings):
        settings.STT_API_KEY = "sk-secret"
        body = (await (await client_of(owner)).get("/settings/voice")).json()
        assert body["stt"] == {"base_url": speech.url, "model": "whisper-1", "has_key": True, "configured": True}
        assert body["tts"]["voice"] == "alloy" and body["tts"]["has_key"] is False
        assert body["can_edit"] is True and body["max_seconds"] == 300 and body["send_at_once"] is False
        assert "sk-secret" not in json.dumps(body)

    async def test_the_owner_changes_the_servers_and_the_next_request_uses_them(self, speech, owner):
        with SpeechServer(transcript="from the new server") as other:
            client = await client_of(owner)
            response = await client.patch("/settings/voice", {"stt_base_url": other.url + "/", "stt_model": "Systran/faster-whisper-small",
                                                              "stt_api_key": "sk-new", "tts_voice": "af_sky"},
                                          content_type="application/json")
            assert response.status_code == 200
            assert response.json()["stt"] == {"base_url": other.url, "model": "Systran/faster-whisper-small", "has_key": True,
                                              "configured": True}
            session = await Session.objects.acreate(owner=owner, profile_id="secretary")
            assert (await post_audio(client, session.pk, samples.webm(1.0))).json()["text"] == "from the new server"
            assert other.of("transcriptions")[0].authorization == "Bearer sk-new"
            assert other.of("transcriptions")[0].fields["model"] == "Systran/faster-whisper-small"
            await client.post("/speech", {"text": "hi"}, content_type="application/json")
            assert speech.of("speech")[0].fields["voice"] == "af_sky"  # the TTS server is still .env's
        row = await SpeechServers.objects.aget()
        assert row.tts_base_url is None and row.stt_api_key == "sk-new"

    async def test_other_users_set_their_own_preferences_but_not_the_servers(self, speech, other_user):
        client = await client_of(other_user)
        response = await client.patch("/settings/voice", {"stt_base_url": "http://evil.example"}, content_type="application/json")
        assert response.status_code == 403
        response = await client.patch("/settings/voice", {"auto_read": True, "send_at_once": True}, content_type="application/json")
        assert response.status_code == 200 and response.json()["auto_read"] is True and response.json()["can_edit"] is False
        assert not await SpeechServers.objects.aexists()

    @pytest.mark.parametrize(("body", "fragment"), [
        ({"stt_base_url": "ftp://x"}, "http:// or https://"), ({"auto_read": "yes"}, "true or false"),
        ({"colour": 1}, "unknown voice setting"), ({"stt_model": ""}, "must name the transcription model"),
    ])
    async def test_bad_values_are_refused(self, owner, body, fragment):
        response = await (await client_of(owner)).patch("/settings/voice", body, content_type="application/json")
        assert response.status_code == 400 and fragment in response.json()["error"]

    async def test_the_test_speaks_a_phrase_and_hears_it_back(self, speech, owner):
        speech.transcript = TEST_PHRASE
        result = (await (await client_of(owner)).post("/settings/voice/test")).json()
        assert result["ok"] is True and result["heard"] == TEST_PHRASE and result["stage"] == "done"
        assert speech.of("speech")[0].fields["input"] == TEST_PHRASE
        assert speech.of("transcriptions")[0].file[0] == "speech.wav"

    async def test_the_test_says_which_half_failed(self, speech, owner, settings):
        speech.transcript = "banana"
        result = (await (await client_of(owner)).post("/settings/voice/test")).json()
        assert result["ok"] is False and "came back as 'banana'" in result["error"]
        settings.TTS_BASE_URL = ""
        result = (await (await client_of(owner)).post("/settings/voice/test")).json()
        assert result["ok"] is False and result["stage"] == "tts" and "TTS_BASE_URL" in result["error"]

    def test_settings_need_a_login(self, anon_client):
        assert anon_client.get("/settings/voice").status_code in (401, 403)



@pytest.mark.django_db(transaction=True)
def test_a_kept_recording_is_in_the_backup(tmp_path, owner, session):
    from django.core.management import call_command

    data = samples.ogg_opus(1.0)
    VoiceClip.objects.create(owner=owner, session=session, kind="ogg", duration_s=1.0, size=len(data), data=data,
                             transcript="remember the milk")
    archive = tmp_path / "b.tar.gz"
    call_command("navi_backup", str(archive), stdout=open(tmp_path / "out.txt", "w"))
    VoiceClip.objects.all().delete()
    call_command("navi_restore", str(archive), force=True, stdout=open(tmp_path / "out.txt", "w"))
    clip = VoiceClip.objects.get()
    assert bytes(clip.data) == data and clip.transcript == "remember the milk" and clip.session_id == session.pk
