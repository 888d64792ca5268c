"""Linking a messenger account to a Navi user, and the chats' sessions (sync ORM; the async
callers hop to a thread). Only a linked account gets past `linked_user`."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from messaging_app.models import TelegramChat, TelegramLink, TelegramLinkCode, hash_code
from sessions_app.models import Session
from sessions_app.transfer import default_profile

CODE_TTL = timedelta(minutes=10)


@dataclass
class Linked:
    """A linked sender in an allowed chat: whose account, and the chat's row."""

    user_id: int
    chat: TelegramChat


class LinkRefused(Exception):
    """The code cannot link this account; the message says why and what to do."""


def new_code(user) -> tuple[str, TelegramLinkCode]:
    """A fresh one-time code (the user's older unused codes stop working)."""
    TelegramLinkCode.objects.filter(user=user, used_at__isnull=True).delete()
    raw = secrets.token_urlsafe(18)  # 24 characters of [A-Za-z0-9_-]: a valid deep-link parameter
    row = TelegramLinkCode.objects.create(user=user, code_hash=hash_code(raw), expires_at=timezone.now() + CODE_TTL)
    return raw, row


def redeem(raw: str, telegram_user_id: int, username: str, chat_id: int) -> TelegramLink:
    """Link the sender to the code's user: the code must exist, be unused and unexpired."""
    now = timezone.now()
    row = TelegramLinkCode.objects.filter(code_hash=hash_code(raw.strip())).first()
    if row is None:
        raise LinkRefused("This link code is not valid. Open Navi → Settings → Connect Telegram for a new one.")
    if row.used_at is not None:
        raise LinkRefused("This link code was already used. Open Navi → Settings → Connect Telegram for a new one.")
    if row.expires_at <= now:
        raise LinkRefused("This link code has expired (codes last 10 minutes). Make a new one in Navi → Settings.")
    with transaction.atomic():
        if TelegramLinkCode.objects.filter(pk=row.pk, used_at__isnull=True).update(used_at=now) != 1:
            raise LinkRefused("This link code was already used. Open Navi → Settings → Connect Telegram for a new one.")
        other = TelegramLink.objects.filter(telegram_user_id=telegram_user_id).exclude(user_id=row.user_id).first()
        if other is not None:
            raise LinkRefused("This Telegram account is linked to another Navi account; unlink it there first.")
        link, _ = TelegramLink.objects.update_or_create(
            user_id=row.user_id,
            defaults={"telegram_user_id": telegram_user_id, "username": username or "", "chat_id": chat_id,
                      "linked_at": now},
        )
        TelegramChat.objects.update_or_create(chat_id=chat_id, defaults={"user_id": row.user_id, "kind": "private"})
    return link


def unlink(user) -> bool:
    deleted, _ = TelegramLink.objects.filter(user=user).delete()
    TelegramChat.objects.filter(user=user).delete()
    return bool(deleted)


def linked_user(telegram_user_id: int) -> int | None:
    return TelegramLink.objects.filter(telegram_user_id=telegram_user_id).values_list("user_id", flat=True).first()


def allowed_chat(telegram_user_id: int, chat_id: int, kind: str, title: str) -> tuple[int | None, TelegramChat | None]:
    """(the sender's Navi user, the chat's row if they may talk here). A group is recorded the
    first time so the owner can enable it in the admin; until then it is refused."""
    user_id = linked_user(telegram_user_id)
    if user_id is None:
        return None, None
    chat, _ = TelegramChat.objects.get_or_create(
        chat_id=chat_id, defaults={"user_id": user_id, "kind": kind, "title": title[:200], "enabled": kind == "private"}
    )
    if chat.user_id != user_id or (kind != "private" and not chat.enabled):
        return user_id, None
    return user_id, chat


def current_session(chat: TelegramChat) -> str:
    """The chat's session (a new one the first time, or when it was deleted)."""
    chat.refresh_from_db(fields=["session"])
    if chat.session_id is None or not Session.objects.filter(pk=chat.session_id, owner_id=chat.user_id).exists():
        return new_session(chat)
    return str(chat.session_id)


def new_session(chat: TelegramChat) -> str:
    session = Session.objects.create(owner_id=chat.user_id, profile=default_profile(chat.user_id))
    TelegramChat.objects.filter(pk=chat.pk).update(session=session)
    chat.session_id = session.pk
    return str(session.pk)


def switch_session(chat: TelegramChat, session_id: str) -> Session | None:
    """Point the chat at one of its owner's sessions; None for anyone else's (or a bad id)."""
    session = Session.objects.owned_by(chat.user_id, session_id).first()
    if session is not None:
        TelegramChat.objects.filter(pk=chat.pk).update(session=session)
    return session


def recent_sessions(user_id: int, limit: int = 8) -> list[Session]:
    return list(Session.objects.filter(owner_id=user_id).order_by("-last_active")[:limit])


def status_for(user) -> dict:
    """What GET /settings shows under "telegram"."""
    link = TelegramLink.objects.filter(user=user).first()
    return {"linked": link is not None, "username": (link.username or str(link.telegram_user_id)) if link else None}
