"""Reading /metrics back: samples by name and labels, as Prometheus would parse them."""

from prometheus_client.parser import text_string_to_metric_families

Labels = tuple[tuple[str, str], ...]


def samples(text: str) -> dict[tuple[str, Labels], float]:
    out: dict[tuple[str, Labels], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(text: str, metric: str, /, **labels: str) -> float:
    """The sample's value; 0 when absent (a labelled counter appears at its first increment)."""
    return samples(text).get((metric, tuple(sorted(labels.items()))), 0.0)


def sample_names(text: str) -> set[str]:
    return {name for name, _ in samples(text)}
