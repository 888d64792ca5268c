from django.contrib import admin

from .models import ApiToken, LoginAttempt, Message, Session, SessionFile, UserSettings


class MessageInline(admin.TabularInline):
    model = Message
    extra = 0
    can_delete = False
    fields = ("seq", "role", "status", "in_display", "in_context", "is_summary", "version_of", "parked_by", "content", "name", "created_at")
    readonly_fields = fields
    ordering = ("seq",)
    show_change_link = True

    def has_add_permission(self, request, obj=None):
        return False


class SessionFileInline(admin.TabularInline):
    model = SessionFile
    extra = 0
    fields = ("name", "size", "published", "created_at")
    readonly_fields = ("name", "size", "created_at")


@admin.register(Session)
class SessionAdmin(admin.ModelAdmin):
    list_display = ("__str__", "owner", "profile", "pinned", "last_active", "context_token_count", "message_count")
    list_filter = ("pinned", "profile", "owner")
    search_fields = ("id", "title", "messages__content")
    readonly_fields = ("id", "created_at", "last_active", "context_token_count", "active_run_id", "active_run_heartbeat")
    inlines = [MessageInline, SessionFileInline]
    date_hierarchy = "last_active"

    @admin.display(description="messages")
    def message_count(self, obj):
        return obj.messages.count()

    def get_search_results(self, request, queryset, search_term):
        queryset, _ = super().get_search_results(request, queryset, search_term)
        return queryset.distinct(), False


@admin.register(Message)
class MessageAdmin(admin.ModelAdmin):
    list_display = ("session", "seq", "role", "status", "short_content", "in_display", "in_context", "created_at")
    list_filter = ("role", "status", "is_summary", "in_context", "in_display")
    search_fields = ("content", "session__title", "session__id")
    readonly_fields = [f.name for f in Message._meta.fields]

    @admin.display(description="content")
    def short_content(self, obj):
        return obj.content[:80]

    def has_add_permission(self, request):
        return False


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ("prefix", "user", "name", "created_at", "last_used")
    list_filter = ("user",)
    search_fields = ("name", "prefix", "user__username")
    readonly_fields = ("token_hash", "prefix", "created_at", "last_used")

    def has_add_permission(self, request):
        return False  # tokens are issued by `manage.py navi_token`, which shows the raw value once


@admin.register(LoginAttempt)
class LoginAttemptAdmin(admin.ModelAdmin):
    """Failed logins being counted; delete rows to unlock a username before the window ends."""

    list_display = ("username", "ip", "at")
    search_fields = ("username", "ip")
    readonly_fields = ("username", "ip", "at")

    def has_add_permission(self, request):
        return False


@admin.register(UserSettings)
class UserSettingsAdmin(admin.ModelAdmin):
    list_display = ("user", "theme", "default_profile", "notify_when_done", "updated_at")
