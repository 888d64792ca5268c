"""navi_project.serve.write_now: a WebSocket frame goes out in the same turn of the loop when
nothing is queued before it; anything else keeps Twisted's queue and order. Against real Twisted
TCP connections (a socket pair), plus the cases a socket pair cannot stage."""

from __future__ import annotations

import asyncio
import socket

import pytest
from twisted.internet import tcp

from navi_project.serve import write_now


class _Protocol:
    def makeConnection(self, transport):
        self.transport = transport

    def connectionLost(self, reason):
        pass


@pytest.fixture
def pair():
    """(a Twisted server transport over one end, the other end as a plain socket)."""
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    theirs.settimeout(5)
    transport = tcp.Server(ours, _Protocol(), ("127.0.0.1", 1), None, 1, None)
    transport.startWriting = transport.stopWriting = lambda: None  # no reactor in these tests
    yield transport, theirs
    ours.close()
    theirs.close()


def test_nothing_queued_goes_out_at_once(pair):
    transport, peer = pair
    write_now(transport, b"frame one")
    assert peer.recv(100) == b"frame one"  # no reactor turn was needed
    assert transport._tempDataBuffer == [] and transport.dataBuffer == b""


def test_a_backlog_keeps_the_order(pair):
    transport, peer = pair
    transport.write(b"queued first|")  # waiting for the reactor
    write_now(transport, b"then this")
    assert transport._tempDataBuffer == [b"queued first|", b"then this"]
    transport.doWrite()
    assert peer.recv(100) == b"queued first|then this"


def test_what_the_socket_does_not_take_is_queued_after_what_it_took(pair):
    transport, peer = pair
    big = bytes(range(256)) * 40_000  # ~10 MB: more than a socket buffer holds
    write_now(transport, big)
    assert 0 < len(big) - transport._tempDataLen < len(big)  # sent in part, the rest queued
    write_now(transport, b"next frame")  # must wait behind the rest
    received = bytearray()
    while len(received) < len(big) + 10:
        if transport._tempDataBuffer or transport.offset < len(transport.dataBuffer):
            transport.doWrite()
        received += peer.recv(1 << 20)
    assert bytes(received) == big + b"next frame"


class _Fake:
    TLS = False
    connected = 1
    disconnecting = False
    _writeDisconnected = False
    offset = 0
    dataBuffer = b""

    def __init__(self, sends):
        self._tempDataBuffer = []
        self.sends, self.sent, self.queued = sends, [], []

    def writeSomeData(self, data):
        self.sent.append(bytes(data))
        return self.sends

    def write(self, data):
        self.queued.append(bytes(data))


@pytest.mark.parametrize("change", [{"TLS": True}, {"disconnecting": True}, {"_writeDisconnected": True}, {"connected": 0}])
def test_tls_and_closing_connections_go_through_twisted(change):
    transport = _Fake(sends=99)
    for name, value in change.items():
        setattr(transport, name, value)
    write_now(transport, b"frame")
    assert transport.sent == [] and transport.queued == [b"frame"]


def test_a_lost_connection_is_left_for_twisted_to_notice():
    from twisted.internet.main import CONNECTION_LOST

    transport = _Fake(sends=CONNECTION_LOST)
    write_now(transport, b"frame")
    assert transport.queued == [b"frame"]  # its write path reports the loss and closes


async def test_a_websocket_scope_carries_the_direct_frame_writer():
    from navi_project import serve

    seen = {}

    async def app(scope, receive, send):
        seen.update(scope)

    server = object.__new__(serve.LimitedServer)
    server.application = app
    protocol = object.__new__(serve.LeanWebSocketProtocol)
    server.connections = {protocol: {}}
    server.create_application(protocol, {"type": "websocket", "path": "/ws/sessions/x"})
    await server.connections[protocol]["application_instance"]
    assert seen["extensions"][serve.WRITE_TEXT] == protocol.write_text
    assert serve.WRITE_TEXT == "navi.write_text"  # the name agent.web.consumers looks up


def test_the_direct_writer_sends_only_on_an_open_socket():
    from navi_project.serve import LeanWebSocketProtocol

    protocol = object.__new__(LeanWebSocketProtocol)
    sent = []
    protocol.sendMessage = lambda payload, binary: sent.append((payload, binary))
    protocol.state = LeanWebSocketProtocol.STATE_OPEN
    protocol.write_text('{"type": "stream_delta", "delta": "é"}')
    protocol.state = LeanWebSocketProtocol.STATE_CLOSED
    protocol.write_text('{"type": "late"}')  # after the close: dropped, as daphne drops it
    assert sent == [('{"type": "stream_delta", "delta": "é"}'.encode(), False)]


def _lean_protocol(transport):
    """A LeanWebSocketProtocol on `transport`, open, without a handshake."""
    from collections import deque
    from types import SimpleNamespace

    from navi_project.serve import LeanWebSocketProtocol

    protocol = object.__new__(LeanWebSocketProtocol)
    protocol.transport, protocol.peer, protocol.logOctets = transport, "tcp:127.0.0.1:1", False
    protocol.state, protocol.send_queue = LeanWebSocketProtocol.STATE_OPEN, deque()
    protocol.trafficStats = SimpleNamespace(outgoingOctetsWireLevel=0, preopenOutgoingOctetsWireLevel=0)
    return protocol


async def test_frames_of_one_turn_leave_together_at_its_end(pair):
    transport, peer = pair
    protocol = _lean_protocol(transport)
    peer.setblocking(False)
    protocol.sendData(b"one|")
    protocol.sendData(b"two|")
    with pytest.raises(BlockingIOError):
        peer.recv(100)  # nothing yet: the turn is not over
    await asyncio.sleep(0)
    assert peer.recv(100) == b"one|two|"  # in order, in one write
    assert protocol.trafficStats.outgoingOctetsWireLevel == 8


async def test_a_write_that_goes_through_autobahn_comes_after_the_bunched_ones(pair):
    transport, peer = pair
    protocol = _lean_protocol(transport)
    protocol.sendData(b"bunched|")
    protocol.state = protocol.STATE_CLOSING  # e.g. the close frame's write: autobahn's path
    protocol.sendData(b"close")
    transport.doWrite()  # what autobahn queued with Twisted
    await asyncio.sleep(0)
    assert peer.recv(100) == b"bunched|close"


async def test_a_socket_gone_before_the_turn_ends_drops_its_frames_quietly(pair):
    transport, peer = pair
    protocol = _lean_protocol(transport)
    sent = _lean_protocol(_Fake(sends=99))
    protocol.sendData(b"lost")
    sent.sendData(b"kept")
    transport.connected = 0  # the client went away
    await asyncio.sleep(0)
    assert sent.transport.sent == [b"kept"]  # the other socket's frames still went out


@pytest.mark.parametrize("debug", [False, True])
def test_autobahn_formats_its_settings_only_for_a_debug_log_that_is_on(monkeypatch, debug):
    """autobahn pretty-prints its settings for a debug line at every connection: skipped while
    its debug lines are off, kept when they are on; its pformat is restored either way."""
    from types import SimpleNamespace

    import txaio
    from autobahn.websocket import protocol as autobahn_protocol

    from navi_project.serve import LeanWebSocketProtocol

    formatted = []

    def connection_made(self):
        formatted.append(autobahn_protocol.pformat([("openHandshakeTimeout", 5)]))
        raise RuntimeError("the handshake set-up failed")

    monkeypatch.setattr(autobahn_protocol.WebSocketServerProtocol, "_connectionMade", connection_made)
    original = autobahn_protocol.pformat
    protocol = object.__new__(LeanWebSocketProtocol)
    protocol.log = SimpleNamespace(debug=(lambda *a, **k: None) if debug else txaio.tx._no_op)
    with pytest.raises(RuntimeError):
        protocol._connectionMade()
    assert ("openHandshakeTimeout" in formatted[0]) is debug
    assert autobahn_protocol.pformat is original


def test_a_full_collection_no_longer_walks_what_the_start_loaded():
    import gc

    from navi_project.serve import freeze_startup_objects

    loaded = {"a long-lived object": [1, 2, 3]}
    threshold = gc.get_threshold()
    try:
        freeze_startup_objects()
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold()[2] == 100 and gc.get_threshold()[:2] == threshold[:2]
        assert not any(o is loaded for o in gc.get_objects())  # out of every generation
        later = {"made after the start": []}
        assert any(o is later for o in gc.get_objects())  # collected as usual
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)
