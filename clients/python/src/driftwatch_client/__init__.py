"""driftwatch_client: log predictions and labels from a serving process to driftwatch.

    from driftwatch_client import Monitor
    monitor = Monitor(url="https://drift.example.com", token="…", model="churn")
    monitor.log_prediction("req-123", {"age": 41, "city": "lyon"}, "yes", {"no": 0.3, "yes": 0.7})
    monitor.log_label("req-123", "no")

Never blocks the caller and never raises into it; see Monitor for the queue and retry settings
and Stats for what stats() reports.
"""

from driftwatch_client._stats import DROP_REASONS, Stats
from driftwatch_client.monitor import Monitor, __version__

__all__ = ["DROP_REASONS", "Monitor", "Stats", "__version__"]
