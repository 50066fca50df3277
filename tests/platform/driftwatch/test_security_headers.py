"""The app's own pages carry a Content-Security-Policy that allows no inline or foreign script."""

import pytest
from django.contrib.auth.models import User
from django.test import Client


def directives(header: str) -> dict[str, str]:
    parts = [p.strip().split(" ", 1) for p in header.split(";") if p.strip()]
    return {p[0]: (p[1] if len(p) > 1 else "") for p in parts}


@pytest.mark.parametrize("path", ["/", "/alerts/", "/admin/", "/api/docs/"])
def test_app_pages_carry_a_csp_without_inline_script(db: None, path: str) -> None:
    client = Client()
    client.force_login(User.objects.create_user("csp", password="pw-csp-12345", is_staff=True))
    response = client.get(path)
    assert response.status_code == 200
    policy = directives(response["Content-Security-Policy"])
    assert policy["script-src"] == "'self'"
    assert policy["default-src"] == "'self'" and policy["frame-ancestors"] == "'none'"


def test_api_docs_load_their_script_from_a_url_not_inline(db: None) -> None:
    client = Client()
    client.force_login(User.objects.create_user("docs", password="pw-docs-12345", is_staff=True))
    page = client.get("/api/docs/").content.decode()
    assert "<script>" not in page
    assert client.get("/api/docs/?script=").status_code == 200
