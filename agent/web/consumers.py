"""SessionConsumer: the WebSocket of one chat session (`ws/sessions/<uuid>`).

It forwards the frames of the session's runs (group `session.<id>`) exactly once and in order:
on connect (or a `resume` frame) it asks the owning process for the run's buffered frames,
holds live frames until that replay arrives, then delivers by `seq`, dropping duplicates and
repairing gaps from the buffer. A replay nobody can serve (no process in the chat's control
group) is given up on at once instead.

When Redis goes away (navi_project.redis_layer) the socket stays open: it tells the page once
(`live_paused`), and when Redis is back (`live_resumed`) asks for what it missed; the run's
owner also sends its frames again (`run.catchup`). A handshake meanwhile is answered 503.

With the single-process layer the socket attaches itself to its channel, so a run's frames
reach `run_event` in the run's own task, not through the socket's queue and task; frames are
then delivered from two tasks (the run's, and the socket's for replays), so delivery holds
`self.relaying` to keep its order.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import logging
import uuid
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.exceptions import StopConsumer
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.db import connection

from agent.runs.manager import RunActive, active_run_id, control_group, frames_group, get_run_manager, live_run_id
from agent.trust import approvals
from agent.web.mcp_attach import AttachError, resource_blocks
from navi_project import hotsql, metrics
from navi_project.hop import db_hop
from navi_project.redis_layer import LayerUnavailable
from sessions_app.history import HistoryError
from sessions_app.models import Session
from sessions_app.uploads import describe_uploaded_files

log = logging.getLogger(__name__)

MAX_CONTENT_CHARS = 100_000
MAX_IMAGE_BYTES = 20 * 1024 * 1024
MAX_IMAGES = 10
REPLAY_TIMEOUT_S = 2.0
REPLAY_ATTEMPTS = 3  # a busy owner may answer late; a live run is asked until it answers
PAUSED_TEXT = ("Live updates paused: the server lost its message bus (Redis). The answer is still being "
               "written and saved; it shows here as soon as the connection is back.")
UNAVAILABLE_TEXT = "live updates are unavailable (the server's message bus is down); try again in a few seconds"


class FrameError(Exception):
    """A bad client frame; the message goes back in an `error` frame."""


def decode_image(value: object) -> str:
    """Validate one image (base64 or a data: URI) and return bare base64."""
    if not isinstance(value, str) or not value:
        raise FrameError("each image must be a non-empty base64 string or data: URI")
    if value.startswith("data:"):
        header, _, value = value.partition(",")
        if ";base64" not in header or not header[5:].startswith("image/"):
            raise FrameError("image data URIs must look like data:image/<type>;base64,...")
    value = value.strip()
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise FrameError("an image is not valid base64; send the file's bytes base64-encoded") from None
    if not raw:
        raise FrameError("an image is empty")
    if len(raw) > MAX_IMAGE_BYTES:
        raise FrameError(f"an image is larger than {MAX_IMAGE_BYTES // (1024 * 1024)} MB; send a smaller one")
    return value


def check_content(text: object, *, has_images: bool) -> str:
    """The message text; it may be empty only when images come with it."""
    text = "" if text is None else text
    if not isinstance(text, str):
        raise FrameError("message content must be text")
    if not text.strip() and not has_images:
        raise FrameError("message content is required and must be non-empty text (or send images)")
    if len(text) > MAX_CONTENT_CHARS:
        raise FrameError(f"message is {len(text)} characters; the limit is {MAX_CONTENT_CHARS}")
    return text


# Channel-layer messages whose handlers never touch the database.
_NO_DB_MESSAGES = frozenset({"run.event", "run.replay", "run.catchup", "presence.ping", "layer.down", "layer.up"})
# The socket's own events: Channels closes old database connections before each (a thread hop).
_SOCKET_MESSAGES = frozenset({"websocket.connect", "websocket.receive", "websocket.disconnect"})


def _persistent_sqlite() -> bool:
    """Channels closes old database connections (a thread hop) before every message. A kept
    SQLite connection (CONN_MAX_AGE None) is never old, so a socket's connect, frames and
    disconnect need no hop before their own work: one was between "send" and the LLM call,
    two more in every socket's life."""
    return connection.vendor == "sqlite" and connection.settings_dict.get("CONN_MAX_AGE") is None


class SessionConsumer(AsyncJsonWebsocketConsumer):
    async def dispatch(self, message: dict) -> None:
        """Relay run frames without Channels' per-message `close_old_connections` thread hop,
        which capped a stream at ~2 000 frames/s; everything else goes the usual way."""
        kind = message.get("type")
        if kind in _NO_DB_MESSAGES or (kind in _SOCKET_MESSAGES and _persistent_sqlite()):
            await getattr(self, kind.replace(".", "_"))(message)
            return
        await super().dispatch(message)

    async def connect(self) -> None:
        self.session_id: str | None = None
        self.cursor: dict[str, int] = {}  # run id -> last seq sent to this socket
        self.pending: list[dict] = []
        self.awaiting: str | None = None  # a replay request is out (its token)
        self.relaying = asyncio.Lock()  # one delivery at a time (see the module's docstring)
        # Navi's own server hands over a direct frame writer (navi_project.serve.WRITE_TEXT, not
        # imported: importing serve installs the reactor), so frames skip the ASGI send chain;
        # under any other server they go through `send`.
        self.write_text = (self.scope.get("extensions") or {}).get("navi.write_text")
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.accept()
            await self.close(code=4401)
            return
        query = parse_qs(self.scope.get("query_string", b"").decode())
        run_id = (query.get("run_id") or [""])[0]
        raw = self.scope["url_route"]["kwargs"]["session_id"]
        if _persistent_sqlite():  # nothing to close before or after: the hot path's own hop
            session_id, active = await db_hop(self._owned_session_now, user, raw, not run_id)
        else:
            session_id, active = await database_sync_to_async(self._owned_session_now)(user, raw, not run_id)
        if session_id is None:
            await self.accept()
            await self.close(code=4004)
            return
        self.group = frames_group(session_id)
        try:
            await self.channel_layer.group_add(self.group, self.channel_name)
        except LayerUnavailable:
            await self.channel_layer.group_discard(self.group, self.channel_name)
            await self._refuse_unavailable()
            return
        self.session_id = session_id
        await self.accept()
        is_open = (self.scope.get("extensions") or {}).get("navi.is_open")  # navi_project.serve.IS_OPEN
        if is_open is not None and not is_open():
            # The server gave up on the handshake before this accept (its timeout): no client
            # has this socket, so it is neither counted nor attached.
            await self.channel_layer.group_discard(self.group, self.channel_name)
            self.session_id = None
            return
        attach = getattr(self.channel_layer, "attach", None)
        if attach is not None:  # after accept: a frame may be written as soon as it is attached
            attach(self.channel_name, self.run_event)
        metrics.websocket_opened()
        after = (query.get("after_seq") or ["0"])[0]
        if run_id:
            async with self.relaying:
                self.cursor[run_id] = int(after) if after.isdigit() else 0
                await self._request_replay(run_id, self.cursor[run_id], announce=True)
        elif active:
            async with self.relaying:
                await self._request_replay(active, 0)

    async def _refuse_unavailable(self) -> None:
        """A handshake while the channel layer is down: HTTP 503 (the page tries again), where
        the server offers ASGI's denial response; elsewhere close code 1013, "try again later"."""
        if "websocket.http.response" in (self.scope.get("extensions") or {}):
            body = json.dumps({"error": UNAVAILABLE_TEXT}).encode()
            await self.base_send({"type": "websocket.http.response.start", "status": 503,
                             "headers": [(b"content-type", b"application/json"), (b"retry-after", b"2")]})
            await self.base_send({"type": "websocket.http.response.body", "body": body})
        else:
            await self.accept()
            await self.close(code=1013)

    async def websocket_disconnect(self, message: dict) -> None:
        """Channels' own, without its closing of old database connections (a thread hop) after
        `disconnect` when the kept SQLite connection cannot be old (`_persistent_sqlite`)."""
        if not _persistent_sqlite():
            return await super().websocket_disconnect(message)
        for group in self.groups:
            await self.channel_layer.group_discard(group, self.channel_name)
        await self.disconnect(message["code"])
        raise StopConsumer()

    async def disconnect(self, code: int) -> None:
        if self.session_id:
            metrics.websocket_closed()
            detach = getattr(self.channel_layer, "detach", None)
            if detach is not None:
                detach(self.channel_name)
            await self.channel_layer.group_discard(self.group, self.channel_name)

    def _owned_session_now(self, user, raw: str, with_run: bool) -> tuple[str | None, str | None]:
        """(the session's id if `user` owns it, else None; with `with_run`, the id of its live
        run, if any): one query, one thread hop for every socket that connects."""
        try:
            sid = uuid.UUID(str(raw))
        except ValueError:
            return None, None
        found = hotsql.select(Session, "id = %s AND owner_id = %s", [hotsql.prep(Session, "id", sid), user.pk])
        if not found:
            return None, None
        return str(sid), (live_run_id(found[0]) if with_run else None)

    # --- client frames ---------------------------------------------------------------------
    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if text_data is None:
            await self._error("binary frames are not supported; send JSON text frames")
            return
        try:
            content = json.loads(text_data)
        except ValueError:
            await self._error("frame is not valid JSON")
            return
        if not isinstance(content, dict):
            await self._error('frame must be a JSON object with a "type"')
            return
        try:
            await self.receive_json(content)
        except FrameError as exc:
            await self._error(str(exc))

    async def receive_json(self, content: dict, **kwargs) -> None:
        kind = content.get("type")
        if kind == "message":
            await self._start_run(content)
        elif kind == "stop":
            try:
                stopped = await get_run_manager().request_stop(self.session_id)
            except LayerUnavailable:
                raise FrameError("the run is on another server process and the message bus (Redis) is down; "
                                 "press Stop again in a few seconds") from None
            if not stopped:
                await self._error("no active run to stop")
        elif kind == "resume":
            run_id = content.get("run_id")
            after = content.get("after_seq", 0)
            if not isinstance(run_id, str) or not isinstance(after, int) or after < 0:
                raise FrameError('resume needs {"run_id": str, "after_seq": int >= 0}')
            async with self.relaying:
                self.cursor[run_id] = after
                await self._request_replay(run_id, after, announce=True)
        elif kind == "edit":
            await self._edit(content)
        elif kind == "regenerate":
            await self._begin(self.session_id, "", [], mode="regenerate")
        elif kind == "approval":
            await self._answer_approval(content)
        elif kind == "ping":
            await self.send_json({"type": "pong"})
        else:
            raise FrameError(
                f"unknown frame type {kind!r}; expected message, stop, resume, edit, regenerate, approval or ping"
            )

    async def _start_run(self, frame: dict) -> None:
        images = frame.get("images") or []
        if not isinstance(images, list) or len(images) > MAX_IMAGES:
            raise FrameError(f"images must be a list of at most {MAX_IMAGES} base64 strings")
        images = [decode_image(i) for i in images]
        text = check_content(frame.get("content"), has_images=bool(images))
        try:  # before the files block: the page reads that block off the end of the message
            text += await resource_blocks(self.scope["user"].pk, frame.get("mcp_resources"))
        except AttachError as exc:
            raise FrameError(str(exc)) from None
        files = frame.get("files") or []
        if files:

            try:
                text += await database_sync_to_async(describe_uploaded_files)(self.session_id, files)
            except ValueError as exc:
                raise FrameError(str(exc)) from None
        await self._begin(self.session_id, text, images)

    async def _edit(self, frame: dict) -> None:
        text = check_content(frame.get("content"), has_images=False)
        await self._begin(self.session_id, text, [], mode="edit", message_id=frame.get("message_id"))

    async def _begin(self, session_id: str, text: str, images: list[str], **mode) -> None:

        try:
            await get_run_manager().start(session_id, text, images, **mode)
        except RunActive as exc:
            await self._error(str(exc))
        except HistoryError as exc:
            await self._error(exc.message)

    async def _answer_approval(self, frame: dict) -> None:
        """The owner's answer to a pending approval (any socket of the session, any worker).
        The run announces the outcome with approval_resolved to every socket."""
        user = self.scope["user"]
        try:
            await approvals.answer(
                self.session_id, frame.get("approval_id"), frame.get("decision"), frame.get("remember"), user.pk
            )
        except (ValueError, approvals.ApprovalNotFound, approvals.ApprovalAlreadyAnswered) as exc:
            raise FrameError(str(exc)) from None

    # --- frames from the channel layer -------------------------------------------------------
    async def presence_ping(self, event: dict) -> None:
        """Someone asks whether this chat is open (agent.frames.notices): yes, this socket shows it."""
        with contextlib.suppress(LayerUnavailable):
            await self.channel_layer.send(event["reply_to"], {"type": "run.presence", "ping_id": event["ping_id"]})

    async def layer_down(self, event: dict) -> None:
        """The channel layer lost Redis: say so once; the run goes on and is caught up later."""
        if self.session_id:
            await self._send_frame({"type": "live_paused", "message": PAUSED_TEXT})

    async def layer_up(self, event: dict) -> None:
        """Redis is back (this socket's group joined again): ask for what was missed meanwhile."""
        if not self.session_id:
            return
        await self._send_frame({"type": "live_resumed"})
        async with self.relaying:
            run_id = next(reversed(self.cursor), "")  # the newest run this socket followed, else the live one
            await self._request_replay(run_id, self.cursor.get(run_id, 0))

    async def run_catchup(self, event: dict) -> None:
        """A run's frames sent again after an outage by its owner: the ones this socket lacks
        go out in order; it also answers a replay this socket was waiting for."""
        async with self.relaying:
            for frame in event["frames"]:
                await self._deliver(frame, repairing=True)
            if self.awaiting is not None:
                self.awaiting = None
                await self._flush_pending()

    async def run_event(self, event: dict) -> None:
        frame = event["frame"]
        async with self.relaying:
            if "seq" not in frame:
                # Not a frame of a live run (memory_saved from background extraction; a dead
                # run's resume_unavailable, agent.runs.reaper): nothing to order or replay, as is.
                await self._send_frame(frame)
            elif self.awaiting is not None:
                self.pending.append(frame)
            else:
                await self._deliver(frame)

    async def run_replay(self, event: dict) -> None:
        async with self.relaying:
            if self.awaiting is None:
                return
            self.awaiting = None
            for frame in event["frames"]:
                await self._deliver(frame, repairing=True)
            await self._flush_pending()

    async def run_replay_timeout(self, event: dict) -> None:
        if self.awaiting != event["token"]:
            return
        run_id, attempt = event.get("run_id", ""), int(event.get("attempt") or 1)
        if run_id and (attempt < REPLAY_ATTEMPTS or await active_run_id(self.session_id) == run_id):
            # The owner may only be slow (a busy worker): ask again rather than deliver with a
            # gap or tell the client the run is gone (`_request_replay` knows when nobody listens).
            async with self.relaying:
                if self.awaiting == event["token"]:
                    await self._request_replay(run_id, self.cursor.get(run_id, 0), bool(event.get("announce")), attempt + 1)
            return
        # No process has that run any more (finished long ago, or its worker died): say so,
        # so the client reloads the history instead of waiting, then deliver what we hold.
        async with self.relaying:
            if self.awaiting != event["token"]:
                return
            await self._replay_unavailable(event.get("run_id", ""), bool(event.get("announce")))

    async def _replay_unavailable(self, run_id: str, announce: bool) -> None:
        """(Holding `relaying`.) Nobody can replay `run_id`: tell the client if it asked, and
        deliver the live frames held meanwhile, gaps and all (nobody can fill them)."""
        self.awaiting = None
        if announce:
            await self.send_json({"type": "resume_unavailable", "run_id": run_id})
        await self._flush_pending(accept_gaps=True)

    async def _flush_pending(self, accept_gaps: bool = False) -> None:
        pending, self.pending = sorted(self.pending, key=lambda f: f["seq"]), []
        for frame in pending:
            await self._deliver(frame, repairing=accept_gaps)

    async def _deliver(self, frame: dict, repairing: bool = False) -> None:
        run_id, seq = frame["run_id"], frame["seq"]
        last = self.cursor.get(run_id, 0)
        if seq <= last:
            return  # already sent (replay overlapping live frames)
        if seq > last + 1 and not repairing:
            # A frame went missing (full channel, reconnect race): hold this one and fetch the
            # gap from the run's buffer; the replay delivers both in order.
            self.pending.append(frame)
            if self.awaiting is None:
                await self._request_replay(run_id, last)
            return
        self.cursor[run_id] = seq
        await self._send_frame(frame)

    async def _send_frame(self, frame: dict) -> None:
        if self.write_text is not None:
            self.write_text(json.dumps(frame))
        else:
            await self.send(text_data=json.dumps(frame))

    async def _request_replay(self, run_id: str, after_seq: int, announce: bool = False, attempt: int = 1) -> None:
        """Ask the run's owner for its frames after `after_seq`; `announce` = tell the client
        (resume_unavailable) if nobody has that run any more."""
        token = uuid.uuid4().hex
        self.awaiting = token
        try:
            if attempt == 1 and await self._nobody_owns_a_run():
                # No process listens for this chat's runs (all finished and forgotten, or the
                # owner lost its group): waiting for an answer would only hold the live frames.
                await self._replay_unavailable(run_id, announce)
                return
            await self.channel_layer.group_send(
                control_group(self.session_id),
                {
                    "type": "run.replay_request",
                    "session_id": self.session_id,
                    "run_id": run_id,
                    "after_seq": after_seq,
                    "reply_to": self.channel_name,
                },
            )
        except LayerUnavailable:
            self.awaiting = None  # asked again when the layer is back (layer_up)
            return

        async def timeout() -> None:
            await asyncio.sleep(REPLAY_TIMEOUT_S)
            await self.channel_layer.send(
                self.channel_name,
                {"type": "run.replay_timeout", "token": token, "run_id": run_id, "announce": announce, "attempt": attempt},
            )

        task = asyncio.create_task(timeout())
        task.add_done_callback(lambda t: t.exception() if not t.cancelled() else None)

    async def _nobody_owns_a_run(self) -> bool:
        group_size = getattr(self.channel_layer, "group_size", None)
        return group_size is not None and await group_size(control_group(self.session_id)) == 0

    async def _error(self, message: str) -> None:
        await self.send_json({"type": "error", "message": message})
