"""The model page's policy form: the fields to draw, and the posted text read back as the JSON
values the API's PATCH receives. Validation is monitoring's (services.policy_change, through
policy.policy_update), so the form and the API accept and refuse exactly the same values with
the same messages.
"""

import re
from collections.abc import Mapping
from typing import Any

from monitoring.models import MonitoringPolicy
from monitoring.policy import (
    BOOLEANS,
    DRIFT_METHOD_FIELDS,
    INTEGERS,
    NULLABLE,
    NUMBERS,
    POLICY_FIELDS,
    ThresholdRule,
    WindowKind,
    drift_methods_for,
    metrics_for,
)

INTEGER_TEXT = re.compile(r"[+-]?\d+")
CHOICE_FIELDS = {
    "window_kind",
    "metric",
    "threshold_rule",
}  # a select offers only what fits (the model's task)


def _kind(name: str) -> str:
    if name in BOOLEANS:
        return "checkbox"
    if name in INTEGERS:
        return "integer"
    if name in NUMBERS:
        return "number"
    return "choice"


def _choices(name: str, task: str) -> list[tuple[str, str]]:
    if name == "window_kind":
        return [(str(v), str(label)) for v, label in WindowKind.choices]
    if name == "metric":
        return [(m, m) for m in metrics_for(task)]
    if name == "threshold_rule":
        return [(str(v), str(label)) for v, label in ThresholdRule.choices]
    if name in DRIFT_METHOD_FIELDS:
        return [(m, m) for m in drift_methods_for(name)]
    return []


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def policy_form_fields(
    *,
    policy: MonitoringPolicy,
    posted: Mapping[str, Any] | None = None,
    errors: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """One entry per editable field: its input, current (or re-posted) value, help and error."""
    fields = []
    for name in POLICY_FIELDS:
        value = posted[name] if posted is not None and name in posted else getattr(policy, name)
        fields.append(
            {
                "name": name,
                "label": name.replace("_", " "),
                "kind": _kind(name),
                "value": value if name in BOOLEANS else _text(value),
                "min": INTEGERS.get(name),
                "choices": _choices(name, policy.model.task),
                "help": ""
                if name in CHOICE_FIELDS
                else str(getattr(MonitoringPolicy._meta.get_field(name), "help_text", "")),
                "error": (errors or {}).get(name, ""),
            }
        )
    return fields


def _value(name: str, text: str) -> Any:
    """Posted text as the JSON value it spells; text that spells none stays text, which the
    policy's validation then refuses as the API refuses a string there."""
    text = text.strip()
    if name in NULLABLE and text == "":
        return None  # an empty box clears it
    if name in INTEGERS:
        return int(text) if INTEGER_TEXT.fullmatch(text) else text
    if name in NUMBERS:
        try:
            return float(text)
        except ValueError:
            return text
    return text


def policy_form_values(form: Mapping[str, Any]) -> dict[str, Any]:
    """Every policy field the form posted, as JSON values. A checkbox is posted only when ticked,
    so every boolean reads as ticked or not."""
    values: dict[str, Any] = {name: name in form for name in POLICY_FIELDS if name in BOOLEANS}
    for name in POLICY_FIELDS:
        if name not in BOOLEANS and name in form:
            values[name] = _value(name, str(form[name]))
    return values


def policy_form_changes(*, policy: MonitoringPolicy, values: Mapping[str, Any]) -> dict[str, Any]:
    """The values that differ from the stored policy: what the change (and its audit) names."""
    return {name: value for name, value in values.items() if value != getattr(policy, name)}
