"""Predictions and their ground truth, joined by (model, sample id) in either arrival order."""

from django.core.exceptions import ValidationError
from django.db import models

from monitoring.policy import PAGERDUTY_EVENTS_URL, ThresholdRule, WindowKind, policy_errors
from registry.models import ModelVersion, RegisteredModel
from workers.drift.decisions import higher_is_better


class SamplePart(models.Model):
    """A columnar file (Arrow IPC) of one model's samples in one hour: written by one request, or
    by the compaction that merged the hour's parts. Index rows (PredictionSample.part) point into
    it; rows of the file no index row points to (a request's duplicates) are never read."""

    model = models.ForeignKey(RegisteredModel, on_delete=models.CASCADE, related_name="parts")
    bucket = models.DateTimeField(help_text="the hour its samples' timestamps fall in")
    name = models.CharField(max_length=300, unique=True, help_text="the file's name in the storage")
    rows = models.PositiveIntegerField(help_text="rows in the file")
    indexed = models.PositiveIntegerField(help_text="rows an index row points to (rows - duplicates)")
    size = models.PositiveBigIntegerField(help_text="bytes")
    created_at = models.DateTimeField()
    compacted = models.BooleanField(default=False, help_text="the merge of an hour's parts")
    retired_at = models.DateTimeField(
        null=True, blank=True, help_text="replaced by a compacted part; its file goes after a grace"
    )
    payload_dropped = models.BooleanField(
        default=False, help_text="rewritten by retention without the features (null); predictions kept"
    )
    summary = models.JSONField(
        null=True,
        blank=True,
        help_text="a compacted hour's counted features as per-value counts (store.summaries); "
        "kept when retention drops the payloads",
    )

    class Meta:
        indexes = [models.Index(fields=["model", "bucket"], name="part_model_bucket")]

    def __str__(self) -> str:
        return self.name

    @property
    def is_clean(self) -> bool:
        """Every row of the file is indexed: read whole, no mask."""
        return self.indexed == self.rows


class PredictionSample(models.Model):
    # The hottest insert of the platform (a row per sample), so its references are kept by Django
    # alone: on_delete runs in the ORM's deletes (every delete here goes through it; RESTRICT
    # raises RestrictedError there), with no trigger per inserted row. PostgreSQL's foreign-key
    # checks were half of an index row's cost (100,000 rows: 0.73-0.76 s of checks at commit
    # beside 0.68-0.71 s of insert). The model's own index is the unique one's first column.
    id = models.BigAutoField(primary_key=True)
    model = models.ForeignKey(
        RegisteredModel, on_delete=models.CASCADE, related_name="samples", db_constraint=False, db_index=False
    )
    version = models.ForeignKey(
        ModelVersion, null=True, blank=True, on_delete=models.SET_NULL, db_constraint=False
    )
    sample_id = models.CharField(max_length=200)
    timestamp = models.DateTimeField(help_text="when the prediction was made")
    received_at = models.DateTimeField()
    # The prediction stays beside the index: a label's known time and error follow from it when
    # the label comes (monitoring.sequential), without reading the parts.
    prediction = models.JSONField()
    # The payload (features, prediction, probabilities) is row part_row of part's file: this row
    # is the narrow index. A row without a part is a sample stored as JSON before the columnar
    # store (an install past migration 0030 that has not run ``samples_to_columnar`` yet).
    # RESTRICT: a part goes only once no row points to it (compaction repoints them first).
    part = models.ForeignKey(
        SamplePart, null=True, blank=True, on_delete=models.RESTRICT, related_name="+", db_constraint=False
    )
    part_row = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        constraints = [
            # Idempotency: a client retry of the same sample id is stored once.
            models.UniqueConstraint(fields=["model", "sample_id"], name="unique_sample_per_model"),
        ]
        indexes = [
            models.Index(fields=["model", "timestamp"], name="sample_model_time"),
            # The columnar store's rows still to move (a check refuses a window holding any).
            models.Index(
                fields=["model", "timestamp"], condition=models.Q(part__isnull=True), name="sample_unmoved"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.model_id}:{self.sample_id}"


class GroundTruth(models.Model):
    id = models.BigAutoField(primary_key=True)
    model = models.ForeignKey(RegisteredModel, on_delete=models.CASCADE, related_name="labels")
    sample_id = models.CharField(max_length=200)
    label = models.JSONField()
    received_at = models.DateTimeField()
    labelled_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="when the truth became known (sent by the client); delays count from it",
    )
    # Its prediction's timestamp, set once the prediction is in (by labels_ingest, or by the
    # compaction task's labels_meet_predictions for a label that came first), never changed
    # after: a window's labels are then one range scan, not a join with the predictions
    # (bench/scale.py, 500,000 labels of a 1M window: 0.85-1.0 s joined, 0.32 s by range).
    sample_at = models.DateTimeField(null=True, blank=True, help_text="its prediction's timestamp")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["model", "sample_id"], name="unique_label_per_model"),
        ]
        indexes = [
            models.Index(fields=["model", "sample_at"], name="label_model_sample_at"),
            # The labels still waiting for their prediction (usually none).
            models.Index(fields=["model"], condition=models.Q(sample_at__isnull=True), name="label_waiting"),
        ]

    def __str__(self) -> str:
        return f"{self.model_id}:{self.sample_id}={self.label}"


class DetectorBacklog(models.Model):
    """A label its model's sequential detector cannot be fed yet because its prediction is not in
    (usually none): created with the label (by labels_ingest, in its transaction), and moved to a
    BacklogBatch by the first feed after its prediction came, with the known time and error that
    follow from it. Kept with the label's value and times, which those follow from."""

    label = models.OneToOneField(GroundTruth, primary_key=True, on_delete=models.CASCADE, related_name="+")
    model = models.ForeignKey(RegisteredModel, on_delete=models.CASCADE, related_name="+")
    # The label as the feed reads it, kept equal to its GroundTruth row by labels_ingest (a label
    # sent again while it waits is queued anew in the same transaction).
    sample_id = models.CharField(max_length=200)
    value = models.JSONField()
    received_at = models.DateTimeField()
    labelled_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"label {self.label_id} of model {self.model_id}, waiting for its prediction"


class BacklogBatch(models.Model):
    """Labels a model's detector has not been fed yet whose prediction is in: one row per labels
    request and hour of known time, its labels as arrays (written and read only by
    monitoring.sequential). Created with the labels (by labels_ingest, in its transaction; a
    label sent again is not queued again unless it still waits, then it is taken out of its
    batch and queued anew); a feed deletes the batches it fed whole and rewrites the rest of one
    it fed in part, in the transaction that stores the detector's new state. A row per label
    before: deleting 500,000 of them took about 0.56 s (one WAL record each); bench/scale.py's
    first 1M check, five runs each beside the code before: feed stage 0.13 s against 0.53 s."""

    model = models.ForeignKey(RegisteredModel, on_delete=models.CASCADE, related_name="+")
    earliest = models.DateTimeField(help_text="the first known time of its labels")
    first_label = models.BigIntegerField(help_text="its smallest label id")
    last_label = models.BigIntegerField(help_text="its largest label id")
    size = models.PositiveIntegerField(help_text="labels in it")
    # Little-endian arrays of `size` values each: label ids (int64), their known times
    # (monitoring.sequential.label_known_at, int64 microseconds since the Unix epoch) and their
    # predictions' errors (float64).
    label_ids = models.BinaryField()
    known_at = models.BinaryField()
    errors = models.BinaryField()

    class Meta:
        indexes = [models.Index(fields=["model", "earliest"], name="batch_model_earliest")]

    def __str__(self) -> str:
        return f"{self.size} label(s) of model {self.model_id} for the detector, from {self.earliest}"


class MonitoringPolicy(models.Model):
    """How and how often a model is checked, and when a check becomes an alert."""

    model = models.OneToOneField(RegisteredModel, on_delete=models.CASCADE, related_name="policy")
    enabled = models.BooleanField(default=True)
    window_kind = models.CharField(max_length=10, choices=WindowKind.choices, default=WindowKind.HOURS)
    window_size = models.PositiveIntegerField(default=24, help_text="hours, or samples")
    check_every_minutes = models.PositiveIntegerField(default=60)
    min_samples = models.PositiveIntegerField(default=100, help_text="fewer samples: no decision")
    min_labels = models.PositiveIntegerField(default=50, help_text="fewer labels: no realised metric")
    metric = models.CharField(
        max_length=20, default="accuracy", help_text="accuracy, f1_macro, rmse, mae, r2"
    )
    threshold_rule = models.CharField(
        max_length=20,
        choices=ThresholdRule.choices,
        default=ThresholdRule.REFERENCE_BAND,
        help_text="reference_band: mean ± band_sigmas sd of the metric over reference chunks of one "
        "window; absolute: baseline ± tolerance; relative: baseline ± relative_tolerance × baseline",
    )
    tolerance = models.FloatField(
        default=0.05,
        help_text="absolute rule (and the band's fallback): alert when the metric is worse than "
        "baseline by more, in the metric's units",
    )
    relative_tolerance = models.FloatField(
        default=0.05, help_text="relative rule: the fraction of the baseline the metric may lose"
    )
    band_sigmas = models.FloatField(default=3.0, help_text="reference band: standard deviations wide")
    baseline = models.FloatField(
        null=True, blank=True, help_text="empty: the champion's metric on the reference"
    )
    drift_share = models.FloatField(default=0.5, help_text="dataset drift when this share of features drift")
    embedding_drift_method = models.CharField(
        max_length=40,
        default="model",
        help_text="model: evidently's domain classifier (its default); mean_perm: a permutation test "
        "of the mean difference, calibrated at every sample size; classifier_mw: the classifier's "
        "held-out scores with a Mann-Whitney p-value",
    )
    alert_k = models.PositiveIntegerField(default=1, help_text="alert when k of the last n checks breach")
    alert_n = models.PositiveIntegerField(default=1)
    resolve_after = models.PositiveIntegerField(
        default=3, help_text="an open alert resolves after this many consecutive clear checks"
    )
    cooldown_minutes = models.PositiveIntegerField(default=60, help_text="no new alert of a kind this soon")
    sequential_detector = models.BooleanField(
        default=True, help_text="also watch the error stream with ADWIN, label by label"
    )
    auto_retrain = models.BooleanField(default=False)
    segments = models.JSONField(
        default=list,
        blank=True,
        help_text='segment features: [{"feature": "country"}, {"feature": "age", "bins": [30, 50]}]',
    )
    segment_limit = models.PositiveIntegerField(
        default=5, help_text="values per segment feature (top by volume); the rest is 'other'"
    )
    payload_retention_days = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="raw payloads (features) older than this many days are dropped; empty or 0: kept",
    )
    notify_emails = models.TextField(blank=True, help_text="comma-separated")
    webhook_url = models.URLField(blank=True)
    webhook_secret = models.CharField(max_length=200, blank=True, help_text="HMAC-SHA256 key")
    slack_webhook_url = models.URLField(
        max_length=500, blank=True, help_text="a Slack-compatible incoming webhook (Slack, Mattermost, ...)"
    )
    pagerduty_routing_key = models.CharField(
        max_length=200, blank=True, help_text="PagerDuty Events v2 integration (routing) key; empty: off"
    )
    pagerduty_url = models.URLField(
        max_length=500, default=PAGERDUTY_EVENTS_URL, help_text="the Events v2 enqueue endpoint"
    )
    next_check_at = models.DateTimeField(null=True, blank=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "monitoring policies"

    def __str__(self) -> str:
        return f"policy of {self.model}"

    @property
    def higher_is_better(self) -> bool:
        return higher_is_better(self.metric)

    def clean(self) -> None:
        errors = policy_errors(self, self.model.task)
        if errors:
            raise ValidationError({e.field: e.message for e in errors})

    def emails(self) -> list[str]:
        return [e.strip() for e in self.notify_emails.split(",") if e.strip()]


class SequentialDetector(models.Model):
    """A model's adaptive detector (river's ADWIN) on its error stream, fed in label-arrival
    order; its state is persisted so it survives restarts, and each label is fed once."""

    model = models.OneToOneField(RegisteredModel, on_delete=models.CASCADE, related_name="detector")
    kind = models.CharField(max_length=20, default="ADWIN")
    state = models.BinaryField(null=True, blank=True, help_text="the detector, pickled by us")
    fed = models.PositiveBigIntegerField(default=0, help_text="labels fed so far")
    detections = models.PositiveIntegerField(default=0)
    last_detection = models.JSONField(null=True, blank=True, help_text="the latest degradation found")
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.kind} of {self.model} ({self.fed} labels)"


class CheckState(models.TextChoices):
    # Asked for through the API over a window too large for the web request: a worker takes it.
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    # Nothing to measure (no predictions in the window): not a result, so it is drawn nowhere,
    # decides nothing and never opens or resolves an alert; `skipped_reason` says why.
    SKIPPED = "skipped"


class ReportState(models.TextChoices):
    NONE = "", "not requested"
    REQUESTED = "requested"
    RENDERING = "rendering"
    READY = "ready"
    FAILED = "failed"


class QualityCheck(models.Model):
    """One model over one window: realised and estimated quality, drift, data quality, decisions."""

    model = models.ForeignKey(RegisteredModel, on_delete=models.CASCADE, related_name="checks")
    version = models.ForeignKey(
        ModelVersion,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        help_text="the champion when the check ran",
    )
    window_spec = models.CharField(max_length=60, help_text="24h, 1000samples, or range:<start> (API)")
    window_start = models.DateTimeField()
    window_end = models.DateTimeField()
    state = models.CharField(max_length=10, choices=CheckState.choices, default=CheckState.RUNNING)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    owner = models.CharField(
        max_length=80, blank=True, help_text="the task id computing it: its redelivery takes over at once"
    )
    n_samples = models.PositiveIntegerField(default=0)
    n_labelled = models.PositiveIntegerField(default=0)
    metrics = models.JSONField(default=dict, blank=True, help_text="realised metrics on labelled samples")
    estimated = models.JSONField(default=dict, blank=True, help_text="label-free estimate (CBPE)")
    per_version = models.JSONField(default=dict, blank=True)
    labels = models.JSONField(default=dict, blank=True, help_text="label coverage and delay")
    drift = models.JSONField(default=dict, blank=True, help_text="per-feature data drift")
    prediction_drift = models.JSONField(default=dict, blank=True)
    data_quality = models.JSONField(default=dict, blank=True)
    decisions = models.JSONField(default=dict, blank=True)
    segments = models.JSONField(
        default=dict, blank=True, help_text="the same measures and decisions per segment value"
    )
    error = models.TextField(blank=True)
    skipped_reason = models.TextField(blank=True, help_text="why the check measured nothing")
    labels_refreshed_at = models.DateTimeField(
        null=True, blank=True, help_text="realised metrics recomputed after late labels"
    )
    report = models.FileField(upload_to="reports/", blank=True)
    report_state = models.CharField(max_length=10, choices=ReportState.choices, blank=True, default="")
    report_requested_at = models.DateTimeField(null=True, blank=True)
    report_started_at = models.DateTimeField(
        null=True, blank=True, help_text="when a worker took the report to render"
    )
    report_attempts = models.PositiveIntegerField(default=0)
    report_error = models.TextField(blank=True, help_text="why the report failed (no traceback)")

    class Meta:
        ordering = ["model", "-window_end"]
        constraints = [
            # Idempotency: one row per model and window; a re-run overwrites it with equal values.
            models.UniqueConstraint(
                fields=["model", "window_spec", "window_end"], name="one_check_per_window"
            ),
        ]
        indexes = [
            models.Index(fields=["state", "started_at"], name="check_state_started"),
            # Each model's latest finished check, read per model by /metrics at every scrape.
            models.Index(fields=["model", "-finished_at"], name="check_model_finished"),
            # A model's checks newest first (the dashboard's chart, table, heat map and summary,
            # the API's list): without it each read sorted every check of the model (5 ms at 2,000).
            models.Index(fields=["model", "-window_end", "-id"], name="check_model_window_end"),
            # The reaper's look-up of pending reports: a handful of rows among thousands.
            models.Index(
                fields=["report_state"],
                condition=models.Q(report_state__in=["requested", "rendering"]),
                name="check_report_pending",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.model} {self.window_start:%Y-%m-%d %H:%M}–{self.window_end:%H:%M} ({self.state})"


class CheckSlice(models.Model):
    """A slice of whole hours of a fanned-out check's window (monitoring.fanout), measured by a
    check_slice task: ``result`` names its measures' file in the storage once done."""

    quality_check = models.ForeignKey(QualityCheck, on_delete=models.CASCADE, related_name="slices")
    attempt = models.PositiveIntegerField(help_text="the check's attempt that cut it")
    index = models.PositiveIntegerField()
    start = models.DateTimeField()
    end = models.DateTimeField()
    result = models.CharField(max_length=300, blank=True, help_text="its measures' file; empty until done")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["quality_check", "attempt", "index"], name="unique_check_slice")
        ]

    def __str__(self) -> str:
        return f"check {self.quality_check_id} attempt {self.attempt} slice {self.index}"


class CheckDistribution(models.Model):
    """One column's distribution in the reference and in a check's window (a histogram or the top
    categories, ``workers.drift.distribution.DistributionDict``), stored by the check so that the
    drill-down page never reads raw samples. Apart from the check row: the heat map and the charts,
    which read many checks, never load it."""

    quality_check = models.ForeignKey(QualityCheck, on_delete=models.CASCADE, related_name="distributions")
    column = models.CharField(max_length=200)
    psi = models.FloatField(help_text="population stability index of the window vs the reference")
    payload = models.JSONField(help_text="labels, edges, reference and window fractions, effect sizes")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["quality_check", "column"], name="one_distribution_per_check_column"
            )
        ]

    def __str__(self) -> str:
        return f"{self.column} in check #{self.quality_check_id}"


class AlertKind(models.TextChoices):
    ACCURACY_DROP = "accuracy_drop"
    ESTIMATED_ACCURACY_DROP = "estimated_accuracy_drop"
    DATA_DRIFT = "data_drift"
    MULTIVARIATE_DRIFT = "multivariate_drift"
    PREDICTION_DRIFT = "prediction_drift"
    DATA_QUALITY = "data_quality"


class Severity(models.TextChoices):
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


class AlertState(models.TextChoices):
    OPEN = "open"
    ACKNOWLEDGED = "acknowledged"
    RESOLVED = "resolved"


# Live: the condition still stands (at most one live alert per model, kind and segment, see Alert.Meta).
LIVE_ALERT_STATES = (AlertState.OPEN, AlertState.ACKNOWLEDGED)


class Alert(models.Model):
    model = models.ForeignKey(RegisteredModel, on_delete=models.CASCADE, related_name="alerts")
    kind = models.CharField(max_length=30, choices=AlertKind.choices)
    segment = models.CharField(
        max_length=300, blank=True, default="", help_text="feature=value; empty: the whole model"
    )
    severity = models.CharField(max_length=10, choices=Severity.choices, default=Severity.WARNING)
    state = models.CharField(max_length=15, choices=AlertState.choices, default=AlertState.OPEN)
    message = models.TextField()
    details = models.JSONField(default=dict, blank=True)
    opened_by = models.ForeignKey(
        QualityCheck, null=True, blank=True, on_delete=models.SET_NULL, related_name="opened_alerts"
    )
    last_check = models.ForeignKey(
        QualityCheck, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    resolved_by_check = models.ForeignKey(
        QualityCheck, null=True, blank=True, on_delete=models.SET_NULL, related_name="resolved_alerts"
    )
    opened_at = models.DateTimeField()
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-opened_at"]
        constraints = [
            # No duplicate alert for a condition that is already open (or acknowledged).
            models.UniqueConstraint(
                fields=["model", "kind", "segment"],
                condition=~models.Q(state="resolved"),
                name="one_live_alert_per_kind",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} on {self.model} ({self.state})"


# Where an alert event can go (monitoring.destinations says how each one is sent).
CHANNELS = ("email", "webhook", "slack", "pagerduty")


class NotificationState(models.TextChoices):
    PENDING = "pending"
    SENDING = "sending"
    SENT = "sent"
    FAILED = "failed"


class Notification(models.Model):
    """One delivery of one alert event to one channel; retried until sent or out of attempts."""

    alert = models.ForeignKey(Alert, on_delete=models.CASCADE, related_name="notifications")
    event = models.CharField(max_length=20, help_text="opened or resolved")
    channel = models.CharField(max_length=10, choices=[(c, c) for c in CHANNELS])
    target = models.CharField(max_length=500)
    state = models.CharField(
        max_length=10, choices=NotificationState.choices, default=NotificationState.PENDING
    )
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    claimed_at = models.DateTimeField(null=True, blank=True, help_text="when a worker took it to send")
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["alert", "event", "channel", "target"], name="one_delivery_per_event"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.channel} {self.event} → {self.target} ({self.state})"
