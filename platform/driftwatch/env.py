"""Typed readers of the environment for settings.py. Each fails loudly with ImproperlyConfigured
naming the variable, so a typo stops the process at startup instead of misbehaving later."""

import os
from ipaddress import IPv4Network, IPv6Network, ip_network

from django.core.exceptions import ImproperlyConfigured

TRUE = {"1", "true", "yes", "on"}
FALSE = {"0", "false", "no", "off"}
LOG_LEVELS = {"debug", "info", "warning", "error", "critical"}

# Variables read under another name before settings took one prefix. They are refused rather than
# read with a warning: an ignored DJANGO_SECRET_KEY would silently mean a new random key.
RENAMED = {
    "DJANGO_SECRET_KEY": "SECRET_KEY",
    "DJANGO_DEBUG": "DRIFTWATCH_DEBUG",
    "DJANGO_ALLOWED_HOSTS": "DRIFTWATCH_ALLOWED_HOSTS",
    "DJANGO_CSRF_TRUSTED_ORIGINS": "DRIFTWATCH_CSRF_TRUSTED_ORIGINS",
    "DJANGO_EMAIL_BACKEND": "DRIFTWATCH_EMAIL_BACKEND",
}


def refuse_renamed() -> None:
    """Stop with one message naming every old variable that is set and its new name."""
    found = [old for old in RENAMED if old in os.environ]
    if found:
        moves = "; ".join(f"{old} is no longer read, set {RENAMED[old]} instead" for old in found)
        raise ImproperlyConfigured(f"renamed settings: {moves}")


def env_set(name: str) -> bool:
    return os.environ.get(name, "") != ""


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name) or default


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name, "")
    value = raw.strip().lower()
    if value == "":
        return default
    if value in TRUE | FALSE:
        return value in TRUE
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean (use 1/0, true/false, yes/no, on/off)")


def env_int(name: str, default: int, *, low: int | None = None, high: int | None = None) -> int:
    raw = os.environ.get(name, "")
    if raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer") from None
    if (low is not None and value < low) or (high is not None and value > high):
        raise ImproperlyConfigured(f"{name}={value} is out of range ({_range(low, high)})")
    return value


def _range(low: int | None, high: int | None) -> str:
    if high is None:
        return f"at least {low}"
    if low is None:
        return f"at most {high}"
    return f"{low} to {high}"


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name, "")
    if raw.strip() == "":
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_choice(name: str, default: str, choices: set[str]) -> str:
    value = env_str(name, default).strip().lower()
    if value not in choices:
        raise ImproperlyConfigured(f"{name}={value!r} is not one of {', '.join(sorted(choices))}")
    return value


def networks(name: str, values: list[str]) -> tuple[IPv4Network | IPv6Network, ...]:
    """CIDRs (`10.0.0.0/8`, `::1/128`) or single addresses; a bad one stops the process."""
    out = []
    for value in values:
        try:
            out.append(ip_network(value, strict=False))
        except ValueError:
            raise ImproperlyConfigured(f"{name}: {value!r} is not a network (e.g. 10.0.0.0/8)") from None
    return tuple(out)
