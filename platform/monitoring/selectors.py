"""Reads for monitoring."""

from monitoring.models import MonitoringPolicy
from monitoring.policy import default_metric
from registry.models import RegisteredModel


def policy_for(model: RegisteredModel) -> MonitoringPolicy:
    """The model's policy, created on first use with the metric that fits its task."""
    policy, _ = MonitoringPolicy.objects.get_or_create(
        model=model, defaults={"metric": default_metric(model.task)}
    )
    return policy
