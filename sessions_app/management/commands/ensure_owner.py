import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = "Create the owner account if no user exists yet (NAVI_ADMIN_USER / NAVI_ADMIN_PASSWORD)."

    def handle(self, *args, **options):
        User = get_user_model()
        if User.objects.exists():
            return
        username = settings.NAVI_ADMIN_USER
        password = settings.NAVI_ADMIN_PASSWORD or secrets.token_urlsafe(12)
        if settings.NAVI_ADMIN_PASSWORD:
            _check_password(password, User(username=username))
        User.objects.create_superuser(username=username, email="", password=password)
        self.stdout.write(self.style.SUCCESS(f"Created the owner account '{username}'."))
        if not settings.NAVI_ADMIN_PASSWORD:
            self.stdout.write(
                f"  password: {password}\n"
                "  (shown once — write it down; change it in the admin or with "
                f"`python manage.py changepassword {username}`)"
            )


def _check_password(password: str, user) -> None:
    """The owner password from the environment passes the same validators as any other, so a
    weak one in `.env` is refused up front instead of guarding an internet-facing admin."""
    try:
        validate_password(password, user)
    except ValidationError as exc:
        problems = " ".join(exc.messages)
        raise CommandError(
            f"NAVI_ADMIN_PASSWORD is too weak: {problems} Choose a stronger one in .env, or unset it "
            "to have a random password generated and printed once."
        ) from None
