"""E-mail and storage settings read from the environment: defaults, derivations, and a clear
ImproperlyConfigured naming the variable for each bad or contradictory value."""

import pytest
from django.core.exceptions import ImproperlyConfigured

from driftwatch.backends import MAIL_BACKENDS, S3_STORAGE, default_storage_from_env, email_from_env
from driftwatch.env import RENAMED, env_bool, env_int, refuse_renamed

EMAIL_AND_S3 = [
    "DRIFTWATCH_EMAIL_BACKEND",
    "DRIFTWATCH_EMAIL_HOST",
    "DRIFTWATCH_EMAIL_PORT",
    "DRIFTWATCH_EMAIL_HOST_USER",
    "DRIFTWATCH_EMAIL_HOST_PASSWORD",
    "DRIFTWATCH_EMAIL_USE_TLS",
    "DRIFTWATCH_EMAIL_USE_SSL",
    "DRIFTWATCH_EMAIL_TIMEOUT",
    "DRIFTWATCH_S3_BUCKET",
    "DRIFTWATCH_S3_ENDPOINT_URL",
    "DRIFTWATCH_S3_REGION",
    "DRIFTWATCH_S3_PREFIX",
    "DRIFTWATCH_S3_ACCESS_KEY_ID",
    "DRIFTWATCH_S3_SECRET_ACCESS_KEY",
]


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [*EMAIL_AND_S3, *RENAMED]:
        monkeypatch.delenv(name, raising=False)


def test_email_goes_to_the_console_unless_an_smtp_host_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    assert email_from_env().backend == MAIL_BACKENDS["console"]
    monkeypatch.setenv("DRIFTWATCH_EMAIL_HOST", "smtp.example.com")
    email = email_from_env()
    assert (email.backend, email.host, email.port, email.timeout) == (
        MAIL_BACKENDS["smtp"],
        "smtp.example.com",
        25,
        10,
    )


def test_an_explicit_email_backend_wins_by_short_name_or_dotted_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRIFTWATCH_EMAIL_HOST", "smtp.example.com")
    monkeypatch.setenv("DRIFTWATCH_EMAIL_BACKEND", "locmem")
    assert email_from_env().backend == "django.core.mail.backends.locmem.EmailBackend"
    monkeypatch.setenv("DRIFTWATCH_EMAIL_BACKEND", "myproject.mail.Backend")
    assert email_from_env().backend == "myproject.mail.Backend"
    monkeypatch.setenv("DRIFTWATCH_EMAIL_BACKEND", "carrier-pigeon")
    with pytest.raises(ImproperlyConfigured, match="DRIFTWATCH_EMAIL_BACKEND='carrier-pigeon'"):
        email_from_env()


def test_the_default_smtp_port_follows_tls_or_ssl(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRIFTWATCH_EMAIL_USE_TLS", "1")
    assert (email_from_env().port, email_from_env().use_tls) == (587, True)
    monkeypatch.setenv("DRIFTWATCH_EMAIL_USE_TLS", "0")
    monkeypatch.setenv("DRIFTWATCH_EMAIL_USE_SSL", "yes")
    assert (email_from_env().port, email_from_env().use_ssl) == (465, True)
    monkeypatch.setenv("DRIFTWATCH_EMAIL_PORT", "2525")
    assert email_from_env().port == 2525


@pytest.mark.parametrize(
    ("value", "message"),
    [("abc", "DRIFTWATCH_EMAIL_PORT='abc' is not an integer"),
     ("0", "DRIFTWATCH_EMAIL_PORT=0 is out of range"),
     ("70000", "DRIFTWATCH_EMAIL_PORT=70000 is out of range \\(1 to 65535\\)")],
)  # fmt: skip
def test_a_bad_smtp_port_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, value: str, message: str
) -> None:
    monkeypatch.setenv("DRIFTWATCH_EMAIL_PORT", value)
    with pytest.raises(ImproperlyConfigured, match=message):
        email_from_env()


def test_tls_and_ssl_together_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRIFTWATCH_EMAIL_USE_TLS", "true")
    monkeypatch.setenv("DRIFTWATCH_EMAIL_USE_SSL", "true")
    with pytest.raises(ImproperlyConfigured, match="DRIFTWATCH_EMAIL_USE_TLS and DRIFTWATCH_EMAIL_USE_SSL"):
        email_from_env()


def test_an_smtp_user_without_a_password_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRIFTWATCH_EMAIL_HOST_USER", "alerts")
    with pytest.raises(ImproperlyConfigured, match="DRIFTWATCH_EMAIL_HOST_PASSWORD is not set"):
        email_from_env()


def test_a_bad_boolean_or_timeout_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRIFTWATCH_EMAIL_USE_TLS", "maybe")
    with pytest.raises(ImproperlyConfigured, match="DRIFTWATCH_EMAIL_USE_TLS='maybe' is not a boolean"):
        email_from_env()
    monkeypatch.delenv("DRIFTWATCH_EMAIL_USE_TLS")
    monkeypatch.setenv("DRIFTWATCH_EMAIL_TIMEOUT", "-1")
    with pytest.raises(
        ImproperlyConfigured, match="DRIFTWATCH_EMAIL_TIMEOUT=-1 is out of range \\(at least 1\\)"
    ):
        email_from_env()


def test_empty_values_mean_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("X_FLAG", "")
    monkeypatch.setenv("X_NUMBER", " ")
    assert env_bool("X_FLAG", True) is True and env_int("X_NUMBER", 7) == 7


def test_files_stay_on_the_filesystem_without_a_bucket() -> None:
    assert default_storage_from_env() == {"BACKEND": "django.core.files.storage.FileSystemStorage"}


def test_an_s3_option_without_a_bucket_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRIFTWATCH_S3_ENDPOINT_URL", "http://minio:9000")
    with pytest.raises(
        ImproperlyConfigured, match="DRIFTWATCH_S3_ENDPOINT_URL set without DRIFTWATCH_S3_BUCKET"
    ):
        default_storage_from_env()


def test_a_bucket_selects_private_never_overwriting_s3_storage(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRIFTWATCH_S3_BUCKET", "models")
    monkeypatch.setenv("DRIFTWATCH_S3_PREFIX", "/prod/")
    monkeypatch.setenv("DRIFTWATCH_S3_REGION", "eu-west-1")
    storage = default_storage_from_env()
    assert storage["BACKEND"] == S3_STORAGE
    assert storage["OPTIONS"] == {
        "bucket_name": "models",
        "location": "prod",
        "file_overwrite": False,
        "default_acl": None,
        "endpoint_url": None,
        "region_name": "eu-west-1",
    }  # no keys: boto3's own chain (AWS_ACCESS_KEY_ID, profile, instance role) applies


def test_s3_keys_come_in_pairs_and_the_endpoint_is_a_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRIFTWATCH_S3_BUCKET", "models")
    monkeypatch.setenv("DRIFTWATCH_S3_SECRET_ACCESS_KEY", "secret")
    with pytest.raises(ImproperlyConfigured, match="DRIFTWATCH_S3_ACCESS_KEY_ID is not set"):
        default_storage_from_env()
    monkeypatch.setenv("DRIFTWATCH_S3_ACCESS_KEY_ID", "key")
    assert default_storage_from_env()["OPTIONS"]["access_key"] == "key"
    monkeypatch.setenv("DRIFTWATCH_S3_ENDPOINT_URL", "minio:9000")
    with pytest.raises(ImproperlyConfigured, match="DRIFTWATCH_S3_ENDPOINT_URL='minio:9000' is not an http"):
        default_storage_from_env()


def test_every_old_django_name_is_refused_with_its_new_name(monkeypatch: pytest.MonkeyPatch) -> None:
    refuse_renamed()  # none set: nothing to say
    for old in RENAMED:
        monkeypatch.setenv(old, "x")
    with pytest.raises(ImproperlyConfigured) as refused:
        refuse_renamed()
    for old, new in RENAMED.items():
        assert f"{old} is no longer read, set {new} instead" in str(refused.value)
