"""A terminal chat against a session: the same runs and frames as the web chat.

Thinking is dimmed, each tool call is one line, a call that needs approval asks y/n, Ctrl-C during a run stops it (the partial
answer is kept), Ctrl-C or Ctrl-D at the prompt quits.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys

from channels.layers import get_channel_layer
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from agent.models import Profile
from agent.runs.manager import RunActive, frames_group, get_run_manager
from agent.trust import approvals
from sessions_app.models import Session
from tools_app.mcp import client as mcp_client

DIM, BOLD, RED, RESET = "\033[2m", "\033[1m", "\033[31m", "\033[0m"


class Command(BaseCommand):
    help = "Chat with Navi in the terminal (streams; Ctrl-C stops a run, Ctrl-D quits)."

    def add_arguments(self, parser):
        parser.add_argument("--session", help="continue this session id (default: a new session)")
        parser.add_argument("--profile", default=settings.NAVI_DEFAULT_PROFILE, help="profile for a new session")
        parser.add_argument("--user", help="owner username (default: the first superuser)")

    def handle(self, *args, **opts):
        self.color = sys.stdout.isatty() and not opts["no_color"]
        session = self._session(opts)
        mcp_client.keep_state_here()  # the MCP servers' rows show what the web server sees
        self.stdout.write(f"Session {session.id} — profile {session.profile_id}. Ctrl-C stops a run, Ctrl-D quits.")
        asyncio.run(self._chat(str(session.id)))

    def _style(self, code: str, text: str) -> str:
        return f"{code}{text}{RESET}" if self.color else text

    def _session(self, opts) -> Session:
        User = get_user_model()
        user = (
            User.objects.filter(username=opts["user"]).first()
            if opts["user"]
            else User.objects.filter(is_superuser=True).order_by("pk").first()
        )
        if user is None:
            raise CommandError("no such user; create the owner with `make run` or `python manage.py createsuperuser`")
        if opts["session"]:
            session = Session.objects.owned_by(user, opts["session"]).first()
            if session is None:
                raise CommandError(f"no session {opts['session']} for {user.username}")
            return session
        if not Profile.objects.filter(pk=opts["profile"]).exists():
            known = ", ".join(Profile.objects.values_list("id", flat=True))
            raise CommandError(f"unknown profile '{opts['profile']}'; known: {known}")
        return Session.objects.create(owner=user, profile_id=opts["profile"])

    async def _chat(self, session_id: str) -> None:
        self.session_id = session_id
        layer = get_channel_layer()
        channel = await layer.new_channel("navi-chat.")
        await layer.group_add(frames_group(session_id), channel)
        loop = asyncio.get_running_loop()
        manager = get_run_manager()
        try:
            while True:
                self.stdout.write(self._style(BOLD, "\nyou> "), ending="")
                self.stdout.flush()
                line = await loop.run_in_executor(None, sys.stdin.readline)
                if not line:
                    self.stdout.write("")
                    return
                text = line.strip()
                if not text:
                    continue
                try:
                    run = await manager.start(session_id, text)
                except RunActive as exc:
                    self.stdout.write(self._style(RED, str(exc)))
                    continue
                loop.add_signal_handler(signal.SIGINT, run.stop_event.set)
                try:
                    await self._print_run(layer, channel, run.run_id)
                finally:
                    loop.remove_signal_handler(signal.SIGINT)
                await run.done.wait()
        finally:
            await layer.group_discard(frames_group(session_id), channel)
            await manager.shutdown()

    async def _ask_approval(self, frame: dict) -> None:
        """y / n / a(lways in this chat); end of input declines."""
        args = json.dumps(frame["arguments"], indent=2, ensure_ascii=False)
        self.stdout.write(self._style(BOLD, f"\nApprove {frame['tool']}? ") + frame["reason"])
        self.stdout.write(self._style(DIM, args))
        loop = asyncio.get_running_loop()
        while True:
            self.stdout.write("[y]es / [n]o / [a]lways in this chat: ", ending="")
            self.stdout.flush()
            answer = (await loop.run_in_executor(None, sys.stdin.readline)).strip().lower()
            if answer in ("y", "yes", "n", "no", "a", "always", ""):
                break
        decision = "approve" if answer[:1] in ("y", "a") else "deny"
        remember = "session" if answer[:1] == "a" else None
        try:
            await approvals.answer(self.session_id, frame["approval_id"], decision, remember)
        except (approvals.ApprovalNotFound, approvals.ApprovalAlreadyAnswered) as exc:
            self.stdout.write(self._style(RED, str(exc)))

    def _print_tool(self, frame: dict) -> None:
        prefix = "  ↳ " if frame.get("is_subagent") else ""
        if frame["type"] == "tool_started":
            self.stdout.write(self._style(DIM, f"{prefix}[{frame['tool']}] {json.dumps(frame['args'])[:100]} …"))
            return
        mark = "ok" if frame["success"] else "FAILED"
        result = " ".join(str(frame["result"]).split())[:100]
        self.stdout.write(self._style(DIM if frame["success"] else RED, f"{prefix}[{frame['tool']}] {mark}: {result}"))

    async def _print_run(self, layer, channel: str, run_id: str) -> None:
        thinking = False
        while True:
            message = await layer.receive(channel)
            frame = message.get("frame") or {}
            if frame.get("run_id") != run_id:
                continue
            kind = frame["type"]
            if kind == "thinking_delta":
                if not thinking:
                    self.stdout.write(self._style(DIM, "(thinking) "), ending="")
                thinking = True
                self.stdout.write(self._style(DIM, frame["delta"]), ending="")
            elif kind in ("thinking_end", "turn_thinking"):
                if thinking:
                    self.stdout.write("")
                thinking = False
            elif kind == "approval_required":
                await self._ask_approval(frame)
            elif kind == "approval_resolved":
                self.stdout.write(self._style(DIM, f"[approval {frame['decision']}]"))
            elif kind == "plan_ready":
                self.stdout.write(self._style(DIM, "plan:\n" + frame["plan"]))
            elif kind in ("tool_started", "tool_call"):
                self._print_tool(frame)
            elif kind == "stream_delta" and frame.get("is_subagent"):
                self.stdout.write(self._style(DIM, frame["delta"]), ending="")
            elif kind == "stream_delta":
                self.stdout.write(frame["delta"], ending="")
                self.stdout.flush()
            elif kind == "stream_end":  # post-turn workers may still emit (context_compressed): not waited for
                self.stdout.write(self._style(DIM, f"\n[{frame['context_tokens']}/{frame['max_context_tokens']} tokens]"))
                return
            elif kind == "stream_stopped":
                self.stdout.write(self._style(RED, "\n[stopped — the partial answer is kept]"))
                return
            elif kind == "error":
                self.stdout.write(self._style(RED, f"\nerror: {frame['message']}"))
                return
            elif kind in ("profile_switched", "context_compressed", "memory_saved"):
                details = {k: v for k, v in frame.items() if k not in ("type", "run_id", "seq")}
                self.stdout.write(self._style(DIM, f"[{kind}] {details}"))
