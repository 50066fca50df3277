"""Celery tasks, one module per app: thin glue that loads rows by id, calls one service, returns.

The modules are registered through the Celery app's `include` (workers/celery_app.py); this
package itself imports nothing, so importing `workers.tasks` never pulls in Django apps.
Task names are constants in workers/queues.py; the platform enqueues by name and never imports
these modules.
"""
