"""GET /healthz: database and broker reachability (200 when both answer, else 503).

Public, so it says what is down and never how to reach it: the driver's error (host, port,
user) goes to the log only.
"""

import logging
import time

from django.db import connection
from django.http import HttpRequest, JsonResponse

from workers.celery_app import app

logger = logging.getLogger(__name__)


def _check_database() -> dict[str, object]:
    started = time.perf_counter()
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as exc:  # any driver error means "down"
        logger.warning("health: database unreachable: %r", exc)
        return {"ok": False, "error": "unavailable"}
    return {
        "ok": True,
        "vendor": connection.vendor,
        "ms": round((time.perf_counter() - started) * 1000, 1),
    }


def _check_broker() -> dict[str, object]:
    started = time.perf_counter()
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
            transport = conn.transport_cls
    except Exception as exc:  # kombu raises many types; all mean "unreachable"
        logger.warning("health: broker unreachable: %r", exc)
        return {"ok": False, "error": "unavailable"}
    return {
        "ok": True,
        "transport": str(transport),
        "ms": round((time.perf_counter() - started) * 1000, 1),
    }


def healthz(request: HttpRequest) -> JsonResponse:
    checks = {"database": _check_database(), "broker": _check_broker()}
    healthy = all(c["ok"] for c in checks.values())
    response = JsonResponse(
        {"status": "ok" if healthy else "unavailable", **checks}, status=200 if healthy else 503
    )
    if not healthy:
        response["Retry-After"] = "5"
    return response
