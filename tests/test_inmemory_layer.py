"""navi_project.inmemory_layer: the single-process channel layer. A socket that attaches itself
gets a run's frames in the sender's task; everything else is queued as Channels queues it."""

from __future__ import annotations

import asyncio
import gc
import threading

import pytest

from navi_project.inmemory_layer import NaviInMemoryChannelLayer


class Receiver:
    def __init__(self) -> None:
        self.got: list[tuple[dict, asyncio.Task | None]] = []
        self.fail = False

    async def take(self, message: dict) -> None:
        if self.fail:
            raise RuntimeError("the socket broke")
        self.got.append((message, asyncio.current_task()))


def frame(seq: int) -> dict:
    return {"type": "run.event", "frame": {"type": "stream_delta", "delta": "x", "run_id": "r", "seq": seq}}


@pytest.fixture
async def layer():
    layer = NaviInMemoryChannelLayer()
    yield layer
    await layer.flush()


async def _joined(layer, group="session.s") -> str:
    channel = await layer.new_channel()
    await layer.group_add(group, channel)
    return channel


async def test_an_attached_socket_gets_run_frames_in_the_senders_task(layer):
    channel, receiver = await _joined(layer), Receiver()
    layer.attach(channel, receiver.take)
    await layer.group_send("session.s", frame(1))
    assert [m["frame"]["seq"] for m, _ in receiver.got] == [1]
    assert receiver.got[0][1] is asyncio.current_task()  # no queue, no other task
    with pytest.raises(asyncio.TimeoutError):  # and nothing was queued as well
        await asyncio.wait_for(layer.receive(channel), 0.05)


async def test_other_messages_and_direct_sends_still_queue(layer):
    channel, receiver = await _joined(layer), Receiver()
    layer.attach(channel, receiver.take)
    await layer.group_send("session.s", {"type": "run.replay_request", "n": 1})
    await layer.send(channel, frame(2))  # a direct send is the socket's own business (replays)
    assert receiver.got == []
    assert (await layer.receive(channel))["type"] == "run.replay_request"
    assert (await layer.receive(channel))["frame"]["seq"] == 2


async def test_members_that_did_not_attach_are_queued_beside_one_that_did(layer):
    attached, queued, receiver = await _joined(layer), await _joined(layer), Receiver()
    layer.attach(attached, receiver.take)
    await layer.group_send("session.s", frame(1))
    assert len(receiver.got) == 1
    assert (await layer.receive(queued))["frame"]["seq"] == 1


async def test_a_failing_socket_does_not_fail_the_sender_or_the_others(layer):
    broken, fine = await _joined(layer), await _joined(layer)
    bad, good = Receiver(), Receiver()
    bad.fail = True
    layer.attach(broken, bad.take)
    layer.attach(fine, good.take)
    await layer.group_send("session.s", frame(1))  # does not raise
    assert len(good.got) == 1


async def test_detached_or_collected_sockets_are_not_called(layer):
    channel, receiver = await _joined(layer), Receiver()
    layer.attach(channel, receiver.take)
    layer.detach(channel)
    await layer.group_send("session.s", frame(1))
    assert receiver.got == [] and (await layer.receive(channel))["frame"]["seq"] == 1
    gone, dropped = await _joined(layer), Receiver()
    layer.attach(gone, dropped.take)
    del dropped
    gc.collect()  # a socket that ended without detaching is not kept alive by the layer
    await layer.group_send("session.s", frame(2))
    assert gone not in layer._attached


async def test_a_send_from_another_event_loop_is_queued_not_run_there(layer):
    channel, receiver = await _joined(layer), Receiver()
    layer.attach(channel, receiver.take)
    # e.g. memory extraction in a worker thread (async_to_sync runs its own loop): the socket's
    # writes must stay on the socket's loop.
    thread = threading.Thread(target=lambda: asyncio.run(layer.group_send("session.s", frame(1))))
    thread.start()
    thread.join(10)
    assert receiver.got == []
    assert layer.channels[channel].qsize() == 1
