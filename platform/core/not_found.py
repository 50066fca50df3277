"""404 for the API in the API's JSON error shape (Django's page is HTML), e.g. `/retrain-jobs/x`
where the URL wants an integer."""

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.defaults import page_not_found


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if request.path.startswith("/api/"):
        return JsonResponse(
            {"error": "not_found", "detail": "no such endpoint or object", "errors": []}, status=404
        )
    return page_not_found(request, exception)
