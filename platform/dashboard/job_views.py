"""The retraining pages: every job with its live state, and one job in full (plan, memory, log)."""

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from dashboard import jobs
from retraining import selectors as retrain_selectors
from retraining.models import JobState

STATE_FILTERS = ("active", *JobState.values)


@login_required
def retraining_page(request: HttpRequest) -> HttpResponse:
    state = request.GET.get("state") or None
    if state not in STATE_FILTERS:
        state = None
    views = jobs.job_views(retrain_selectors.jobs_list(state=state))
    counts = retrain_selectors.job_counts()
    context = {
        "jobs": views,
        "state": state,
        "states": [(s, counts[s]) for s in STATE_FILTERS],
        "total": sum(counts[s] for s in JobState.values),
        "live_every": jobs.refresh_seconds(views),
        "no_energy_counter": jobs.NO_ENERGY_COUNTER,
    }
    return render(request, "dashboard/retraining.html", context)


@login_required
def retrain_job_page(request: HttpRequest, job_id: int) -> HttpResponse:
    job = retrain_selectors.job_page_get(job_id=job_id)
    view = jobs.job_view(job)
    context = {
        "j": view,
        "log": retrain_selectors.job_log_entries(job=job),
        "curve": jobs.loss_curve(job.progress or {}),
        "live_every": jobs.refresh_seconds([view]),
        "no_energy_counter": jobs.NO_ENERGY_COUNTER,
    }
    return render(request, "dashboard/retrain_job.html", context)
