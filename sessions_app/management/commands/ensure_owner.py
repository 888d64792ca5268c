import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Create the owner account if no user exists yet (NAVI_ADMIN_USER / NAVI_ADMIN_PASSWORD)."

    def handle(self, *args, **options):
        User = get_user_model()
        if User.objects.exists():
            return
        username = settings.NAVI_ADMIN_USER
        password = settings.NAVI_ADMIN_PASSWORD or secrets.token_urlsafe(12)
        User.objects.create_superuser(username=username, email="", password=password)
        self.stdout.write(self.style.SUCCESS(f"Created the owner account '{username}'."))
        if not settings.NAVI_ADMIN_PASSWORD:
            self.stdout.write(
                f"  password: {password}\n"
                "  (shown once — write it down; change it in the admin or with "
                f"`python manage.py changepassword {username}`)"
            )
