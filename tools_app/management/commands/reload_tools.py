"""Reload user tools: sync the UserTool table with user_tools/ and print what loaded or failed."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from tools_app.loader import load_user_tools


class Command(BaseCommand):
    help = "Check every file in user_tools/ (in isolated processes) and sync the UserTool table."

    def handle(self, *args, **options):
        # A running server picks changes up on its own next reload (write_tool, admin, reload_tools).
        result = load_user_tools()
        names = sorted(t.name for t in result.loaded)
        self.stdout.write(f"loaded {len(names)} user tool(s): {', '.join(names) or 'none'}")
        for stem in result.disabled:
            self.stdout.write(f"disabled: {stem}")
        for stem, error in sorted(result.errors.items()):
            self.stdout.write(self.style.ERROR(f"FAILED {stem}: {error}"))
        if result.errors:
            raise SystemExit(1)
