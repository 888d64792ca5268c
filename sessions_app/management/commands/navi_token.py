from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from sessions_app.models import ApiToken


class Command(BaseCommand):
    help = "Create an API token for a user and print it (shown once; only its hash is stored)."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--name", default="", help="a label for the token, e.g. 'laptop script'")

    def handle(self, *args, username: str, name: str, **options):
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user '{username}'; create one with `python manage.py createsuperuser`")
        _, raw = ApiToken.issue(user, name=name)
        self.stdout.write(raw)
