"""Offer knowledge_search to every profile."""

from django.db import migrations

TOOLS = ["knowledge_search"]


def offer(apps, schema_editor):
    Profile = apps.get_model("agent", "Profile")
    for profile in Profile.objects.all():
        enabled = list(profile.enabled_tools or [])
        missing = [t for t in TOOLS if t not in enabled]
        if missing:
            profile.enabled_tools = enabled + missing
            profile.save(update_fields=["enabled_tools"])


def withdraw(apps, schema_editor):
    Profile = apps.get_model("agent", "Profile")
    for profile in Profile.objects.all():
        profile.enabled_tools = [t for t in profile.enabled_tools or [] if t not in TOOLS]
        profile.save(update_fields=["enabled_tools"])


class Migration(migrations.Migration):
    dependencies = [("knowledge_app", "0001_initial"), ("agent", "0002_seed_profiles")]
    operations = [migrations.RunPython(offer, withdraw)]
