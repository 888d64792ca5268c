"""Background work as tasks of Django's Tasks API (the `django-tasks` backport) with the database
backend (`django-tasks-db`): enqueueing fairly, worker processes with heartbeats, taking back the
jobs of dead workers, limited child processes for untrusted input, and what /health and /metrics
say about the queue. Apps define their tasks in their own `tasks.py`; this app knows none of them."""
