"""The e-mail and file-storage backends, chosen from the environment (read by settings.py).

E-mail goes out over SMTP when DRIFTWATCH_EMAIL_HOST is set, else to the console. Files (reference
datasets, check reports, model artifacts, holdouts) go to an S3 bucket when DRIFTWATCH_S3_BUCKET is
set, else under MEDIA_ROOT. Bad or contradictory values stop the process with ImproperlyConfigured.
"""

from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from driftwatch.env import env_bool, env_int, env_set, env_str

MAIL_BACKENDS = {
    name: f"django.core.mail.backends.{name}.EmailBackend" for name in ("smtp", "console", "locmem", "dummy")
}
FILESYSTEM_STORAGE = "django.core.files.storage.FileSystemStorage"
S3_STORAGE = "storages.backends.s3.S3Storage"
S3_OPTIONAL = (
    "DRIFTWATCH_S3_ENDPOINT_URL",
    "DRIFTWATCH_S3_REGION",
    "DRIFTWATCH_S3_PREFIX",
    "DRIFTWATCH_S3_ACCESS_KEY_ID",
    "DRIFTWATCH_S3_SECRET_ACCESS_KEY",
)


@dataclass(frozen=True)
class Email:
    backend: str
    host: str
    port: int
    user: str
    password: str
    use_tls: bool
    use_ssl: bool
    timeout: int


def email_from_env() -> Email:
    use_tls = env_bool("DRIFTWATCH_EMAIL_USE_TLS", False)
    use_ssl = env_bool("DRIFTWATCH_EMAIL_USE_SSL", False)
    if use_tls and use_ssl:
        raise ImproperlyConfigured(
            "DRIFTWATCH_EMAIL_USE_TLS and DRIFTWATCH_EMAIL_USE_SSL are both on: use STARTTLS "
            "(USE_TLS, usually port 587) or implicit TLS (USE_SSL, usually port 465), not both"
        )
    user, password = _pair("DRIFTWATCH_EMAIL_HOST_USER", "DRIFTWATCH_EMAIL_HOST_PASSWORD")
    return Email(
        backend=_mail_backend(),
        host=env_str("DRIFTWATCH_EMAIL_HOST", "localhost"),
        port=env_int("DRIFTWATCH_EMAIL_PORT", _default_port(use_tls, use_ssl), low=1, high=65535),
        user=user,
        password=password,
        use_tls=use_tls,
        use_ssl=use_ssl,
        # An SMTP server that accepts the connection and then hangs must not hold a worker forever.
        timeout=env_int("DRIFTWATCH_EMAIL_TIMEOUT", 10, low=1),
    )


def _mail_backend() -> str:
    raw = env_str("DRIFTWATCH_EMAIL_BACKEND").strip()
    if raw == "":
        return MAIL_BACKENDS["smtp" if env_set("DRIFTWATCH_EMAIL_HOST") else "console"]
    if raw.lower() in MAIL_BACKENDS:
        return MAIL_BACKENDS[raw.lower()]
    if "." in raw:
        return raw
    raise ImproperlyConfigured(
        f"DRIFTWATCH_EMAIL_BACKEND={raw!r} is neither one of {', '.join(MAIL_BACKENDS)} nor a dotted path"
    )


def _default_port(use_tls: bool, use_ssl: bool) -> int:
    if use_ssl:
        return 465
    return 587 if use_tls else 25


def _pair(first: str, second: str) -> tuple[str, str]:
    """Two variables that only make sense together (a user and its password)."""
    a, b = env_str(first), env_str(second)
    if bool(a) != bool(b):
        missing = second if a else first
        raise ImproperlyConfigured(f"{first} and {second} go together: {missing} is not set")
    return a, b


def default_storage_from_env() -> dict[str, Any]:
    """Django's STORAGES["default"]: every FileField (and so every stored file) goes through it."""
    bucket = env_str("DRIFTWATCH_S3_BUCKET")
    if bucket:
        return {"BACKEND": S3_STORAGE, "OPTIONS": s3_options(bucket)}
    stray = [name for name in S3_OPTIONAL if env_set(name)]
    if stray:
        raise ImproperlyConfigured(f"{', '.join(stray)} set without DRIFTWATCH_S3_BUCKET")
    return {"BACKEND": FILESYSTEM_STORAGE}


def s3_options(bucket: str) -> dict[str, Any]:
    """Private objects (no ACL: the bucket's policy applies), never overwritten (a name taken gets a
    suffix, as on the filesystem). Credentials: DRIFTWATCH_S3_* when set, else the standard AWS
    chain (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, profile, instance role)."""
    access_key, secret_key = _pair("DRIFTWATCH_S3_ACCESS_KEY_ID", "DRIFTWATCH_S3_SECRET_ACCESS_KEY")
    endpoint = env_str("DRIFTWATCH_S3_ENDPOINT_URL")
    if endpoint and not endpoint.startswith(("http://", "https://")):
        raise ImproperlyConfigured(f"DRIFTWATCH_S3_ENDPOINT_URL={endpoint!r} is not an http(s):// URL")
    options: dict[str, Any] = {
        "bucket_name": bucket,
        "location": env_str("DRIFTWATCH_S3_PREFIX").strip("/"),
        "file_overwrite": False,
        "default_acl": None,
        "endpoint_url": endpoint or None,
        "region_name": env_str("DRIFTWATCH_S3_REGION") or None,
    }
    if access_key:
        options.update(access_key=access_key, secret_key=secret_key)
    return options
