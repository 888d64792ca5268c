"""POST /telegram/webhook: Telegram sends each update here with the secret header registered by
messaging_app.telegram.webhook; any worker may receive it, and the stored offset makes a
redelivered update a no-op."""

from __future__ import annotations

import hmac
import json
import logging

from channels.db import database_sync_to_async
from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from messaging_app.telegram import state
from messaging_app.telegram.service import current
from messaging_app.telegram.webhook import webhook_secret
from navi_project.lazy import lazy_module

telegram = lazy_module("telegram")  # python-telegram-bot, ~80 ms of boot: first used with a bot token

log = logging.getLogger("navi.telegram")
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"


@csrf_exempt
async def telegram_webhook(request: HttpRequest) -> JsonResponse:
    """POST /telegram/webhook: only Telegram knows the secret header; anything else is refused."""
    if request.method != "POST":
        return JsonResponse({"error": "POST only"}, status=405)
    service = current()
    if service is None or settings.TELEGRAM_MODE != "webhook":
        return JsonResponse({"error": "the Telegram webhook is not enabled on this server"}, status=404)
    if not hmac.compare_digest(request.headers.get(SECRET_HEADER, ""), webhook_secret()):
        log.warning("telegram: refused a webhook call without the right secret header")
        return JsonResponse({"error": "wrong or missing secret token"}, status=403)
    try:
        update = telegram.Update.de_json(json.loads(request.body), service.bot)
    except (ValueError, TypeError, KeyError):
        return JsonResponse({"error": "the body is not a Telegram update"}, status=400)
    if update is None or not await database_sync_to_async(state.claim_update)(update.update_id):
        return JsonResponse({"ok": True, "duplicate": True})
    service.enqueue(update)  # answered at once; Telegram need not wait for the handling
    return JsonResponse({"ok": True})
