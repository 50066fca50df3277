"""Ingestion endpoints: predictions and labels."""

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from django.conf import settings
from django.http import Http404
from django.urls import reverse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from core.api import ScopedAPIView, json_batch, json_body
from core.audit import audit_record, request_actor
from core.batch import UnreadableRow
from core.errors import FieldError, InvalidInput
from core.serializers import BODY, NAMED, error_responses
from monitoring import services
from monitoring.checks import check_enqueue, check_labels_refresh, check_runs_on_worker, quality_check_run
from monitoring.models import AlertState, CheckState
from monitoring.selectors import check_for_window, check_get, checks_list, model_alerts, policy_for
from monitoring.serializers import (
    AlertOut,
    CheckIn,
    CheckOut,
    CheckRunOut,
    LabelsIn,
    LabelsOut,
    PolicyOut,
    PolicyPatchIn,
    PredictionsIn,
    PredictionsOut,
)
from monitoring.validation import offset_problem
from monitoring.window import WindowSpec, range_window, scheduled_window
from registry.models import RegisteredModel
from registry.selectors import model_get

T = TypeVar("T")


def _ingest(service: Callable[..., T], model: RegisteredModel, request: Request, key: str) -> T:
    """The service on the batch's list as raw spans, counted before any row is parsed and then
    decoded a chunk at a time by the service (neither a huge refused batch nor an accepted one is
    held as objects). A row orjson cannot read stops the service before it stores anything, and
    it runs again on the body parsed whole, as json_body parses it (or that parse's 400)."""
    body = json_batch(request, key, max_rows=settings.DRIFTWATCH_MAX_BATCH_ROWS)
    try:
        return service(model=model, body=body)
    except UnreadableRow as unreadable:
        return service(model=model, body=unreadable.whole())


class PredictionsView(ScopedAPIView):
    required_scopes = {"POST": "ingest"}

    @extend_schema(
        request={"application/json": PredictionsIn},
        responses={200: PredictionsOut, **error_responses(*NAMED, *BODY, 415, 429)},
    )
    def post(self, request: Request, name: str) -> Response:
        model = model_get(name=name)
        result = _ingest(services.predictions_ingest, model, request, "samples")
        return Response(PredictionsOut(result).data)


class LabelsView(ScopedAPIView):
    required_scopes = {"POST": "ingest"}

    @extend_schema(
        request={"application/json": LabelsIn},
        responses={200: LabelsOut, **error_responses(*NAMED, *BODY, 415, 429)},
    )
    def post(self, request: Request, name: str) -> Response:
        model = model_get(name=name)
        result = _ingest(services.labels_ingest, model, request, "labels")
        return Response(LabelsOut(result).data)


def _parse_time(value: str | None, field: str) -> datetime | None:
    if value in (None, ""):
        return None
    try:
        parsed = datetime.fromisoformat(str(value))
    except ValueError:
        raise InvalidInput([FieldError(None, field, f"not an ISO 8601 datetime: {value!r}")]) from None
    problem = offset_problem(parsed)
    if problem:
        raise InvalidInput([FieldError(None, field, problem)])
    try:
        return parsed.astimezone(UTC)
    except OverflowError:
        raise InvalidInput([FieldError(None, field, "out of range")]) from None


CHECK_KEYS = frozenset({"start", "end"})
# A window ending later than this is not over yet: its check would count samples still to come.
MAX_END_SKEW = timedelta(minutes=5)


def _check_window(model: RegisteredModel, body: Any) -> WindowSpec:
    """The window a POST asks for: {start?, end?}; anything else is a 400 naming the field."""
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise InvalidInput([FieldError(None, "body", "must be a JSON object")])
    unknown = sorted(body.keys() - CHECK_KEYS)
    if unknown:
        raise InvalidInput([FieldError(None, key, "unknown field (allowed: start, end)") for key in unknown])
    now = timezone.now()
    end = _parse_time(body.get("end"), "end") or now
    if end > now + MAX_END_SKEW:
        raise InvalidInput([FieldError(None, "end", "is in the future: that window is not over yet")])
    start = _parse_time(body.get("start"), "start")
    if start is not None and start >= end:
        raise InvalidInput([FieldError(None, "start", "must be before end")])
    return range_window(start, end) if start else scheduled_window(policy_for(model), end)


class ChecksView(ScopedAPIView):
    """POST runs a check now over {start?, end?} (default: the policy's window ending now).

    201 with the new check; 200 with the existing one when that window was checked already,
    its realised metrics refreshed first if labels arrived since. Both name the alerts the
    check opened and resolved. A window of more than DRIFTWATCH_SYNC_CHECK_SAMPLES samples is
    checked on a worker instead: 202 with the queued check, its URL in Location, to poll.
    """

    required_scopes = {"GET": "read", "POST": "ingest"}

    @extend_schema(
        parameters=[
            OpenApiParameter("start", OpenApiTypes.DATETIME, description="window ends at or after"),
            OpenApiParameter("end", OpenApiTypes.DATETIME, description="window ends at or before"),
        ],
        responses={200: CheckOut(many=True), **error_responses(400, *NAMED)},
    )
    def get(self, request: Request, name: str) -> Response:
        model = model_get(name=name)
        start = _parse_time(request.query_params.get("start"), "start")
        end = _parse_time(request.query_params.get("end"), "end")
        checks = checks_list(model=model, start=start, end=end)
        return Response(CheckOut(checks, many=True).data)

    @extend_schema(
        request={"application/json": CheckIn},
        responses={
            201: OpenApiResponse(CheckRunOut, description="a new check"),
            200: OpenApiResponse(CheckRunOut, description="that window was checked already"),
            202: OpenApiResponse(
                CheckRunOut,
                description="the window holds more than DRIFTWATCH_SYNC_CHECK_SAMPLES samples: the "
                "check is queued for a worker; poll GET …/checks/{check_id} (the Location header) "
                "until its state is done, skipped or failed",
            ),
            **error_responses(*NAMED, *BODY, 415, 429),
        },
    )
    def post(self, request: Request, name: str) -> Response:
        model = model_get(name=name)
        window = _check_window(model, json_body(request))
        existing = check_for_window(model=model, spec=window.spec, end=window.end, state=CheckState.DONE)
        if existing is not None:
            check_labels_refresh(check=existing)
            check = existing
        elif check_runs_on_worker(model=model, window=window):
            check = check_enqueue(model=model, window=window)
            audit_record(actor=request_actor(request), action="check.run", target=check)
            url = reverse("api-check", kwargs={"name": model.name, "check_id": check.pk})
            return Response(CheckRunOut(check).data, status=202, headers={"Location": url})
        else:
            ran = quality_check_run(model_id=model.pk, window=window)
            assert ran is not None
            check = ran
            audit_record(actor=request_actor(request), action="check.run", target=check)
        check.refresh_from_db()
        return Response(CheckRunOut(check).data, status=200 if existing is not None else 201)


class CheckView(ScopedAPIView):
    """GET one check of the model: how a client polls a check it was answered 202 for."""

    required_scopes = {"GET": "read"}

    @extend_schema(responses={200: CheckRunOut, **error_responses(*NAMED)})
    def get(self, request: Request, name: str, check_id: int) -> Response:
        model = model_get(name=name)
        check = check_get(check_id=check_id)
        if check.model_id != model.pk:
            raise Http404(f"no check {check_id} of {model.name!r}")
        return Response(CheckRunOut(check).data)


class AlertsView(ScopedAPIView):
    required_scopes = {"GET": "read"}

    @extend_schema(
        parameters=[OpenApiParameter("state", str, enum=AlertState.values)],
        responses={200: AlertOut(many=True), **error_responses(400, *NAMED)},
    )
    def get(self, request: Request, name: str) -> Response:
        model = model_get(name=name)
        state = request.query_params.get("state") or None
        if state is not None and state not in AlertState.values:
            message = f"must be one of {', '.join(AlertState.values)}"
            raise InvalidInput([FieldError(None, "state", message)])
        return Response(AlertOut(model_alerts(model=model, state=state), many=True).data)


class PolicyView(ScopedAPIView):
    required_scopes = {"GET": "read", "PATCH": "admin"}

    @extend_schema(responses={200: PolicyOut, **error_responses(*NAMED)})
    def get(self, request: Request, name: str) -> Response:
        return Response(PolicyOut(policy_for(model_get(name=name))).data)

    @extend_schema(
        request={"application/json": PolicyPatchIn},
        responses={200: PolicyOut, **error_responses(*NAMED, *BODY, 415)},
    )
    def patch(self, request: Request, name: str) -> Response:
        model = model_get(name=name)
        policy = services.policy_change(model=model, changes=json_body(request), actor=request_actor(request))
        return Response(PolicyOut(policy).data)
