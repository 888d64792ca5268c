from django.contrib import admin

from .models import ScratchpadSection, TodoList, UserTool


@admin.register(UserTool)
class UserToolAdmin(admin.ModelAdmin):
    list_display = ("name", "enabled", "created_by", "has_error", "updated_at")
    list_filter = ("enabled", "created_by")
    search_fields = ("name", "description", "last_error")
    readonly_fields = ("path", "last_error", "created_at", "updated_at")

    @admin.display(boolean=True, description="load error")
    def has_error(self, obj):
        return bool(obj.last_error)


@admin.register(ScratchpadSection)
class ScratchpadSectionAdmin(admin.ModelAdmin):
    list_display = ("scope", "section", "updated_at")
    search_fields = ("scope", "section", "content")


@admin.register(TodoList)
class TodoListAdmin(admin.ModelAdmin):
    list_display = ("scope", "updated_at")
    search_fields = ("scope",)
