from django.contrib import admin

from .models import BotState, TelegramChat, TelegramLink


@admin.register(TelegramLink)
class TelegramLinkAdmin(admin.ModelAdmin):
    list_display = ("user", "username", "telegram_user_id", "linked_at")
    search_fields = ("username", "user__username")


@admin.register(TelegramChat)
class TelegramChatAdmin(admin.ModelAdmin):
    list_display = ("chat_id", "kind", "title", "user", "enabled", "session")
    list_filter = ("kind", "enabled")
    list_editable = ("enabled",)  # a group talks to Navi only once enabled here
    raw_id_fields = ("session",)


@admin.register(BotState)
class BotStateAdmin(admin.ModelAdmin):
    list_display = ("name", "bot_username", "lease_holder", "lease_expires_at", "update_offset", "last_error")
