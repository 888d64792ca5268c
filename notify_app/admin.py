from django import forms
from django.contrib import admin

from .models import NotifyTarget


class NotifyTargetForm(forms.ModelForm):
    """The secret URL is write-only here too: a new one can be typed, the stored one is never shown."""

    url = forms.CharField(required=False, widget=forms.PasswordInput(render_value=False),
                          help_text="Apprise URL; leave empty to keep the stored one.")

    class Meta:
        model = NotifyTarget
        fields = ("owner", "kind", "label", "url")

    def clean_url(self) -> str:
        return self.cleaned_data["url"] or (self.instance.url if self.instance.pk else "")


@admin.register(NotifyTarget)
class NotifyTargetAdmin(admin.ModelAdmin):
    form = NotifyTargetForm
    list_display = ("id", "owner", "kind", "label", "address", "last_ok_at", "last_error_at")
    list_filter = ("kind",)
    search_fields = ("label", "owner__username")
    readonly_fields = ("address", "created_at", "last_ok_at", "last_error", "last_error_at")

    @admin.display(description="address")
    def address(self, obj: NotifyTarget) -> str:
        return obj.address()
