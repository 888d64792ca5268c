from django.contrib import admin

from .models import Profile


@admin.register(Profile)
class ProfileAdmin(admin.ModelAdmin):
    list_display = ("id", "name", "llm_backend", "model", "temperature", "max_iterations", "planning_enabled")
    list_filter = ("llm_backend", "planning_enabled")
    search_fields = ("id", "name", "description", "system_prompt")
