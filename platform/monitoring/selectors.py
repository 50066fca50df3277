"""Reads for monitoring."""

from monitoring.models import MonitoringPolicy
from monitoring.policy import default_metric
from registry.models import RegisteredModel


def policy_for(model: RegisteredModel) -> MonitoringPolicy:
    """The model's policy; a model without a stored one gets the defaults (unsaved: a read never
    writes; monitoring.policy.policy_ensure stores it)."""
    policy = MonitoringPolicy.objects.filter(model=model).first()
    return policy or MonitoringPolicy(model=model, metric=default_metric(model.task))
