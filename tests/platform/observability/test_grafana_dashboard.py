"""The Grafana dashboard queries only metrics that /metrics exports, and shows every one of them."""

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rest_framework.test import APIClient

from registry.models import RegisteredModel
from tests.platform.observability.scrape import sample_names

DASHBOARD = Path(__file__).resolve().parents[3] / "platform" / "observability" / "grafana" / "driftwatch.json"
METRIC = re.compile(r"\bdriftwatch_[a-zA-Z0-9_]+")
TYPE_LINE = re.compile(r"^# TYPE (\S+) (\S+)$", re.MULTILINE)
# The names a family of each type answers to in PromQL.
SUFFIXES = {"counter": ("", "_total"), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}


def queries(node: Any) -> Iterator[str]:
    """Every PromQL string in the dashboard: panel targets and template variable queries."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("expr", "definition") and isinstance(value, str):
                yield value
            elif key == "query" and isinstance(value, dict) and isinstance(value.get("query"), str):
                yield value["query"]
            else:
                yield from queries(value)
    elif isinstance(node, list):
        for item in node:
            yield from queries(item)


def exported(text: str) -> set[str]:
    """Sample names, and the names of families declared without a series yet (a labelled one)."""
    names = set(sample_names(text))
    for family, kind in TYPE_LINE.findall(text):
        names.update(family + suffix for suffix in SUFFIXES.get(kind, ("",)))
    return {name for name in names if name.startswith("driftwatch_")}


def named_in_dashboard() -> set[str]:
    return {name for query in queries(json.loads(DASHBOARD.read_text())) for name in METRIC.findall(query)}


def test_every_dashboard_query_names_a_metric_the_endpoint_exports(
    scrape: Callable[[], str], ingest: APIClient, churn: RegisteredModel
) -> None:
    good = {"id": 1, "features": {"age": 1, "income": 2.0, "city": "paris"}, "prediction": "no"}
    for body in ({"samples": [good, good]}, {"samples": [{"id": 2}]}):  # stored (+ a duplicate), a 400
        ingest.post("/api/v1/models/churn/predictions", body, format="json")
    text = scrape()
    used = named_in_dashboard()
    assert len(used) >= 20
    assert sorted(used - exported(text)) == []


def test_every_exported_family_is_on_the_dashboard(scrape: Callable[[], str], db: None) -> None:
    families = {family for family, _ in TYPE_LINE.findall(scrape()) if family.startswith("driftwatch_")}
    shown = named_in_dashboard()
    missing = [f for f in sorted(families) if not any(name.startswith(f) for name in shown)]
    assert missing == []


def test_every_query_of_the_dashboard_names_a_driftwatch_metric() -> None:
    found = list(queries(json.loads(DASHBOARD.read_text())))
    assert len(found) > 15
    assert [q for q in found if not METRIC.search(q)] == []
