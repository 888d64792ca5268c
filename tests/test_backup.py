"""navi_backup / navi_restore: a backup taken while the server answers restores into a fresh
place, and a server started there has every session, message, fact, tool and API token."""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys
import tarfile

import httpx
import pytest
from django.core.management import CommandError, call_command

from memory_app.models import MemoryFact
from sessions_app.models import Message, Session
from tests.live_server import LiveNavi
from tests.live_ws import connect, recv_run, recv_until
from tests.llm_server import LLMServer, Rule, Turn

ANSWER = "".join(f"word{i:03d} " for i in range(120))
TOOL = '''name = "shout"
description = "Upper-cases a text. Use it when asked to shout."
parameters = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}


async def execute(params: dict) -> str:
    return params["text"].upper()
'''
SSH_HOSTS = {"nas": {"host": "192.168.1.5", "port": 22, "username": "me", "key_file": "~/.ssh/id_ed25519"}}


def _with_own_ssh_hosts(navi: LiveNavi) -> LiveNavi:
    navi.env["SSH_HOSTS_FILE"] = str(navi.data_dir / "ssh_hosts.json")
    return navi


def _get(navi: LiveNavi, path: str, token: str | None = None) -> dict | list:
    response = httpx.get(f"{navi.url}{path}", headers={"Authorization": f"Bearer {token or navi.token}"}, timeout=30)
    response.raise_for_status()
    return response.json()


def _fill(navi: LiveNavi) -> str:
    """A chat, an upload, a fact, a user tool, ssh hosts and a second user; returns bob's token."""
    session_id = navi.create_session()
    with navi.api() as api:
        assert api.post(f"/sessions/{session_id}/messages", json={"content": "first chat"}).status_code == 200
        upload = api.post(f"/sessions/{session_id}/files", files={"file": ("notes.txt", b"remember the milk")})
        assert upload.status_code in (200, 201), upload.text
    navi._manage(
        "shell", "-c",
        "from django.contrib.auth.models import User; from memory_app.models import MemoryFact; "
        "MemoryFact.objects.create(owner=User.objects.get(username='owner'), category='personal', key='city', value='Lisbon')",
    )
    (navi.data_dir / "user_tools" / "shout.py").write_text(TOOL)
    navi._manage("reload_tools")
    (navi.data_dir / "ssh_hosts.json").write_text(json.dumps(SSH_HOSTS))
    return navi.add_user("bob")


@pytest.mark.live
def test_a_backup_taken_mid_answer_restores_into_a_fresh_server(tmp_path):
    archive = tmp_path / "navi.tar.gz"
    with LLMServer() as llm:
        llm.add_rule(Rule(match="long story", turns=[Turn(content=ANSWER, chunk_size=2, delay=0.03)]))
        env = {"OLLAMA_HOST": llm.url}
        with _with_own_ssh_hosts(LiveNavi(env=env)) as source:
            bob_token = _fill(source)
            [first] = [s["session_id"] for s in _get(source, "/sessions")["sessions"]]
            first_messages = _get(source, f"/sessions/{first}")["messages"]
            streaming = source.create_session()

            async def backup_mid_answer() -> list[dict]:
                async with connect(source, streaming) as ws:
                    await ws.send(json.dumps({"type": "message", "content": "tell me a long story"}))
                    await recv_until(ws, lambda f: f["type"] == "stream_delta")
                    output = await asyncio.to_thread(source._manage, "navi_backup", str(archive))
                    assert "backup written" in output
                    return await recv_run(ws, timeout=60)

            frames = asyncio.run(backup_mid_answer())
            assert frames[-1]["type"] == "stream_end" and frames[-1]["content"] == ANSWER  # undisturbed
            sessions = {s["session_id"] for s in _get(source, "/sessions")["sessions"]}

        with tarfile.open(archive) as tar:
            manifest = json.load(tar.extractfile("manifest.json"))
        assert manifest["counts"]["sessions"] == 2 and manifest["counts"]["memory_facts"] == 1
        assert manifest["files"]["ssh_hosts"] and manifest["db_vendor"] in ("sqlite", "postgresql")

        target = _with_own_ssh_hosts(LiveNavi(env=env))
        try:
            output = target._manage("navi_restore", str(archive))
            assert "restored: 2 users, 2 sessions" in output
            target.token = source.token  # the backed-up token, not a new one
            target.start()

            assert {s["session_id"] for s in _get(target, "/sessions")["sessions"]} == sessions
            assert _get(target, f"/sessions/{first}")["messages"] == first_messages
            mid_run = _get(target, f"/sessions/{streaming}")["messages"]
            assert mid_run[0]["role"] == "user" and mid_run[0]["content"] == "tell me a long story"
            for row in mid_run[1:]:  # the answer as far as it had streamed, cut off
                assert row["status"] == "interrupted" and ANSWER.startswith(row["content"])
            facts = _get(target, "/memory")["facts"]
            assert [(f["category"], f["key"], f["value"]) for f in facts] == [("personal", "city", "Lisbon")]
            assert "shout" in {t["name"] for t in _get(target, "/agents/tools")["tools"]}
            assert _get(target, "/sessions", token=bob_token) == {"sessions": []}  # bob's token works too
            [(path,)] = target.sql("SELECT path FROM sessions_app_sessionfile")
            assert path.startswith(str(target.data_dir / "session_files"))
            assert open(path, "rb").read() == b"remember the milk"
            assert json.loads((target.data_dir / "ssh_hosts.json").read_text()) == SSH_HOSTS

            # The new server answers in a restored chat.
            with target.api() as api:
                reply = api.post(f"/sessions/{first}/messages", json={"content": "still there?"})
            assert reply.status_code == 200 and reply.json()["content"] == "echo: still there?"
        finally:
            target.__exit__(None, None, None)


@pytest.mark.live
@pytest.mark.skipif(not os.environ.get("DATABASE_URL", "").startswith("postgres"),
                    reason="moves SQLite to PostgreSQL: runs in make test-postgres")
def test_a_sqlite_install_moves_to_postgresql(tmp_path):
    archive = tmp_path / "navi.tar.gz"
    with LLMServer() as llm:
        source = LiveNavi(env={"OLLAMA_HOST": llm.url})
        source.env["DATABASE_URL"] = f"sqlite:///{source.data_dir / 'navi.db'}"
        with _with_own_ssh_hosts(source):
            bob_token = _fill(source)
            sessions = _get(source, "/sessions")["sessions"]
            source._manage("navi_backup", str(archive))
        target = _with_own_ssh_hosts(LiveNavi(env={"OLLAMA_HOST": llm.url}))
        try:
            assert target.env["DATABASE_URL"].startswith("postgres")
            target._manage("navi_restore", str(archive))
            target.token = source.token
            target.start()
            assert _get(target, "/sessions")["sessions"] == sessions
            assert _get(target, "/memory")["facts"][0]["value"] == "Lisbon"
            assert "shout" in {t["name"] for t in _get(target, "/agents/tools")["tools"]}
            assert _get(target, "/sessions", token=bob_token) == {"sessions": []}
            with target.api() as api:  # id sequences were moved past the restored rows
                reply = api.post(f"/sessions/{sessions[0]['session_id']}/messages", json={"content": "moved?"})
            assert reply.status_code == 200 and reply.json()["content"] == "echo: moved?"
        finally:
            target.__exit__(None, None, None)


@pytest.mark.django_db(transaction=True)
def test_restore_refuses_a_target_with_data_unless_forced(tmp_path, owner, settings):
    kept = Session.objects.create(owner=owner, profile_id="secretary", title="kept")
    Message.objects.create(session=kept, seq=1, role="user", content="keep me")
    MemoryFact.objects.create(owner=owner, category="personal", key="pet", value="a cat")
    (settings.SESSION_FILES_DIR / str(kept.pk)).mkdir(parents=True)
    (settings.SESSION_FILES_DIR / str(kept.pk) / "a.txt").write_text("a")
    archive = tmp_path / "b.tar.gz"
    call_command("navi_backup", str(archive), stdout=open(tmp_path / "out.txt", "w"))

    Session.objects.create(owner=owner, profile_id="secretary", title="made after the backup")
    (settings.SESSION_FILES_DIR / "later.txt").write_text("later")
    with pytest.raises(CommandError, match=r"not empty \(1 users, 2 sessions.*--force"):
        call_command("navi_restore", str(archive), stdout=open(tmp_path / "out.txt", "w"))
    assert Session.objects.count() == 2  # nothing touched

    call_command("navi_restore", str(archive), force=True, stdout=open(tmp_path / "out.txt", "w"))
    assert list(Session.objects.values_list("title", flat=True)) == ["kept"]
    assert list(Message.objects.values_list("content", flat=True)) == ["keep me"]
    assert MemoryFact.objects.get().value == "a cat"
    assert sorted(p.name for p in settings.SESSION_FILES_DIR.rglob("*") if p.is_file()) == ["a.txt"]


def test_restore_says_what_to_do_with_a_file_that_is_not_a_backup(tmp_path):
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"not a tarball")
    with pytest.raises(CommandError, match="not a readable backup.*navi_backup"):
        call_command("navi_restore", str(junk))
    with pytest.raises(CommandError, match="no backup at"):
        call_command("navi_restore", str(tmp_path / "missing.tar.gz"))


def test_backup_into_a_missing_folder_says_so(tmp_path):
    with pytest.raises(CommandError, match="does not exist; create it"):
        call_command("navi_backup", str(tmp_path / "nope" / "b.tar.gz"))


# --- what restore refuses never goes in; what it refuses never comes out (issue #26 item 5) ---
def _backup(archive, *flags) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("navi_backup", str(archive), *flags, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def _rewrite(archive, target, extra=(), change=None) -> None:
    """A copy of `archive` with members added (TarInfo, bytes) or changed (name -> bytes)."""
    change = change or {}
    with tarfile.open(archive) as old, tarfile.open(target, "w:gz") as new:
        for member in old.getmembers():
            data = old.extractfile(member).read() if member.isfile() else None
            if member.name in change:
                data = change[member.name]
                member.size = len(data)
            new.addfile(member, io.BytesIO(data) if data is not None else None)
        for member, data in extra:
            new.addfile(member, io.BytesIO(data) if data is not None else None)


@pytest.mark.django_db(transaction=True)
def test_a_link_in_a_tool_data_folder_is_left_out_with_a_warning_and_the_backup_restores(tmp_path, owner, settings):
    data = settings.TOOLS_DIR / ".data" / "spy" / str(owner.pk)
    data.mkdir(parents=True)
    (data / "notes.json").write_text('{"n": 1}')
    os.link(data / "notes.json", data / "same-notes.json")  # a second name: stored as a plain copy
    (data / "passwd").symlink_to("/etc/passwd")
    (data / "outside").symlink_to(tmp_path)
    os.mkfifo(data / "pipe")
    archive = tmp_path / "b.tar.gz"
    out, err = _backup(archive, "--verify")
    for name, what in (("passwd", "a symbolic link (to '/etc/passwd')"), ("outside", "a symbolic link"), ("pipe", "a fifo")):
        assert f"left out {data / name}: {what}" in err, err
    assert "3 path(s) left out" in out and "==> verified:" in out
    with tarfile.open(archive) as tar:
        assert all(m.isfile() or m.isdir() for m in tar.getmembers())
        assert not [m.name for m in tar.getmembers() if m.name.endswith(("passwd", "outside", "pipe"))]

    settings.TOOLS_DIR = tmp_path / "restored_tools"  # an empty place to restore the files into
    settings.SESSION_FILES_DIR = tmp_path / "restored_files"
    call_command("navi_restore", str(archive), force=True, stdout=io.StringIO())
    restored = settings.TOOLS_DIR / ".data" / "spy" / str(owner.pk)
    assert sorted(p.name for p in restored.iterdir()) == ["notes.json", "same-notes.json"]
    assert (restored / "same-notes.json").read_text() == '{"n": 1}'


def _nest(top, depth: int):
    """`depth` folders one inside the other under `top` (made through a descriptor: the whole
    path gets too long for one system call); returns the names from `top` down."""
    names = ["d"] * depth
    fd = os.open(top, os.O_RDONLY)
    try:
        for name in names:
            os.mkdir(name, dir_fd=fd)
            inner = os.open(name, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
        with open(os.open("deepest.txt", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd), "w") as f:
            f.write("bottom")
    finally:
        os.close(fd)
    return names


def _unnest(top) -> None:
    """Remove what _nest made, one level at a time from the top (shutil.rmtree, and pytest's
    clean-up of old temp folders, recurse once per level and die past ~1 000)."""
    top = str(top)
    while os.path.isdir(os.path.join(top, "d")):
        child = os.path.join(top, "d", "d")
        if os.path.isdir(child):
            os.rename(child, os.path.join(top, "d.next"))
            os.rmdir(os.path.join(top, "d"))
            os.rename(os.path.join(top, "d.next"), os.path.join(top, "d"))
        else:
            os.unlink(os.path.join(top, "d", "deepest.txt"))
            os.rmdir(os.path.join(top, "d"))


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("depth", [1100, 3000])
def test_a_deeply_nested_tool_data_folder_is_left_out_with_a_warning_and_the_backup_is_written(
    tmp_path, owner, settings, depth
):
    """Issue #35 item 4: a user tool made 1 100 nested folders in its data folder; os.walk died
    with RecursionError and no backup was written, every night, until an admin found it."""
    data = settings.TOOLS_DIR / ".data" / "digger" / str(owner.pk)
    data.mkdir(parents=True)
    (data / "notes.json").write_text('{"n": 1}')
    _nest(data, depth)
    archive = tmp_path / "b.tar.gz"
    try:
        out, err = _backup(archive, "--verify")
    finally:
        _unnest(data)
    assert archive.is_file() and "==> verified:" in out, out + err
    assert "a folder nested more than 100 levels deep" in err, err
    assert "1 path(s) left out" in out
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    ours = [n for n in names if "/digger/" in n]
    assert any(n.endswith("notes.json") for n in ours)
    # the first 100 levels below the tools folder are kept (.data/digger/<id>/d/d/...)
    assert max(len(n.split("/")) for n in ours if not n.endswith(".json")) == 1 + 100

    settings.TOOLS_DIR = tmp_path / "restored_tools"
    settings.SESSION_FILES_DIR = tmp_path / "restored_files"
    call_command("navi_restore", str(archive), force=True, stdout=io.StringIO())
    restored = settings.TOOLS_DIR / ".data" / "digger" / str(owner.pk)
    assert (restored / "notes.json").read_text() == '{"n": 1}'


@pytest.mark.django_db(transaction=True)
def test_verify_passes_on_a_good_backup_and_fails_on_a_tampered_one(tmp_path, owner, settings):
    Session.objects.create(owner=owner, profile_id="secretary", title="one")
    (settings.TOOLS_DIR / "greet.py").write_text(TOOL)
    good = tmp_path / "good.tar.gz"
    assert "==> verified:" in _backup(good, "--verify")[0]
    assert "==> verified:" in _backup(good, "--verify-only")[0]

    linked = tmp_path / "linked.tar.gz"
    link = tarfile.TarInfo("user_tools/greet2.py")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/shadow"
    _rewrite(good, linked, extra=[(link, None)])
    with pytest.raises(CommandError, match=r"verify failed: refused .*'user_tools/greet2.py' is a symbolic link \(to '/etc/shadow'\)"):
        _backup(linked, "--verify-only")

    with tarfile.open(good) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))
    manifest["counts"]["sessions"] = 5
    miscounted = tmp_path / "miscounted.tar.gz"
    _rewrite(good, miscounted, change={"manifest.json": json.dumps(manifest).encode()})
    with pytest.raises(CommandError, match="does not match its manifest .sessions: 1 rows, the manifest says 5"):
        _backup(miscounted, "--verify-only")

    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    done = subprocess.run(
        [sys.executable, "manage.py", "navi_backup", "--verify-only", str(cut)],
        cwd=settings.BASE_DIR, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode != 0 and "verify failed" in done.stderr and "not a readable backup" in done.stderr


def _member(name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "") -> tarfile.TarInfo:
    member = tarfile.TarInfo(name)
    member.type, member.linkname = kind, linkname
    if kind in (tarfile.CHRTYPE, tarfile.BLKTYPE):
        member.devmajor, member.devminor = 1, 3
    return member


@pytest.mark.parametrize(
    "member, says",
    [
        (_member("user_tools/x.py", tarfile.SYMTYPE, "/etc/passwd"), "'user_tools/x.py' is a symbolic link (to '/etc/passwd')"),
        (_member("user_tools/y.py", tarfile.LNKTYPE, "manifest.json"), "'user_tools/y.py' is a hard link (to 'manifest.json')"),
        (_member("session_files/../../escaped.txt"), "'session_files/../../escaped.txt' has an empty, `.` or `..` part"),
        (_member("/tmp/navi-escaped.txt"), "'/tmp/navi-escaped.txt' has an absolute name"),
        (_member("session_files/null", tarfile.CHRTYPE), "'session_files/null' is a character device"),
        (_member("session_files/disk", tarfile.BLKTYPE), "'session_files/disk' is a block device"),
        (_member("session_files/pipe", tarfile.FIFOTYPE), "'session_files/pipe' is a fifo"),
        (_member("settings.py"), "'settings.py' is not part of a Navi backup"),
    ],
    ids=["symlink", "hardlink", "dotdot", "absolute", "chardev", "blockdev", "fifo", "stranger"],
)
@pytest.mark.django_db(transaction=True)
def test_restore_refuses_a_hand_made_archive_naming_the_member(tmp_path, settings, owner, member, says):
    kept = Session.objects.create(owner=owner, profile_id="secretary", title="kept")
    archive, crafted = tmp_path / "b.tar.gz", tmp_path / "crafted.tar.gz"
    _backup(archive)
    _rewrite(archive, crafted, extra=[(member, None)])
    with pytest.raises(CommandError) as refused:
        call_command("navi_restore", str(crafted), force=True, stdout=io.StringIO())
    assert says in str(refused.value) and "Nothing was restored" in str(refused.value), str(refused.value)
    assert list(Session.objects.values_list("pk", flat=True)) == [kept.pk]  # the database was not touched
    assert not (tmp_path / "escaped.txt").exists() and not os.path.exists("/tmp/navi-escaped.txt")


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("knowledge_state")
def test_a_backup_carries_the_vectors_and_a_restore_embeds_nothing_again(tmp_path, owner, owner_client, embed):
    """Issue 51: one restore re-embedded 16 964 passages. Now `vectors.bin` rides along: after a
    restore, search by meaning works at once and no passage or fact lacks its vector."""
    from jobs_app.worker import drain
    from knowledge_app import indexer
    from knowledge_app.models import Passage
    from memory_app.services import upsert_fact
    from tests.test_knowledge import indexed, results

    indexed(owner_client, "diary.txt", "I drink a double espresso every morning.")
    indexed(owner_client, "pets.txt", "The cat sleeps on the sofa all afternoon.")
    upsert_fact(owner.pk, "preferences", "morning drink", "a double espresso")
    assert drain(60) and indexer.missing_counts() == (0, 0)
    archive = tmp_path / "b.tar.gz"
    out = io.StringIO()
    call_command("navi_backup", str(archive), stdout=out)
    with tarfile.open(archive) as tar:
        manifest, names = json.load(tar.extractfile("manifest.json")), tar.getnames()
    assert manifest["parts"] == {"vectors.bin": 3} and "vectors.bin" in names

    embedded_before = len(embed.embeds)
    call_command("navi_restore", str(archive), force=True, stdout=out)
    assert "vectors.bin: 3 restored" in out.getvalue()
    assert Passage.objects.count() == 2 and indexer.missing_counts() == (0, 0)
    indexer.remake_lost_vector_tables()  # a worker's check at its start finds nothing lost
    assert indexer.missing_counts() == (0, 0)
    assert "espresso" in results(owner_client, "coffee")[0]["text"]  # by meaning, at once
    assert len(embed.embeds) == embedded_before + 1  # the query's vector only: nothing was embedded again
    call_command("navi_backup", str(tmp_path / "again.tar.gz"), "--verify", stdout=out)
