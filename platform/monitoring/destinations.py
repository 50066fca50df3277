"""Where a policy sends its alert events, and the bodies the chat and paging destinations take.

Channels: e-mail, the signed webhook, a Slack-compatible incoming webhook (Slack, Mattermost,
Rocket.Chat: ``text`` plus one ``attachments`` entry) and PagerDuty Events v2 (opened → trigger,
resolved → resolve, one dedup key per alert so PagerDuty folds both into one incident). Every URL
goes through ``core.outbound`` like the signed webhook (checked in the policy, again at delivery).
"""

from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.urls import reverse

from monitoring.models import Alert

if TYPE_CHECKING:
    from monitoring.models import MonitoringPolicy

# driftwatch severity → PagerDuty's (critical, error, warning, info); Slack's attachment colour.
PAGERDUTY_SEVERITY = {"critical": "critical", "warning": "warning", "info": "info"}
SLACK_COLOUR = {"critical": "#d62728", "warning": "#ff9f1c", "info": "#1f77b4"}
RESOLVED_COLOUR = "#2ca02c"
PAGERDUTY_SUMMARY_CHARS = 1024  # Events v2 refuses a longer payload.summary


def policy_targets(policy: "MonitoringPolicy") -> list[tuple[str, str]]:
    """(channel, target) for every destination the policy configures."""
    targets = [("email", e) for e in policy.emails()]
    if policy.webhook_url:
        targets.append(("webhook", policy.webhook_url))
    if policy.slack_webhook_url:
        targets.append(("slack", policy.slack_webhook_url))
    if policy.pagerduty_routing_key:
        targets.append(("pagerduty", policy.pagerduty_url))
    return targets


def dashboard_link(view: str, *args: Any) -> str:
    return settings.DRIFTWATCH_PUBLIC_URL + reverse(f"dashboard:{view}", args=args)


def alert_segment_text(alert: Alert) -> str:
    """ " in segment country=DE", or "" for a whole-model alert."""
    return f" in segment {alert.segment}" if alert.segment else ""


def alert_title(alert: Alert, event: str) -> str:
    return f"[driftwatch] {alert.kind} {event} on {alert.model.name}{alert_segment_text(alert)} ({alert.severity})"


def dedup_key(alert: Alert) -> str:
    """One per alert: its trigger and its resolve name the same PagerDuty incident."""
    return f"driftwatch-alert-{alert.pk}"


def slack_payload(alert: Alert, event: str) -> dict[str, Any]:
    model_url = dashboard_link("model", alert.model.name)
    resolved = event == "resolved"
    return {
        "text": f"{alert_title(alert, event)} <{model_url}|open in driftwatch>",
        "attachments": [
            {
                "color": RESOLVED_COLOUR if resolved else SLACK_COLOUR.get(alert.severity, "#888888"),
                "title": alert_title(alert, event),
                "title_link": model_url,
                "text": alert.message,
                "fields": [
                    {"title": "model", "value": alert.model.name, "short": True},
                    {"title": "kind", "value": alert.kind, "short": True},
                    {"title": "severity", "value": alert.severity, "short": True},
                    {"title": "state", "value": alert.state, "short": True},
                ],
                "footer": f"driftwatch alert #{alert.pk}",
            }
        ],
    }


def pagerduty_payload(alert: Alert, event: str, routing_key: str) -> dict[str, Any]:
    """An Events v2 event: trigger on opened, resolve on resolved (same dedup key)."""
    if event == "resolved":
        return {"routing_key": routing_key, "event_action": "resolve", "dedup_key": dedup_key(alert)}
    summary = f"{alert_title(alert, 'opened')}: {alert.message}"
    return {
        "routing_key": routing_key,
        "event_action": "trigger",
        "dedup_key": dedup_key(alert),
        "payload": {
            "summary": summary[:PAGERDUTY_SUMMARY_CHARS],
            "source": f"driftwatch:{alert.model.name}",
            "severity": PAGERDUTY_SEVERITY.get(alert.severity, "warning"),
            "timestamp": alert.opened_at.isoformat(),
            "component": alert.model.name,
            "group": "driftwatch",
            "class": alert.kind,
            "custom_details": {
                "alert": alert.pk,
                "message": alert.message,
                "segment": alert.segment or None,
                "opened_by_check": alert.opened_by_id,
            },
        },
        "links": [
            {"href": dashboard_link("model", alert.model.name), "text": f"{alert.model.name} in driftwatch"},
            {"href": dashboard_link("alerts"), "text": "driftwatch alerts"},
        ],
        "client": "driftwatch",
        "client_url": dashboard_link("model", alert.model.name),
    }
