"""Issue 40 "do no harm": a filesystem call that writes over, deletes or moves onto a file keeps
the old content, and one step (action=restore, or the card's Restore button) brings it back —
only for the owner of that version, only into folders the owner may still write."""

from __future__ import annotations

import os

import pytest
from django.test import Client

from tests.conftest import PASSWORD
from tests.test_tools_trust import acting_as, fs
from tools_app import file_versions
from tools_app.workspace import workspace_for

pytestmark = pytest.mark.django_db

LANDLORD = "Landlord: Mr Berg\nPhone: 0470 22 19 85\n"


def _kept_id(text: str) -> str:
    found = file_versions.MARK_RE.search(text)
    assert found, text
    return found.group(1)


async def test_a_write_over_a_file_keeps_it_and_restore_brings_it_back(owner):
    with acting_as(owner.id):
        assert (await fs(action="write", path="landlord.txt", content=LANDLORD)).success
        first = await fs(action="write", path="landlord.txt", content="123-456-7890")
        assert first.success and "action=restore path=landlord.txt" in first.output
        _kept_id(first.output)
        path = workspace_for(owner.id) / "landlord.txt"
        assert path.read_text() == "123-456-7890"
        restored = await fs(action="restore", path="landlord.txt")
        assert restored.success, restored.error
        assert path.read_text() == LANDLORD
        # the restore keeps what it replaced: it can be undone in turn
        again = await fs(action="restore", path="landlord.txt")
        assert again.success and path.read_text() == "123-456-7890"


async def test_a_new_file_or_an_append_keeps_nothing(owner):
    with acting_as(owner.id):
        created = await fs(action="write", path="new.txt", content="hello")
        appended = await fs(action="append", path="new.txt", content=" world")
        assert created.success and appended.success
        assert "[previous version kept" not in created.output + appended.output
        missing = await fs(action="restore", path="new.txt")
        assert not missing.success and "no earlier version" in missing.error


async def test_delete_and_move_onto_a_file_keep_the_old_content(owner):
    ws = workspace_for(owner.id)
    with acting_as(owner.id):
        await fs(action="write", path="notes.txt", content="my notes")
        deleted = await fs(action="delete", path="notes.txt")
        assert deleted.success and not (ws / "notes.txt").exists()
        assert (await fs(action="restore", path="notes.txt")).success
        assert (ws / "notes.txt").read_text() == "my notes"

        await fs(action="write", path="draft.txt", content="draft")
        moved = await fs(action="move", path="draft.txt", destination="notes.txt")
        assert moved.success and (ws / "notes.txt").read_text() == "draft"
        assert (await fs(action="restore", path="notes.txt")).success
        assert (ws / "notes.txt").read_text() == "my notes"


async def test_versions_stay_out_of_the_workspace_and_out_of_reach_of_the_model(owner):
    with acting_as(owner.id):
        await fs(action="write", path="a.txt", content="one")
        await fs(action="write", path="a.txt", content="two")
        listing = await fs(action="list", path=".")
        assert ".versions" not in listing.output
        store = file_versions.store_for(owner.id)
        refused = await fs(action="read", path=str(next(store.glob("*.bin"))))
        assert not refused.success and refused.error.startswith("refused:")
        traversal = await fs(action="restore", path="a.txt", version="../../etc/passwd")
        assert not traversal.success and "no kept version" in traversal.error


async def test_another_user_cannot_restore_the_owners_version(owner, other_user):
    with acting_as(owner.id):
        await fs(action="write", path="diary.txt", content="dear diary")
        result = await fs(action="write", path="diary.txt", content="overwritten")
    version = _kept_id(result.output)
    with acting_as(other_user.id):
        await fs(action="write", path="diary.txt", content="mallory's")
        stolen = await fs(action="restore", path="diary.txt", version=version)
        assert not stolen.success and "no kept version" in stolen.error
    assert (workspace_for(other_user.id) / "diary.txt").read_text() == "mallory's"
    assert (workspace_for(owner.id) / "diary.txt").read_text() == "overwritten"


async def test_a_file_over_the_limit_is_not_kept_and_the_result_says_so(owner, settings):
    settings.FILE_VERSION_MAX_BYTES = 10
    with acting_as(owner.id):
        await fs(action="write", path="big.txt", content="x" * 100)
        result = await fs(action="write", path="big.txt", content="small")
    assert result.success and "no earlier version of big.txt was kept" in result.output


async def test_only_the_newest_versions_are_kept(owner, settings):
    settings.FILE_VERSIONS_KEPT = 3
    with acting_as(owner.id):
        for n in range(6):
            await fs(action="write", path="count.txt", content=f"v{n}")
    kept = file_versions.versions(owner.id)
    assert len(kept) == 3
    assert len(list(file_versions.store_for(owner.id).glob("*.bin"))) == 3


async def test_restore_never_writes_through_a_link_swapped_in(owner, tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("untouched")
    ws = workspace_for(owner.id)
    with acting_as(owner.id):
        await fs(action="write", path="cfg.txt", content="original")
        await fs(action="write", path="cfg.txt", content="changed")
        os.unlink(ws / "cfg.txt")
        os.symlink(outside, ws / "cfg.txt")
        result = await fs(action="restore", path="cfg.txt")
    assert not result.success
    assert outside.read_text() == "untouched"


def _overwrite_as(user) -> str:
    from asgiref.sync import async_to_sync

    async def go():
        with acting_as(user.id):
            await fs(action="write", path="plan.txt", content="the plan")
            return await fs(action="write", path="plan.txt", content="garbage")

    return _kept_id(async_to_sync(go)().output)


def test_the_restore_button_writes_the_version_back_for_its_owner_only(owner, other_user, owner_client):
    version = _overwrite_as(owner)
    url = f"/files/versions/{version}/restore"
    assert Client().post(url).status_code == 401
    mallory = Client()
    mallory.login(username="mallory", password=PASSWORD)
    assert mallory.post(url).status_code == 403  # no run_host_tools: writing files is a host action
    other_user.is_superuser = True
    other_user.save()
    response = mallory.post(url)
    assert response.status_code == 404 and "no kept version" in response.json()["error"]
    assert (workspace_for(owner.id) / "plan.txt").read_text() == "garbage"

    done = owner_client.post(url)
    assert done.status_code == 200, done.content
    assert done.json()["ok"] and "Restored plan.txt" in done.json()["result"]
    assert (workspace_for(owner.id) / "plan.txt").read_text() == "the plan"
    assert owner_client.get(url).status_code == 405
    assert owner_client.post("/files/versions/..%2F..%2Fsecret/restore").status_code == 404
