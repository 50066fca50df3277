"""The retraining engine: recipes, weights, training under a memory plan, the promotion gate.

No Django imports (the platform drives it through Celery tasks). torch is imported lazily inside
the functions that need it: the web process and celery beat import this package's callers and
must not pay torch's ~2 s import (or need torch at all) to do so.
"""
