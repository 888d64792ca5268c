"""Where a run's conversation lives: the database (chat sessions) or memory (sub-agents).

The loop only appends and updates; a turn is saved row by row as it happens, so a crash or a
stop leaves everything up to that point on disk.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from agent.context import clock, recall
from agent.llm.messages import ChatMessage, ToolCall
from agent.models import Profile
from navi_project import hotsql
from navi_project.hop import db_hop
from sessions_app.models import Message, Session

log = logging.getLogger(__name__)

FLUSH_INTERVAL_S = 1.0  # partial answers reach the database at least this often (a crash loses at most this much)


def row_to_message(row: Message) -> ChatMessage:
    return ChatMessage(
        role=row.role,
        content=row.content,
        thinking=row.thinking,
        images=list(row.images or []),
        tool_calls=[ToolCall.from_dict(c) for c in row.tool_calls or []],
        tool_call_id=row.tool_call_id,
        name=row.name,
        is_summary=row.is_summary,
        db_id=row.id,
    )


class Conversation:
    """In-memory conversation (sub-agents, `run_ephemeral`): nothing is persisted."""

    model_choice = None  # the turn's model and why (agent.llm.choice.ModelChoice), set as the turn starts

    def __init__(self, profile_id: str, owner_id: int | None = None) -> None:
        self.id = f"subagent_{uuid.uuid4().hex[:12]}"
        self.profile_id = profile_id
        self.owner_id = owner_id
        self.context: list[ChatMessage] = []
        self.token_count = 0
        self.window = 0
        self.persistent = False
        self.plan: tuple[ChatMessage | None, str] = (None, "")  # this turn's plan (agent.turn.planning)
        self.clock = clock.now()  # the turn's time, the same in every call of it (agent.context.clock)
        self.memory_ahead: str | None = None  # the memory summary read with the turn's start
        self.facts_known: bool | None = None  # whether the owner has facts (read with the summary)
        self._recalled: tuple[str, list] | None = None  # (request, its facts): recalled once per turn

    async def recalled_facts(self) -> list:
        """The owner's facts that bear on the turn's request (agent.context.recall), found once
        per request."""
        request = self.last_request()
        if self._recalled is None or self._recalled[0] != request:
            self._recalled = (request, await recall.relevant_facts(self.owner_id, request, known=self.facts_known))
        return self._recalled[1]

    def take_memory(self) -> str | None:
        """The memory summary read ahead for the turn's first call (None: read it now). Later
        calls read it again: a tool of the turn may have changed the memory."""
        summary, self.memory_ahead = self.memory_ahead, None
        return summary

    async def add(
        self, msg: ChatMessage, *, display: bool = True, status: str = "complete", context: bool = True
    ) -> ChatMessage:
        if context:
            self.context.append(msg)
        return msg

    async def update(self, msg: ChatMessage, *, status: str, force: bool = True, tokens: int | None = None) -> None:
        """Persist the current content of a streamed message (no-op in memory)."""

    async def save_streaming(
        self, msg: ChatMessage, *, status: str = "complete", force: bool = True, tokens: int | None = None
    ) -> None:
        """Save the answer being streamed; in memory only the finished (or interrupted) one counts.
        `tokens`: the context's size after this call, stored with it (`set_token_count`)."""
        if status != "partial":
            await self.add(msg, status=status)
        if tokens is not None:
            self.token_count = tokens

    async def save_meta(self, msg: ChatMessage) -> None:
        """Persist what the live view shows besides the text (an answer's sources); no-op in memory."""

    def last_request(self) -> str:
        """The user's latest message: what tool selection ranks the tools against."""
        return next((m.content for m in reversed(self.context) if m.role == "user" and not m.is_summary), "")

    async def set_token_count(self, tokens: int) -> None:
        self.token_count = tokens

    async def current_profile_id(self) -> str:
        return self.profile_id

    async def apply_compression(self, new_context: list[ChatMessage]) -> None:
        """Replace the context with a compressed one (agent.turn.compression); tokens restart at 0."""
        self.context = list(new_context)
        self.token_count = 0


@dataclass
class _FlushState:
    last: float = 0.0
    pending: asyncio.Task | None = None  # a partial save in flight (not awaited by the stream)


class DBConversation(Conversation):
    """A chat session's conversation: rows in sessions_app.Message."""

    def __init__(self, session: Session, context: list[ChatMessage]) -> None:
        self.id = str(session.id)
        self.session = session
        self.profile_id = session.profile_id
        self.owner_id = session.owner_id
        self.context = context
        self.token_count = session.context_token_count
        self.window = session.context_window  # the turn's window, stored with the token count
        self.persistent = True
        self.plan = (None, "")
        self.clock = clock.now()
        self.memory_ahead = None
        self.facts_known = None
        self._recalled = None
        self._flush: dict[int, _FlushState] = {}

    @classmethod
    async def open(cls, session_id: str) -> "DBConversation":
        return await db_hop(cls.load, session_id)  # one thread hop, not one per query

    @classmethod
    def load(cls, session_id: str, session: Session | None = None) -> "DBConversation":
        """The session with its profile and context rows (sync: for one thread hop of several
        steps; hot-path SQL, navi_project.hotsql). `session`: its row, when the caller just read it."""
        sid = hotsql.prep(Session, "id", session_id)
        if session is None:
            found = hotsql.select(Session, "id = %s", [sid])
            if not found:
                raise Session.DoesNotExist(f"no session {session_id}")
            session = found[0]
        profiles = hotsql.select(Profile, "id = %s", [session.profile_id])
        if profiles:  # the loop needs it next; agent.llm.choice settles its model (the chat's own first)
            session.profile = profiles[0]
        # A compression summary is always the first context message (there is at most one in
        # context: the next compression folds it), yet its seq is newer than the rows it replaced.
        rows = hotsql.select(Message, "session_id = %s AND in_context = %s", [sid, True], tail="ORDER BY is_summary DESC, seq")
        return cls(session, [row_to_message(r) for r in rows])

    async def add(
        self, msg: ChatMessage, *, display: bool = True, status: str = "complete", context: bool = True
    ) -> ChatMessage:
        """Append a row; `context=False` rows are shown but never sent to the model (plans)."""
        return await db_hop(self.add_now, msg, display=display, status=status, context=context)

    def add_now(self, msg: ChatMessage, *, display: bool = True, status: str = "complete", context: bool = True) -> ChatMessage:
        """`add` in the calling thread (sync; three queries)."""
        self._add_row(msg, display, status, context)
        if context:
            self.context.append(msg)
        return msg

    def _add_row(self, msg: ChatMessage, display: bool, status: str, context: bool) -> None:
        # One transaction, one commit (SQLite: one write of the WAL) for the three statements;
        # also what keeps two writers from taking the same seq.
        with transaction.atomic():
            self._add_row_now(msg, display, status, context)

    def _add_row_now(self, msg: ChatMessage, display: bool, status: str, context: bool) -> None:
        sid = hotsql.prep(Session, "id", self.session.pk)
        last = hotsql.values(f"SELECT MAX(seq) FROM {hotsql.table(Message)} WHERE session_id = %s", [sid])[0][0]
        msg.db_id = hotsql.insert(
            Message,
            session_id=self.session.pk,
            seq=(last or 0) + 1,
            role=msg.role,
            content=msg.content,
            thinking=msg.thinking,
            images=list(msg.images),
            tool_calls=[c.as_dict() for c in msg.tool_calls],
            tool_call_id=msg.tool_call_id,
            name=msg.name,
            is_summary=msg.is_summary,
            in_display=display,
            in_context=context,
            status=status,
            meta=msg.meta,
        )
        now = hotsql.prep(Session, "last_active", timezone.now())
        if msg.role == "user" and not self.session.title and msg.content.strip():
            self.session.title = _title_from(msg.content)
            hotsql.execute(
                f"UPDATE {hotsql.table(Session)} SET last_active = %s, title = %s WHERE id = %s", [now, self.session.title, sid]
            )
        else:
            hotsql.execute(f"UPDATE {hotsql.table(Session)} SET last_active = %s WHERE id = %s", [now, sid])

    async def update(self, msg: ChatMessage, *, status: str, force: bool = True, tokens: int | None = None) -> None:
        """Save the message's current content. A throttled partial save (`force=False`) runs
        beside the stream, so a busy database never holds up the deltas; a forced save waits
        for it first, so the rows end in the right state (and stores `tokens`, if given, in the
        same thread hop)."""
        if msg.db_id is None:
            return
        state = self._flush.setdefault(msg.db_id, _FlushState())
        now = time.monotonic()
        if not force:
            if now - state.last < FLUSH_INTERVAL_S or (state.pending is not None and not state.pending.done()):
                return
            state.last = now
            state.pending = asyncio.create_task(self._save_partial(msg.db_id, _row_fields(msg, status)))
            return
        if state.pending is not None:
            await asyncio.shield(state.pending)
        state.last = now
        if tokens is None:
            await db_hop(_save_row, msg.db_id, _row_fields(msg, status))
        else:
            self.token_count = tokens
            await db_hop(self._save_counted_now, msg.db_id, _row_fields(msg, status), tokens)

    def _save_counted_now(self, row_id: int, fields: dict, tokens: int) -> None:
        _save_row(row_id, fields)
        self._count_now(tokens)

    @staticmethod
    async def _save_partial(row_id: int, fields: dict) -> None:
        try:
            await db_hop(_save_row, row_id, fields)
        except Exception:  # the next flush or the final save writes it again
            log.warning("saving the partial answer %s failed", row_id, exc_info=True)

    async def save_streaming(
        self, msg: ChatMessage, *, status: str = "complete", force: bool = True, tokens: int | None = None
    ) -> None:
        """The answer being streamed: its first save adds the row, later ones update it (partial
        updates at most every FLUSH_INTERVAL_S unless `force`). A call's final save stores the
        context's size (`tokens`) in the same thread hop: it was a hop of its own after every call."""
        if msg.db_id is None:
            if tokens is None:
                await self.add(msg, status=status)
            else:
                self.token_count = tokens
                await db_hop(self._add_counted_now, msg, status, tokens)
        else:
            await self.update(msg, status=status, force=force, tokens=tokens)

    def _add_counted_now(self, msg: ChatMessage, status: str, tokens: int) -> None:
        self.add_now(msg, status=status)
        self._count_now(tokens)

    async def set_token_count(self, tokens: int) -> None:
        self.token_count = tokens
        await db_hop(self._count_now, tokens)

    async def save_meta(self, msg: ChatMessage) -> None:
        if msg.db_id is not None:
            await db_hop(_save_row, msg.db_id, {"meta": msg.meta})

    def _count_now(self, tokens: int) -> None:
        hotsql.execute(
            f"UPDATE {hotsql.table(Session)} SET context_token_count = %s, context_window = %s, last_active = %s "
            "WHERE id = %s",
            [tokens, self.window, hotsql.prep(Session, "last_active", timezone.now()),
             hotsql.prep(Session, "id", self.session.pk)],
        )

    async def apply_compression(self, new_context: list[ChatMessage]) -> None:
        """Rows not in `new_context` leave the context; a new summary row enters it.

        The summary row takes the next seq (seq stays append-only and unique) and is ordered
        first by `open()` via is_summary. Display rows are never touched.
        """
        kept_ids = [m.db_id for m in new_context if m.db_id is not None]
        summaries = [m for m in new_context if m.is_summary and m.db_id is None]
        await db_hop(self._apply_compression_rows, kept_ids, summaries)
        self.context = list(new_context)
        self.token_count = 0

    def _apply_compression_rows(self, kept_ids: list[int], summaries: list[ChatMessage]) -> None:
        with transaction.atomic():
            Message.objects.filter(session_id=self.session.pk, in_context=True).exclude(pk__in=kept_ids).update(
                in_context=False
            )
            seq = (Message.objects.filter(session_id=self.session.pk).aggregate(m=Max("seq"))["m"] or 0) + 1
            for msg in summaries:
                row = Message.objects.create(
                    session_id=self.session.pk,
                    seq=seq,
                    role="user",
                    content=msg.content,
                    is_summary=True,
                    in_display=False,
                    in_context=True,
                )
                msg.db_id = row.id
                seq += 1
            Session.objects.filter(pk=self.session.pk).update(context_token_count=0)

    async def current_profile_id(self) -> str:
        pid = await Session.objects.filter(pk=self.session.pk).values_list("profile_id", flat=True).afirst()
        self.profile_id = pid or self.profile_id
        return self.profile_id


def _save_row(row_id: int, fields: dict) -> None:
    """The streamed message's columns (content, thinking, tool_calls, status) saved."""
    names = list(fields)
    hotsql.execute(
        f"UPDATE {hotsql.table(Message)} SET {', '.join(f'{hotsql.column(Message, n)} = %s' for n in names)} WHERE id = %s",
        [hotsql.prep(Message, n, fields[n]) for n in names] + [row_id],
    )


def _row_fields(msg: ChatMessage, status: str) -> dict:
    return {
        "content": msg.content,
        "thinking": msg.thinking,
        "tool_calls": [c.as_dict() for c in msg.tool_calls],
        "status": status,
    }


def _title_from(content: str) -> str:
    first_line = content.strip().splitlines()[0]
    return first_line[:77] + "…" if len(first_line) > 80 else first_line
