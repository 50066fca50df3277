"""Server-rendered pages: fetch through selectors, render a template; writes call services."""

import logging
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar, cast

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.http.response import HttpResponseBase
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from core.audit import audit_record
from core.errors import Conflict, InvalidInput
from dashboard import jobs, presenters, selectors
from dashboard.contenders import champion_vs_challenger
from dashboard.heatmap import drift_heatmap
from dashboard.policy_form import policy_form_changes, policy_form_fields, policy_form_values
from dashboard.quality_chart import quality_chart
from dashboard.templatetags.dashboard_extras import window_label
from dashboard.timerange import PRESET_LABELS, time_range_parse
from monitoring import alerts as alert_services
from monitoring import checks as check_services
from monitoring import reports
from monitoring import selectors as monitoring_selectors
from monitoring import services as monitoring_services
from monitoring.models import AlertState
from monitoring.selectors import policy_for
from monitoring.window import scheduled_window
from registry.models import RegisteredModel
from registry.selectors import active_reference_get, model_get, versions_list
from retraining import promotion as retrain_promotion
from retraining import requests as retrain_requests
from retraining import selectors as retrain_selectors
from retraining.inventory import fleet_overview
from retraining.models import Trigger

logger = logging.getLogger(__name__)

ViewFunc = TypeVar("ViewFunc", bound=Callable[..., HttpResponseBase])


def staff_required(view: ViewFunc) -> ViewFunc:
    """A logged-in staff user, or 403: state changes are for staff, reading is for every user."""

    @wraps(view)
    @login_required
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if not request.user.is_staff:
            raise PermissionDenied("this action is for staff users")
        return view(request, *args, **kwargs)

    return cast(ViewFunc, wrapped)


@login_required
def gpu_page(request: HttpRequest) -> HttpResponse:
    return render(request, "dashboard/gpu.html", fleet_overview())


@login_required
def home(request: HttpRequest) -> HttpResponse:
    query, status = request.GET.get("q", "").strip(), request.GET.get("status", "")
    rows = presenters.model_rows_filtered(query=query, status=status)
    context = {
        "models": rows,
        "any_fallback": any(r["realised_fallback"] for r in rows),
        "query": query,
        "status": status,
        "statuses": presenters.HOME_STATUSES,
        "spark": {"w": presenters.SPARK_W, "h": presenters.SPARK_H},
    }
    return render(request, "dashboard/home.html", context)


def _model_context(request: HttpRequest, model: RegisteredModel) -> dict[str, Any]:
    policy = policy_for(model)
    latest = monitoring_selectors.latest_done_check(model=model)
    reference = active_reference_get(model=model)
    trange = time_range_parse(request.GET, newest=selectors.newest_check_end(model=model))
    retrain_jobs = jobs.job_views(retrain_selectors.jobs_for_model(model=model, limit=20))
    if trange.error:
        messages.warning(request, f"{trange.error}: showing the {trange.label}.")
    segments = presenters.segment_rows(check=latest, policy=policy)
    segment = request.GET.get("segment", "")
    if segment and segment not in {s["key"] for s in segments}:
        messages.warning(request, f"No segment {segment!r} in the latest check: showing the whole model.")
        segment = ""
    return {
        "reference": reference,
        "trange": trange,
        "presets": PRESET_LABELS,
        "model": model,
        "summary": presenters.model_rows(name=model.name)[0],
        "policy": policy,
        "policy_rows": presenters.policy_rows(
            policy=policy, reference=reference, staff=request.user.is_staff
        ),
        "policy_form": policy_form_fields(policy=policy) if request.user.is_staff else None,
        "chart": quality_chart(model=model, policy=policy, trange=trange),
        "heatmap": drift_heatmap(model=model, trange=trange, segment=segment),
        "segments": segments,
        "segment": segment,
        "latest": latest,
        "data_quality": presenters.data_quality_rows(check=latest),
        "alerts": monitoring_selectors.alerts_list(model=model, limit=50),
        "checks": presenters.check_rows(model=model, metric=policy.metric, trange=trange),
        "versus": champion_vs_challenger(model=model, metric=policy.metric),
        "versions": versions_list(model=model),
        "retrain_jobs": retrain_jobs,
        "retrain_live_every": jobs.refresh_seconds(retrain_jobs),
    }


@login_required
def model_page(request: HttpRequest, name: str) -> HttpResponse:
    return render(request, "dashboard/model.html", _model_context(request, model_get(name=name)))


@require_POST
@staff_required
def model_policy_edit(request: HttpRequest, name: str) -> HttpResponse:
    """The staff-only policy form: monitoring validates it exactly as the API's PATCH. A refused
    value re-renders the page (400) with each error beside its field; nothing is stored."""
    model = model_get(name=name)
    changes = policy_form_changes(policy=policy_for(model), values=policy_form_values(request.POST))
    if not changes:
        messages.info(request, "Policy unchanged: every field already had that value.")
        return redirect(reverse("dashboard:model", args=[model.name]) + "#policy")
    try:
        monitoring_services.policy_change(model=model, changes=changes, actor=request.user)
    except InvalidInput as exc:
        return _policy_refused(request, model, exc)
    saved = ", ".join(f"{k} = {v}" for k, v in changes.items())
    messages.success(request, f"Policy saved: {saved}.")
    return redirect(reverse("dashboard:model", args=[model.name]) + "#policy")


def _policy_refused(request: HttpRequest, model: RegisteredModel, exc: InvalidInput) -> HttpResponse:
    errors: dict[str, str] = {}
    for error in exc.errors:
        errors[error.field] = "; ".join(filter(None, [errors.get(error.field), error.message]))
    context = _model_context(request, model)
    posted: dict[str, Any] = {k: request.POST[k] for k in request.POST if k != "csrfmiddlewaretoken"}
    posted |= {k: v for k, v in policy_form_values(request.POST).items() if isinstance(v, bool)}
    context["policy_form"] = policy_form_fields(policy=context["policy"], posted=posted, errors=errors)
    context["policy_refused"] = f"Policy not saved: {len(exc.errors)} invalid value(s); nothing was stored."
    return render(request, "dashboard/model.html", context, status=400)


@require_POST
@staff_required
def model_check_run(request: HttpRequest, name: str) -> HttpResponse:
    model = model_get(name=name)
    # Up to the newest labelled prediction: a newer batch whose labels have not arrived would
    # draw a false dip. The same window twice is the same check, not a new one.
    end = selectors.newest_labelled_time(model=model) or timezone.now()
    window = scheduled_window(policy_for(model), end)
    existing = monitoring_selectors.check_for_window(model=model, spec=window.spec, end=window.end)
    if existing is not None:
        messages.info(
            request,
            f"Nothing new since check #{existing.pk} ({window_label(existing.window_spec)} up to "
            f"{existing.window_end:%Y-%m-%d %H:%M}): no new check.",
        )
        return redirect("dashboard:model", name=model.name)
    if check_services.check_runs_on_worker(model=model, window=window):  # would outrun the web timeout
        queued = check_services.check_enqueue(model=model, window=window)
        audit_record(actor=request.user, action="check.run", target=queued)
        messages.success(
            request, f"Check #{queued.pk} over {window_label(queued.window_spec)}: queued for a worker."
        )
        return redirect("dashboard:model", name=model.name)
    try:
        check = check_services.quality_check_run(model_id=model.pk, window=window)
    except Exception as exc:  # the service stored the failure on the row; show it, don't 500
        logger.exception("check for %s failed", model.name)
        messages.error(request, f"Check failed: {type(exc).__name__}: {exc}")
        return redirect("dashboard:model", name=model.name)
    if check is not None:
        audit_record(actor=request.user, action="check.run", target=check)
        reason = f" ({check.skipped_reason})" if check.skipped_reason else ""
        messages.success(
            request, f"Check #{check.pk} over {window_label(check.window_spec)}: {check.state}{reason}."
        )
    return redirect("dashboard:model", name=model.name)


@require_POST
@staff_required
def model_retrain(request: HttpRequest, name: str) -> HttpResponse:
    """The staff-only "Retrain now" button."""
    model = model_get(name=name)
    try:
        job = retrain_requests.job_request(model=model, trigger=Trigger.ADMIN, requested_by=request.user)
        messages.success(request, f"Retrain job #{job.pk} queued.")
    except Conflict as exc:
        messages.warning(request, str(exc.detail))
    return redirect("dashboard:model", name=model.name)


RETRAIN_ACTIONS: dict[str, Callable[..., Any]] = {
    "approve": retrain_promotion.job_approve,
    "reject": retrain_promotion.job_reject,
    "rollback": retrain_promotion.job_rollback,
    "cancel": lambda job, user: retrain_requests.job_cancel(job=job),
}


def _action_done(job: Any, action: str) -> str:
    if action == "cancel" and job.is_active:
        return f"Retrain job #{job.pk}: cancel requested; the worker stops at its next heartbeat."
    return f"Retrain job #{job.pk}: {action} done ({job.state})."


@require_POST
@staff_required
def retrain_job_action(request: HttpRequest, job_id: int, action: str) -> HttpResponse:
    if action not in RETRAIN_ACTIONS:
        raise Http404("unknown action")
    job = retrain_selectors.job_get(job_id=job_id)
    try:
        job = RETRAIN_ACTIONS[action](job=job, user=request.user)
        messages.success(request, _action_done(job, action))
    except Conflict as exc:
        messages.warning(request, str(exc.detail))
    return _back(request, reverse("dashboard:model", args=[job.model.name]))


@login_required
def check_detail(request: HttpRequest, check_id: int) -> HttpResponse:
    check = monitoring_selectors.check_get(check_id=check_id)
    context = {"check": check, "detail": presenters.check_detail(check=check)}
    return render(request, "dashboard/check.html", context)


@require_POST
@staff_required
def check_report_request(request: HttpRequest, check_id: int) -> HttpResponse:
    """The staff-only "Generate" / "Retry report" button; a second click while pending does nothing."""
    check = monitoring_selectors.check_get(check_id=check_id)
    try:
        requested = reports.check_report_request(check=check)
    except reports.ReportUnavailable as exc:
        messages.error(request, f"No report: {exc}.")
        return redirect("dashboard:check", check_id=check.pk)
    if requested:
        audit_record(actor=request.user, action="report.request", target=check)
        messages.info(request, "Report requested: a worker renders it; reload this page in a few seconds.")
    else:
        check.refresh_from_db(fields=["report_state"])
        messages.info(
            request, f"The report is {check.get_report_state_display()} already: not requested again."
        )
    return redirect("dashboard:check", check_id=check.pk)


# The evidently report embeds ingested values and runs evidently's inline scripts. `sandbox`
# without allow-same-origin gives it an opaque origin: its scripts cannot read the dashboard's
# cookies, DOM or storage, nor send requests with the user's session; connect-src/form-action
# 'none' stop it from talking to anything, and no page may frame it.
REPORT_CSP = "; ".join(
    [
        "sandbox allow-scripts",
        "default-src 'none'",
        "script-src 'unsafe-inline' 'unsafe-eval'",
        "style-src 'unsafe-inline'",
        "img-src data: blob:",
        "font-src data:",
        "connect-src 'none'",
        "form-action 'none'",
        "base-uri 'none'",
        "frame-ancestors 'none'",
    ]
)


@login_required
def check_report(request: HttpRequest, check_id: int) -> HttpResponseBase:
    """The stored evidently HTML, sandboxed; 404 until a worker has rendered it."""
    check = monitoring_selectors.check_get(check_id=check_id)
    if not selectors.check_has_report(check=check):
        raise Http404("the report has not been rendered yet")
    response = FileResponse(check.report.open("rb"), content_type="text/html; charset=utf-8")
    response["Content-Security-Policy"] = REPORT_CSP  # django-csp leaves a set header alone
    response["Referrer-Policy"] = "no-referrer"
    response["Cross-Origin-Resource-Policy"] = "same-origin"
    return response


@login_required
def alerts_page(request: HttpRequest) -> HttpResponse:
    state = request.GET.get("state") or None
    if state not in AlertState.values:
        state = None
    counts = monitoring_selectors.alert_counts()
    context = {
        "alerts": monitoring_selectors.alerts_list(state=state),
        "state": state,
        "states": [(s, counts[s]) for s in AlertState.values],
        "counts": counts,
    }
    return render(request, "dashboard/alerts.html", context)


def _back(request: HttpRequest, fallback: str) -> HttpResponseRedirect:
    target = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        target = fallback
    return HttpResponseRedirect(target)


@require_POST
@staff_required
def alert_acknowledge(request: HttpRequest, alert_id: int) -> HttpResponse:
    alert = monitoring_selectors.alert_get(alert_id=alert_id)
    if alert_services.alert_acknowledge(alert=alert, by=request.user.get_username()):
        audit_record(actor=request.user, action="alert.acknowledge", target=alert)
        messages.success(
            request, f"Alert #{alert.pk} ({alert.kind}) acknowledged by {request.user.get_username()}."
        )
    else:
        messages.warning(request, f"Alert #{alert.pk} was not open (it is {alert.state}).")
    return _back(request, reverse("dashboard:model", args=[alert.model.name]))


@require_POST
@staff_required
def alert_resolve(request: HttpRequest, alert_id: int) -> HttpResponse:
    alert = monitoring_selectors.alert_get(alert_id=alert_id)
    if alert_services.alert_resolve(alert=alert):
        audit_record(actor=request.user, action="alert.resolve", target=alert)
        cooldown = policy_for(alert.model).cooldown_minutes
        messages.success(
            request,
            f"Alert #{alert.pk} ({alert.kind}) resolved. A new {alert.kind} alert can open again after "
            f"the {cooldown}-minute cooldown, if checks still breach.",
        )
    else:
        messages.warning(request, f"Alert #{alert.pk} was already resolved.")
    return _back(request, reverse("dashboard:model", args=[alert.model.name]))
