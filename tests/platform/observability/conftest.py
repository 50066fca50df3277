from collections.abc import Callable

import pytest
from rest_framework.test import APIClient


@pytest.fixture
def scrape(client_for: Callable[[str], APIClient]) -> Callable[[], str]:
    """GET /metrics with a read token → the exposition text (asserting a 200)."""
    reader = client_for("read")

    def get() -> str:
        response = reader.get("/metrics")
        assert response.status_code == 200, response.content
        return response.content.decode()

    return get
