"""A broker that is down, for the health tests."""

from collections.abc import Iterator

import pytest


@pytest.fixture
def broker_down() -> Iterator[None]:
    """Celery pointed at a Redis nobody listens on (port 1). The transport is set as well as the
    URL: on the embedded default the configured transport (the filesystem broker) would otherwise
    serve any URL."""
    from workers.celery_app import app

    previous = app.conf.broker_url, app.conf.broker_transport
    app.conf.broker_url, app.conf.broker_transport = "redis://127.0.0.1:1/0", "redis"
    try:
        yield
    finally:
        app.conf.broker_url, app.conf.broker_transport = previous
