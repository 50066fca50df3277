"""Outbound HTTP to an address an admin typed (policy webhooks), without server-side request forgery.

Rules: only http(s); the host is resolved once and every address it resolves to must be public
(loopback, private, shared, link-local, multicast, reserved and unspecified addresses are refused;
DRIFTWATCH_WEBHOOK_ALLOW_PRIVATE=1 lets loopback and private networks through, never link-local
such as the cloud metadata address 169.254.169.254); the connection goes to the address that was
checked (no second lookup a DNS rebinding could answer differently); redirects are never
followed (a 3xx is a refusal). ``target_problem`` says why a URL is refused, for forms and APIs.
"""

import http.client
import ipaddress
import socket
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings

SCHEMES = {"http": 80, "https": 443}
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class UnsafeTarget(ValueError):
    """A URL driftwatch will not connect to; the message says why."""


@dataclass(frozen=True)
class Target:
    scheme: str
    host: str
    port: int
    path: str
    address: str  # the checked address the connection goes to


def _allow_private() -> bool:
    return bool(settings.DRIFTWATCH_WEBHOOK_ALLOW_PRIVATE)


def address_problem(ip: IPAddress, *, allow_private: bool) -> str | None:
    """Why a connection to ``ip`` is refused, or None."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    # The first kind that matches decides (::1 is loopback before it is reserved).
    kinds = [
        ("unspecified", ip.is_unspecified, False),
        ("link-local", ip.is_link_local, False),
        ("multicast", ip.is_multicast, False),
        ("loopback", ip.is_loopback, True),
        ("reserved", ip.is_reserved, False),
        ("private", ip.is_private, True),
        ("not globally routable", not ip.is_global, True),
    ]
    for kind, matches, private_kind in kinds:
        if not matches:
            continue
        if private_kind and allow_private:
            return None
        hint = " (DRIFTWATCH_WEBHOOK_ALLOW_PRIVATE=1 allows it)" if private_kind else ""
        return f"{ip} is a {kind} address{hint}"
    return None


def _split(url: str) -> tuple[str, str, int, str]:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise UnsafeTarget(f"not a usable URL: {exc}") from None
    if parts.scheme not in SCHEMES:
        raise UnsafeTarget(f"only http and https URLs are allowed, not {parts.scheme or 'none'!r}")
    if not parts.hostname:
        raise UnsafeTarget("the URL has no host")
    if parts.username or parts.password:
        raise UnsafeTarget("credentials in the URL's host part are not allowed (use the secret)")
    path = parts.path or "/"
    return (
        parts.scheme,
        parts.hostname,
        port or SCHEMES[parts.scheme],
        path + (f"?{parts.query}" if parts.query else ""),
    )


def _addresses(host: str, port: int) -> list[IPAddress]:
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise UnsafeTarget(f"{host!r} does not resolve: {exc}") from None
    return [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]


def target_resolve(url: str, *, allow_private: bool | None = None) -> Target:
    """The checked target of ``url``: every address the host resolves to must be allowed."""
    allow = _allow_private() if allow_private is None else allow_private
    scheme, host, port, path = _split(url)
    addresses = _addresses(host, port)
    for ip in addresses:
        problem = address_problem(ip, allow_private=allow)
        if problem:
            raise UnsafeTarget(f"{host!r} is refused: {problem}")
    return Target(scheme=scheme, host=host, port=port, path=path, address=str(addresses[0]))


def target_problem(url: str, *, resolve: bool = True) -> str | None:
    """Why ``url`` is refused (for a form or an API error), or None. A name that does not resolve
    now is not refused here (DNS may be down; delivery checks again)."""
    try:
        target_resolve(url) if resolve else _split(url)
    except UnsafeTarget as exc:
        return None if "does not resolve" in str(exc) else str(exc)
    return None


class _PinnedHTTP(http.client.HTTPConnection):
    def __init__(self, target: Target, timeout: float) -> None:
        super().__init__(target.host, target.port, timeout=timeout)
        self._address = target.address

    def connect(self) -> None:
        self.sock = socket.create_connection((self._address, self.port), self.timeout)


class _PinnedHTTPS(http.client.HTTPSConnection):
    def __init__(self, target: Target, timeout: float) -> None:
        super().__init__(target.host, target.port, timeout=timeout, context=ssl.create_default_context())
        self._address = target.address

    def connect(self) -> None:
        sock = socket.create_connection((self._address, self.port), self.timeout)
        # The certificate is checked against the host name, the socket is the checked address.
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)  # type: ignore[attr-defined]


def post(url: str, body: bytes, headers: dict[str, str], *, timeout: float = 10) -> int:
    """POST to a checked target; returns the status (a 3xx is never followed). UnsafeTarget for a
    refused URL; OSError / http.client.HTTPException for network trouble."""
    target = target_resolve(url)
    connection = (_PinnedHTTPS if target.scheme == "https" else _PinnedHTTP)(target, timeout)
    try:
        connection.request("POST", target.path, body=body, headers=headers)
        response = connection.getresponse()
        response.read(64 * 1024)
        return response.status
    finally:
        connection.close()
