"""A request value never comes back as markup: error bodies are plain text and escaped."""

from urllib.parse import quote

import pytest
from django.contrib.auth.models import User
from django.test import Client

from tests.platform.monitoring.factories import monitored_model

MARKUP = '<meta http-equiv="refresh" content="0;url=https://evil.example/">'


@pytest.fixture
def viewer(db: None) -> Client:
    monitored_model("sea", reference_rows=300, window_size=200, min_samples=100, min_labels=100)
    client = Client()
    client.force_login(User.objects.create_user("viewer", password="pw-viewer-12345"))
    return client


def test_a_malformed_check_id_is_a_plain_text_400_with_the_value_escaped(viewer: Client) -> None:
    response = viewer.get(f"/models/sea/drift/?feature=x1&check={quote(MARKUP)}")
    assert response.status_code == 400
    assert not response["Content-Type"].startswith("text/html")
    body = response.content.decode()
    assert "<meta" not in body and "&lt;meta" in body


def test_an_unknown_feature_with_markup_is_a_404_without_the_markup(viewer: Client) -> None:
    response = viewer.get(f"/models/sea/drift/?feature={quote(MARKUP)}")
    assert response.status_code == 404 and b"<meta http-equiv" not in response.content
