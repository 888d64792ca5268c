"""`python -m navi_project.serve [daphne options] navi_project.asgi:application`

daphne with request body limits at the protocol level (`make run` and the live tests start
the server this way). Plain daphne spools a whole request body to memory or disk, then hands
all of it to the application: an anonymous 300 MB POST costs gigabytes of RSS and stalls the
server before Django could say 401. Here each request is judged when its headers are complete
(sessions_app.bodylimit): over the path's limit → 413, over the anonymous cap without
credentials → 413, with wrong credentials → 401 saying so, answered at once and the rest of
the body discarded unread into memory. An accepted body goes to a temporary file as it arrives
and Django reads that file in place (navi_project.body_file): never held in memory. Credentials
are checked in a thread while the connection is paused, so the reactor never waits on the
database and at most one network read of body arrives meanwhile. Takes daphne's options.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import sys
from io import BytesIO

from daphne import server as daphne_server  # first: installs the asyncio reactor

# isort: split
import txaio
from autobahn.websocket import protocol as autobahn_protocol
from autobahn.websocket.types import ConnectionDeny
from daphne.cli import CommandLineInterface
from daphne.http_protocol import HTTPFactory, WebRequest
from daphne.ws_protocol import WebSocketFactory, WebSocketProtocol
from twisted.internet import reactor, threads
from twisted.web.http import RESPONSES

from navi_project import logs
from navi_project.body_file import BODY_FILE
from navi_project.job_workers import JobWorkers
from sessions_app import bodylimit

log = logging.getLogger("navi_project.serve")  # not "__main__" under python -m
# After a refusal the rest of the body is read and dropped for a little while, so that a client
# which only reads after sending still gets the answer; then the connection is closed.
LINGER_S = 2.0
LINGER_MAX_BYTES = 8 * 1024 * 1024


class LimitedWebRequest(WebRequest):
    """daphne's request with a body budget decided before the first body byte is stored."""


    _limit: int | None = None  # bytes the body may have; None while credentials are checked
    _over_limit: bodylimit.Refusal | None = None  # the answer once the body passes _limit
    _received = 0
    _refused = False
    _parked: tuple | None = None  # requestReceived arguments held back during a check
    _wants_continue = False
    _path: str | None = None  # the request's decoded path: the body limit depends on it

    def __init__(self, *args, **kwargs):
        # Twisted parses a multipart or form body into `request.args` once it has all arrived:
        # the whole body read into memory and through the email parser, ~12 copies (a 199 MB
        # upload peaked at +2.4 GB RSS). daphne never reads `args`; Django parses the body itself.
        kwargs["parsePOSTFormSubmission"] = False
        super().__init__(*args, **kwargs)

    def gotLength(self, length):
        creds = bodylimit.credentials(self._header(b"cookie"), self._header(b"authorization"))
        self._path = bodylimit.request_path(getattr(self.channel, "_path", None))
        refusal, limit = bodylimit.first_look(length, any(creds), self._path)
        if refusal is not None:
            return self._refuse(refusal)
        super().gotLength(length)
        if limit is not None:
            return self._set_limit(limit)
        # Hold the body back (and the client's "100 Continue") until the check is done.
        self._wants_continue = self.requestHeaders.hasHeader(b"expect")
        self.requestHeaders.removeHeader(b"expect")
        self.channel.transport.pauseProducing()
        checking = threads.deferToThread(bodylimit.check_credentials, *creds)
        checking.addCallbacks(self._credentials_checked, self._check_failed)

    def handleContentChunk(self, data):
        if self._refused:
            return
        self._received += len(data)
        if self._limit is not None and self._received > self._limit:
            return self._refuse(self._over_limit)
        super().handleContentChunk(data)

    def handle_reply(self, message):
        # The access log line is written while the reply is handled: give it the request's id.
        if message["type"] == "http.response.start":
            ids = [v for k, v in message.get("headers", []) if k.lower() == b"x-request-id"]
            self._request_id = ids[0].decode("latin-1") if ids else ""
        token = logs.current_request_id.set(getattr(self, "_request_id", ""))
        try:
            super().handle_reply(message)
        finally:
            logs.current_request_id.reset(token)

    def requestReceived(self, command, path, version):
        if self._refused:
            return
        if self._limit is None:  # the whole (small) body came before the check finished
            self._parked = (command, path, version)
            return
        super().requestReceived(command, path, version)

    # --- helpers ----------------------------------------------------------------------------
    def _header(self, name: bytes) -> str | None:
        values = self.requestHeaders.getRawHeaders(name)
        return b", ".join(values).decode("latin-1") if values else None

    def _set_limit(self, limit: int) -> None:
        self._limit = limit
        anonymous = limit <= bodylimit.anonymous_body_bytes()
        self._over_limit = bodylimit.anonymous_too_large() if anonymous else bodylimit.too_large(self._path)
        if self._received > limit:
            self._refuse(self._over_limit)

    def _credentials_checked(self, refusal: bodylimit.Refusal | None) -> None:
        if self.channel is None or self._refused:  # the client went away meanwhile
            return
        if refusal is not None:
            return self._refuse(refusal)
        self._set_limit(bodylimit.max_body_bytes(self._path))
        if self._refused:
            return
        if self._wants_continue:
            self.channel.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        self.channel.transport.resumeProducing()
        if self._parked is not None:
            super().requestReceived(*self._parked)

    def _check_failed(self, failure) -> None:
        log.error("checking request credentials failed: %s", failure.getTraceback())
        if self.channel is not None and not self._refused:
            self._refuse((503, "could not check the request's credentials; try again"))

    def _refuse(self, refusal: bodylimit.Refusal) -> None:
        """Answer now, drop whatever body still arrives (LINGER_S / LINGER_MAX_BYTES), close."""
        self._refused = True
        self.content = getattr(self, "content", None) or BytesIO()
        self.requestHeaders.removeHeader(b"expect")  # no "100 Continue" after the answer
        channel = self.channel
        status, body = refusal[0], bodylimit.json_body(refusal)
        channel.transport.write(
            b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
            b"Connection: close\r\n\r\n%s" % (status, RESPONSES.get(status, b"Error"), len(body), body)
        )
        channel.dataReceived = _discarder(channel.transport)
        channel.transport.resumeProducing()
        reactor.callLater(LINGER_S, channel.transport.loseConnection)
        request_id = logs.request_id_for(self._header(b"x-request-id"))
        log.warning("refused a request body (%d): %s", status, refusal[1], extra={"request_id": request_id})


def hand_over_body(request: LimitedWebRequest, scope: dict) -> None:
    """Give the application the file Twisted spooled the body to (navi_project.body_file) and
    leave daphne an empty one: daphne would read the whole file into queued messages at once."""
    scope.setdefault("extensions", {})[BODY_FILE] = request.content
    request.content = BytesIO()


def _discarder(transport):
    """A dataReceived that drops the data and closes after LINGER_MAX_BYTES."""
    dropped = 0

    def discard(data: bytes) -> None:
        nonlocal dropped
        dropped += len(data)
        if dropped > LINGER_MAX_BYTES:
            transport.loseConnection()

    return discard


class LimitedHTTPFactory(HTTPFactory):
    def buildProtocol(self, addr):
        protocol = super().buildProtocol(addr)
        protocol.requestFactory = LimitedWebRequest
        return protocol


class LeanWebSocketProtocol(WebSocketProtocol):
    """daphne's WebSocket protocol with autobahn's per-frame debug log left out of the usual
    write: autobahn's sendData builds that line's arguments (hltype/hlval: qualified names,
    colouring) for every frame even with debug logging off, ~5 % of the server's CPU while
    it relays deltas (bench/README "hot path").

    The frames an open socket is sent in one turn of the event loop leave together at the end
    of that turn (`_Bunches`), written directly when nothing is queued before them, as autobahn
    would, traffic statistics included. On the bench VM a write to a client asleep costs the
    writer 50-100 us of CPU to wake it; the streams read on one tick write one after another,
    so most writes find the client still awake. Anything else (a chopped or synchronous
    write, a backlog, a socket no longer open) first writes what this turn bunched, then goes
    through autobahn unchanged, so the order on the wire is the order of the writes."""

    _bunch: list[bytes] | None = None  # frames written this turn, not yet on the socket
    # ASGI's WebSocket denial response (status, headers, body parts), which daphne lacks: the
    # application answers the handshake with e.g. 503 and a JSON body instead of daphne's 403.
    _denial: tuple[int, list, list[bytes]] | None = None

    def handle_reply(self, message: dict) -> None:
        kind = message.get("type")
        if kind == "websocket.http.response.start" and self.state == self.STATE_CONNECTING:
            self._denial = (int(message["status"]), list(message.get("headers") or []), [])
            return
        if kind == "websocket.http.response.body" and self._denial is not None:
            self._denial[2].append(bytes(message.get("body") or b""))
            if not message.get("more_body") and hasattr(self, "handshake_deferred"):
                status = self._denial[0]
                self.handshake_deferred.errback(ConnectionDeny(code=status, reason=RESPONSES.get(status, b"Error").decode()))
                del self.handshake_deferred
                self.server.protocol_disconnected(self)
            return
        super().handle_reply(message)

    def failHandshake(self, reason: str, code: int = 400, responseHeaders=None) -> None:
        if self._denial is None:
            return super().failHandshake(reason, code, responseHeaders)
        status, headers, parts = self._denial
        body = b"".join(parts)
        head = f"HTTP/1.1 {status} {reason}\r\n".encode()
        for name, value in headers:
            head += bytes(name) + b": " + bytes(value) + b"\r\n"
        head += f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        self.wasNotCleanReason = reason
        self.sendData(head + body)
        self.dropConnection(abort=False)

    def _connectionMade(self) -> None:
        # autobahn pretty-prints its ~40 settings for a debug line at every connection, logged
        # or not (~0.5 ms of CPU a socket on the bench VM, on the loop while other runs stream):
        # with its debug lines off, that formatting is skipped.
        if self.log.debug is not txaio.tx._no_op:
            return super()._connectionMade()
        autobahn_protocol.pformat = _unformatted
        try:
            super()._connectionMade()
        finally:
            autobahn_protocol.pformat = _pformat

    def sendData(self, data: bytes, sync: bool = False, chopsize: int | None = None) -> None:
        if chopsize or sync or self.send_queue or self.state != self.STATE_OPEN:
            self.write_bunch()
            return super().sendData(data, sync, chopsize)
        if self._bunch is None:
            self._bunch = [data]
            _Bunches.add(self)
        else:
            self._bunch.append(data)
        self.trafficStats.outgoingOctetsWireLevel += len(data)

    def write_bunch(self) -> None:
        bunch, self._bunch = self._bunch, None
        if bunch:
            write_now(self.transport, bunch[0] if len(bunch) == 1 else b"".join(bunch))

    def write_text(self, text: str) -> None:
        """A text frame written now, as daphne writes an application's `websocket.send` once
        it reaches the protocol; dropped once the socket is no longer open, as daphne drops
        a reply to a closed connection. Given to the application in its scope (WRITE_TEXT) so
        a run's frames skip the ASGI send chain (Channels' wrappers, daphne's reply checks):
        ~0.1-0.2 ms a frame here."""
        if self.state == self.STATE_OPEN:
            self.sendMessage(text.encode("utf8"), False)


_pformat = autobahn_protocol.pformat


def _unformatted(obj) -> str:
    return "(not formatted: debug logging is off)"


def write_now(transport, data: bytes) -> None:
    """Send `data` at once when nothing is queued before it on a plain TCP transport, as
    asyncio's transports do; what the socket does not take (and everything else: TLS, a
    backlog, a closing connection) goes through `transport.write`, which queues it in order.
    Twisted's own write only queues: the bytes left on the next turn of the loop, after two
    epoll_ctl calls and a writable event, once for every frame of a stream."""
    if (
        getattr(transport, "TLS", True)
        or not transport.connected
        or transport.disconnecting
        or transport._writeDisconnected
        or transport._tempDataBuffer
        or transport.offset != len(transport.dataBuffer)
    ):
        transport.write(data)
        return
    sent = transport.writeSomeData(data)
    if isinstance(sent, BaseException) or sent < len(data):  # a lost connection: Twisted's to notice
        transport.write(data if isinstance(sent, BaseException) else data[sent:])


class _Bunches:
    """The sockets with frames bunched in this turn of the event loop: written at its end."""

    due: list[LeanWebSocketProtocol] = []

    @classmethod
    def add(cls, protocol: LeanWebSocketProtocol) -> None:
        if not cls.due:
            try:
                asyncio.get_running_loop().call_soon(cls.write_all)
            except RuntimeError:  # no loop running (a bare reactor): nothing to wait for
                protocol.write_bunch()
                return
        cls.due.append(protocol)

    @classmethod
    def write_all(cls) -> None:
        due, cls.due = cls.due, []
        for protocol in due:
            try:
                protocol.write_bunch()
            except Exception:  # one socket's failure is not the others'
                log.exception("writing WebSocket frames failed")


class LeanWebSocketFactory(WebSocketFactory):
    protocol = LeanWebSocketProtocol


WRITE_TEXT = "navi.write_text"  # scope["extensions"][WRITE_TEXT]: LeanWebSocketProtocol.write_text
# scope["extensions"][IS_OPEN](): whether the handshake completed and the socket is still open. An
# accept that comes after daphne gave up on the handshake reaches no client.
IS_OPEN = "navi.is_open"


class LimitedServer(daphne_server.Server):
    def create_application(self, protocol, scope):
        if isinstance(protocol, LeanWebSocketProtocol):
            extensions = scope.setdefault("extensions", {})
            extensions[WRITE_TEXT] = protocol.write_text
            extensions[IS_OPEN] = lambda: protocol.state == protocol.STATE_OPEN
            extensions["websocket.http.response"] = {}  # LeanWebSocketProtocol.handle_reply
        elif isinstance(protocol, LimitedWebRequest) and not isinstance(protocol.content, BytesIO):
            hand_over_body(protocol, scope)
        return super().create_application(protocol, scope)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        from django.conf import settings

        if settings.LOG_FORMAT == "json" and self.action_logger is not None:
            self.action_logger = logs.JsonAccessLog()  # access lines as JSON, not NCSA text

    def run(self):
        # Server.run() builds its factories from these module-level names and listens at once.
        daphne_server.HTTPFactory = LimitedHTTPFactory
        daphne_server.WebSocketFactory = LeanWebSocketFactory
        freeze_startup_objects()
        super().run()


FULL_COLLECTION_EVERY = 100  # middle-generation collections per full one (Python's default: 10)


def freeze_startup_objects() -> None:
    """What the start loaded (Django, the apps, their modules: ~100k objects that live as long as
    the process) is moved out of the garbage collector's reach: a full collection walked all of
    it every few seconds under load, 60 ms with every stream of the process stopped (bench/README,
    fifth session). Garbage is collected first, so none of it is kept for good. What is left
    (~20k objects, ~17 ms a full collection) is walked a tenth as often: the cyclic garbage of a
    busy server is a few thousand small objects a minute, not worth a stall every 15 s."""
    gc.collect()
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_COLLECTION_EVERY)


class NaviCommandLine(CommandLineInterface):
    server_class = LimitedServer


def with_handshake_timeout(argv: list[str]) -> list[str]:
    """daphne's WebSocket handshake timeout (5 s by default) from WEBSOCKET_HANDSHAKE_TIMEOUT_S
    unless given: under load (100 sockets connecting at once on 2 cores) the application's
    accept came after 5 s and daphne reset sockets nginx had already forwarded (issue 36)."""
    if any(arg.startswith("--websocket_connect_timeout") for arg in argv):
        return argv
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "navi_project.settings")
    from django.conf import settings

    return ["--websocket_connect_timeout", str(int(settings.WEBSOCKET_HANDSHAKE_TIMEOUT_S)), *argv]


def take_job_workers(argv: list[str]) -> tuple[list[str], int]:
    """`--job-workers N` out of daphne's options (default: the NAVI_JOB_WORKERS setting, 1)."""
    rest, count = [], None
    args = iter(argv)
    for arg in args:
        if arg == "--job-workers":
            count = int(next(args))
        elif arg.startswith("--job-workers="):
            count = int(arg.split("=", 1)[1])
        else:
            rest.append(arg)
    if count is None:
        from django.conf import settings

        count = int(settings.NAVI_JOB_WORKERS)
    return rest, max(0, count)


def main(argv: list[str] | None = None) -> None:
    """daphne, and beside it NAVI_JOB_WORKERS job workers (navi_project.job_workers): one command,
    one Ctrl-C for both."""
    argv = with_handshake_timeout(sys.argv[1:] if argv is None else argv)
    argv, count = take_job_workers(argv)
    workers = JobWorkers(count).start() if count else None
    try:
        NaviCommandLine().run(argv)
    finally:
        if workers is not None:
            from django.conf import settings

            workers.stop(timeout=settings.JOBS_STOP_TIMEOUT_S + 5)


if __name__ == "__main__":
    main()
