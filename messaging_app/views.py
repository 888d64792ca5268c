"""Connect Telegram from /settings: a one-time link code (`POST /settings/telegram/link`),
the state (`GET /settings/telegram`) and unlinking (`DELETE /settings/telegram`)."""

from __future__ import annotations

from asgiref.sync import async_to_sync
from django.conf import settings
from django.http import HttpRequest, JsonResponse

from messaging_app import links
from messaging_app.telegram import state, status
from messaging_app.telegram.client import make_bot
from messaging_app.telegram.poller import describe
from navi_project.http import ApiError, json_view
from navi_project.lazy import lazy_module
from sessions_app.auth import api_login_required

telegram = lazy_module("telegram")  # python-telegram-bot, ~80 ms of boot: first used with a bot token

NOT_CONFIGURED = "Telegram is not set up on this server: the admin sets TELEGRAM_BOT_TOKEN (from @BotFather) and restarts Navi."


def _bot_username() -> str:
    """The bot's @name for the deep link: stored by the poller, else asked once (getMe)."""
    row = status.bot_state()
    if row is not None and row.bot_username:
        return row.bot_username

    async def ask() -> str:
        bot = make_bot()
        try:
            return (await bot.get_me()).username or ""
        finally:
            await bot.shutdown()

    try:
        username = async_to_sync(ask)()
    except telegram.error.TelegramError as exc:
        message = describe(exc)
        state.record_error(message)
        raise ApiError(message, 503) from None
    state.state()
    state.record_ok(username)
    return username


@api_login_required
@json_view("GET", "DELETE")
def telegram_settings(request: HttpRequest) -> JsonResponse:
    """GET: {configured, mode, bot_username, linked, username, error}; DELETE: unlink at once."""
    if request.method == "DELETE":
        return JsonResponse({"ok": True, "unlinked": links.unlink(request.user)})
    row = status.bot_state() if settings.TELEGRAM_BOT_TOKEN else None
    return JsonResponse({
        "configured": bool(settings.TELEGRAM_BOT_TOKEN),
        "mode": settings.TELEGRAM_MODE,
        "bot_username": row.bot_username if row else "",
        "error": row.last_error if row else "",
        **links.status_for(request.user),
    })


@api_login_required
@json_view("POST")
def telegram_link(request: HttpRequest) -> JsonResponse:
    """A one-time code (10 minutes) and the deep link that sends `/start <code>` to the bot."""
    if not settings.TELEGRAM_BOT_TOKEN:
        raise ApiError(NOT_CONFIGURED, 409)
    username = _bot_username()
    code, row = links.new_code(request.user)
    return JsonResponse(
        {"code": code, "link": f"https://t.me/{username}?start={code}", "expires_at": row.expires_at.isoformat()},
        status=201,
    )
