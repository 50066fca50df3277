"""Who may scrape /metrics: a `read` (or admin) token for every model, or an allowed network.

The address is the connection's own (REMOTE_ADDR), never a forwarded header a client can write:
behind a proxy, allow the proxy's network only if everything reaching it may scrape.
"""

from ipaddress import ip_address

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request

from core.auth import BearerTokenAuthentication
from core.models import ApiToken


def from_allowed_network(request: HttpRequest) -> bool:
    try:
        address = ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return False
    return any(address in network for network in settings.DRIFTWATCH_METRICS_ALLOWED_NETWORKS)


def refusal(status: int, error: str, detail: str) -> JsonResponse:
    response = JsonResponse({"error": error, "detail": detail, "errors": []}, status=status)
    if status == 401:
        response["WWW-Authenticate"] = BearerTokenAuthentication.keyword
    return response


def scrape_refusal(request: HttpRequest) -> JsonResponse | None:
    """None when the request may scrape; else the 401 or 403 to answer."""
    if from_allowed_network(request):
        return None
    try:
        found = BearerTokenAuthentication().authenticate(Request(request))
    except AuthenticationFailed as exc:
        return refusal(401, "authentication_failed", str(exc.detail))
    if found is None:
        return refusal(
            401, "not_authenticated", "send 'Authorization: Bearer <token>' with a read-scope token"
        )
    token = found[1]
    return token_refusal(token)


def token_refusal(token: ApiToken) -> JsonResponse | None:
    if not token.allows("read"):
        return refusal(
            403, "permission_denied", f"metrics need a token with scope 'read' (this one has '{token.scope}')"
        )
    if token.model_names:
        # The gauges cover every model: a token limited to some must not read the others'.
        return refusal(403, "permission_denied", "metrics cover every model; this token is limited to some")
    return None
