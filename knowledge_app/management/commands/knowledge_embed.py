"""`manage.py knowledge_embed [--all] [--queue]`: make the vectors of passages and memory facts
that have none of the current EMBEDDING_MODEL (every one with --all), with a progress bar, in
this command's process (the backfill job's work, done here while you watch); with --queue the
job is left to the job workers instead."""

from __future__ import annotations

import sys

from django.core.management.base import BaseCommand, CommandError

from jobs_app import queue
from knowledge_app import embeddings, indexer, tasks, vectors
from navi_project import connections

BAR = 30


class Command(BaseCommand):
    help = "Embed passages and memory facts with EMBEDDING_MODEL (those without a vector; --all: every one)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--all", action="store_true", help="re-embed everything, not only what has no vector")
        parser.add_argument("--queue", action="store_true", help="leave it to the job workers (db_worker) and return")

    def handle(self, *args, **options) -> None:
        store = vectors.available()
        if store != "ok":
            raise CommandError(f"no vector index: {store}")
        try:
            embeddings.embed(["probe"])
        except embeddings.EmbeddingError as exc:
            raise CommandError(str(exc)) from exc
        if options["queue"]:
            queue.enqueue(tasks.backfill_embeddings, everything=options["all"])
            self.stdout.write(self.style.SUCCESS("queued: a job worker embeds them (GET /health shows the queue)"))
            return
        interactive = sys.stdout.isatty()

        def progress(done: int, total: int) -> None:
            filled = BAR * done // total if total else BAR
            line = f"[{'#' * filled}{'.' * (BAR - filled)}] {done}/{total}"
            self.stdout.write(("\r" + line) if interactive else line, ending="" if interactive else "\n")
            self.stdout.flush()

        done, total = indexer.backfill(progress, everything=options["all"])
        if interactive:
            self.stdout.write("")
        if done < total:
            state = embeddings.state()
            raise CommandError(f"embedded {done} of {total}: the embedding server stopped answering ({state.detail}); "
                               "run the command again once it is back")
        self.stdout.write(self.style.SUCCESS(f"{total} embedded with {connections.embedding_model()}"))
