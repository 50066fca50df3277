"""Server-rendered pages: fetch through selectors, render a template."""

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from registry import selectors
from registry.models import RegisteredModel


@login_required
def home(request: HttpRequest) -> HttpResponse:
    models = [selectors.model_detail(model=m) for m in RegisteredModel.objects.all()]
    return render(request, "dashboard/home.html", {"models": models})


@login_required
def model_page(request: HttpRequest, name: str) -> HttpResponse:
    model = selectors.model_get(name=name)
    return render(
        request,
        "dashboard/model.html",
        {"model": selectors.model_detail(model=model), "versions": model.versions.all()},
    )
