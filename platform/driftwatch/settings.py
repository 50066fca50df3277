"""driftwatch settings: one env-driven module with safe local defaults.

Production sets DATABASE_URL (PostgreSQL) and REDIS_URL (Redis broker). A fresh checkout with
neither runs on SQLite and kombu's filesystem broker under var/, so only Python is needed.
"""

import os
import secrets
from datetime import timedelta
from pathlib import Path

import dj_database_url
from csp.constants import NONE, SELF, UNSAFE_INLINE

from driftwatch.backends import default_storage_from_env, email_from_env
from driftwatch.env import (
    LOG_LEVELS,
    env_bool,
    env_choice,
    env_int,
    env_list,
    env_str,
    networks,
    refuse_renamed,
)
from driftwatch.paths import ROOT

# Every variable is DRIFTWATCH_* except the conventional DATABASE_URL, REDIS_URL and SECRET_KEY;
# the README's settings table lists them all. Old DJANGO_* names stop the process, naming the new.
refuse_renamed()

BASE_DIR = ROOT
VAR_DIR = Path(env_str("DRIFTWATCH_VAR_DIR", str(ROOT / "var")))


def local_secret_key(path: Path) -> str:
    """A random key kept under var/ (mode 0600) when SECRET_KEY is not set: a fresh
    checkout runs, and no key is shared between installations or published in the code."""
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        key = secrets.token_urlsafe(50)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process of this install wrote it first
            return path.read_text().strip()
        with os.fdopen(fd, "w") as handle:
            handle.write(key)
        return key


# Off unless asked for: a debug page shows tracebacks, settings and every URL pattern.
# `manage.py run_platform --debug` turns it on for the processes it starts, and says so.
DEBUG = env_bool("DRIFTWATCH_DEBUG", False)
SECRET_KEY = env_str("SECRET_KEY") or local_secret_key(VAR_DIR / "secret_key")
ALLOWED_HOSTS = env_list("DRIFTWATCH_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("DRIFTWATCH_CSRF_TRUSTED_ORIGINS", [])

# --- HTTPS (production) -------------------------------------------------------------------
# DRIFTWATCH_HTTPS=1 when the site is served over HTTPS: redirect http, secure cookies, HSTS.
# Behind a TLS-terminating proxy, name the header it sets (e.g. HTTP_X_FORWARDED_PROTO) in
# DRIFTWATCH_PROXY_SSL_HEADER; only then is that header trusted to say the request was https.
DRIFTWATCH_HTTPS = env_bool("DRIFTWATCH_HTTPS", False)
SECURE_SSL_REDIRECT = DRIFTWATCH_HTTPS
SESSION_COOKIE_SECURE = DRIFTWATCH_HTTPS
CSRF_COOKIE_SECURE = DRIFTWATCH_HTTPS
SECURE_HSTS_SECONDS = env_int("DRIFTWATCH_HSTS_SECONDS", 31_536_000, low=0) if DRIFTWATCH_HTTPS else 0
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DRIFTWATCH_HSTS_INCLUDE_SUBDOMAINS", True)
SECURE_HSTS_PRELOAD = env_bool("DRIFTWATCH_HSTS_PRELOAD", True)
_proxy_header = env_str("DRIFTWATCH_PROXY_SSL_HEADER")
if _proxy_header:
    SECURE_PROXY_SSL_HEADER = (_proxy_header, "https")
# /healthz is probed over plain http by load balancers and the run command.
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
SESSION_COOKIE_HTTPONLY = True
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "csp",
    "django_celery_results",
    "django_celery_beat",
    "axes",
    "core",
    "registry",
    "monitoring",
    "retraining",
    "dashboard",
    "demo",
    "observability",
]

MIDDLEWARE = [
    # Outermost: request latency by route includes every other middleware (observability app).
    "observability.middleware.RequestMetricsMiddleware",
    "core.middleware.RequestSizeLimitMiddleware",
    "core.middleware.UrlTextMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "core.unavailable.ServiceUnavailableMiddleware",
    "csp.middleware.CSPMiddleware",
    # Last, as django-axes asks: it turns a lockout raised during authentication into a 429.
    "axes.middleware.AxesMiddleware",
]

# --- login throttling (django-axes) -------------------------------------------------------
# After DRIFTWATCH_LOGIN_FAILURE_LIMIT wrong passwords for one username from one address, that
# pair is locked out (429, even with the right password) for DRIFTWATCH_LOGIN_COOLOFF_MINUTES.
# Covers the dashboard's and the admin's login alike; API tokens do not log in.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("DRIFTWATCH_LOGIN_FAILURE_LIMIT", 5, low=1)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("DRIFTWATCH_LOGIN_COOLOFF_MINUTES", 15, low=0))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_VERBOSE = False

# --- Content-Security-Policy (django-csp) for the app's own pages ---------------------------
# No inline or foreign script: whatever a value smuggles into a page cannot run. Inline style
# attributes stay allowed (chart and heat-map colours); the evidently report has its own, sandboxed
# policy (dashboard.views.check_report).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "style-src-attr": [UNSAFE_INLINE],
        "img-src": [SELF, "data:"],
        "font-src": [SELF, "data:"],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [NONE],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    }
}

ROOT_URLCONF = "driftwatch.urls"
WSGI_APPLICATION = "driftwatch.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [ROOT / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASE_URL = env_str("DATABASE_URL")
if DATABASE_URL:
    # Health checks: a connection kept across requests is tested before reuse, so the app
    # recovers by itself after a database restart. A short connect timeout keeps an outage a
    # quick 503 rather than a hung worker.
    DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=60, conn_health_checks=True)}
    if DATABASES["default"]["ENGINE"].endswith("sqlite3"):  # e.g. a test's worker subprocess
        DATABASES["default"]["OPTIONS"] = {
            "timeout": 30,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    else:
        DATABASES["default"].setdefault("OPTIONS", {})["connect_timeout"] = env_int(
            "DRIFTWATCH_DB_CONNECT_TIMEOUT", 5, low=1
        )
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(VAR_DIR / "driftwatch.sqlite3"),
            # Web, worker and beat write concurrently: WAL lets readers run beside the writer,
            # and writers wait for the lock instead of failing.
            "OPTIONS": {
                "timeout": 30,
                "transaction_mode": "IMMEDIATE",
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            },
            # A file, not shared-cache memory: threads of the in-process worker and beat in
            # tests would get "table is locked" at once instead of waiting. One per test process.
            "TEST": {"NAME": str(VAR_DIR / f"test-driftwatch-{os.getpid()}.sqlite3")},
        }
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [ROOT / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
# Folders under var/ (SQLite, static files, the filesystem broker) are made by core.apps at
# django.setup(), not here: importing settings has no side effects.
MEDIA_URL = "media/"
# Uploads live outside every import path: the checkout and platform/ are on sys.path, and the dot
# in "media.store" means no dotted module name reaches a file below it (core.apps refuses a
# DRIFTWATCH_MEDIA_ROOT that one does reach).
MEDIA_ROOT = Path(env_str("DRIFTWATCH_MEDIA_ROOT", str(VAR_DIR / "media.store")))
# Reference datasets, check reports, model artifacts and holdouts are FileFields: all of them go
# through this storage (S3 when DRIFTWATCH_S3_BUCKET is set, else MEDIA_ROOT; driftwatch.backends).
STORAGES = {
    "default": default_storage_from_env(),
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True

# The dashboard's own login, for every active user; staff-only actions are checked in the views.
LOGIN_URL = "dashboard:login"
LOGIN_REDIRECT_URL = "dashboard:home"
LOGOUT_REDIRECT_URL = "dashboard:login"

# --- ingestion limits ---------------------------------------------------------------------
# One request carries at most this many bytes (413 above it) and this many rows (400 above).
DRIFTWATCH_MAX_REQUEST_BYTES = env_int("DRIFTWATCH_MAX_REQUEST_BYTES", 64 * 1024 * 1024, low=1)
DRIFTWATCH_MAX_BATCH_ROWS = env_int("DRIFTWATCH_MAX_BATCH_ROWS", 100_000, low=1)
# Ingestion requests per API token per minute (429 with Retry-After above it); 0: no limit.
# A token's own rate_limit_per_minute overrides it.
DRIFTWATCH_INGEST_RATE_PER_MINUTE = env_int("DRIFTWATCH_INGEST_RATE_PER_MINUTE", 1200, low=0)
# A reference is the baseline every check loads: 1,000,000 rows is far past what drift needs.
DRIFTWATCH_MAX_REFERENCE_ROWS = env_int("DRIFTWATCH_MAX_REFERENCE_ROWS", 1_000_000, low=1)

# --- metrics (/metrics, the observability app) ---------------------------------------------
# Scraped with a read-scope token, or without one from these networks (CIDRs, comma-separated;
# the connection's address, never a forwarded header). Empty: a token is always needed.
DRIFTWATCH_METRICS_ALLOWED_NETWORKS = networks(
    "DRIFTWATCH_METRICS_ALLOWED_NETWORKS", env_list("DRIFTWATCH_METRICS_ALLOWED_NETWORKS", [])
)

# --- retraining ---------------------------------------------------------------------------
# Retraining: the memory budget a job plans against (0: the worker's free GPU memory or available
# RAM), a hard cap on the measured peak (0: none; a cgroup-like limit, also how tests force an OOM),
# the planner's safety margin in percent (unset: measured per kind of layer), and the heartbeat / stale times the reaper uses.
DRIFTWATCH_RETRAIN_BUDGET_BYTES = env_int("DRIFTWATCH_RETRAIN_BUDGET_BYTES", 0, low=0)
DRIFTWATCH_RETRAIN_MEMORY_CAP_BYTES = env_int("DRIFTWATCH_RETRAIN_MEMORY_CAP_BYTES", 0, low=0)
# Unset: the estimator's measured error on the kinds of layer the model holds (workers.memory.margins).
DRIFTWATCH_RETRAIN_MARGIN = (
    env_int("DRIFTWATCH_RETRAIN_MARGIN_PERCENT", 10, low=0, high=99) / 100
    if os.environ.get("DRIFTWATCH_RETRAIN_MARGIN_PERCENT", "").strip()
    else None
)
DRIFTWATCH_RETRAIN_HEARTBEAT_SECONDS = env_int("DRIFTWATCH_RETRAIN_HEARTBEAT_SECONDS", 5, low=1)
# A job's checkpoint is written at most this often (the first at once): epochs of milliseconds
# would otherwise spend their time writing files. A kill loses at most this much, or one interval.
DRIFTWATCH_RETRAIN_CHECKPOINT_SECONDS = env_int("DRIFTWATCH_RETRAIN_CHECKPOINT_SECONDS", 30, low=0)
DRIFTWATCH_RETRAIN_STALE_SECONDS = env_int("DRIFTWATCH_RETRAIN_STALE_SECONDS", 120, low=1)
# GPU fleet: a GPU worker's device heartbeat period, after how long a silent device gets no new job,
# and after how many skips a waiting job holds a device (placement's starvation bound).
DRIFTWATCH_GPU_HEARTBEAT_SECONDS = env_int("DRIFTWATCH_GPU_HEARTBEAT_SECONDS", 10, low=1)
DRIFTWATCH_GPU_STALE_SECONDS = env_int("DRIFTWATCH_GPU_STALE_SECONDS", 30, low=1)
DRIFTWATCH_GPU_MAX_SKIPS = env_int("DRIFTWATCH_GPU_MAX_SKIPS", 3, low=0)
DATA_UPLOAD_MAX_MEMORY_SIZE = DRIFTWATCH_MAX_REQUEST_BYTES
FILE_UPLOAD_MAX_MEMORY_SIZE = 8 * 1024 * 1024

# The operator's own recipe modules (comma-separated module names, installed on web and workers):
# the only places besides the built-ins a recipe's factory may come from. A client's string is
# never imported otherwise (workers.training.recipes.check_code_path).
DRIFTWATCH_RECIPE_MODULES = env_list("DRIFTWATCH_RECIPE_MODULES", [])

# Policy webhooks may go to loopback and private networks only when this is on (an internal
# receiver); link-local (cloud metadata), multicast and reserved addresses never (core.outbound).
DRIFTWATCH_WEBHOOK_ALLOW_PRIVATE = env_bool("DRIFTWATCH_WEBHOOK_ALLOW_PRIVATE", False)

# --- checks --------------------------------------------------------------------------------
# A check "running" this long under another task is taken as killed: the reaper re-enqueues it
# and any worker may take it over. A redelivery of the same task takes over at once.
DRIFTWATCH_CHECK_STALE_SECONDS = env_int("DRIFTWATCH_CHECK_STALE_SECONDS", 15 * 60, low=1)
# A check asked for through the API over a window of more samples than this runs on a worker
# (202, the check to poll) instead of in the web request, which would outrun the web timeout.
DRIFTWATCH_SYNC_CHECK_SAMPLES = env_int("DRIFTWATCH_SYNC_CHECK_SAMPLES", 50_000, low=0)
# A check of a range window of more samples than this (columnar store) fans out: slices of whole
# hours of about DRIFTWATCH_CHECK_SLICE_ROWS samples each are measured by check_slice tasks on any
# check worker, and the last one sends check_merge (monitoring/fanout.py). 0: never (one worker
# computes the whole check, as on a single machine).
DRIFTWATCH_CHECK_FANOUT_ROWS = env_int("DRIFTWATCH_CHECK_FANOUT_ROWS", 0, low=0)
DRIFTWATCH_CHECK_SLICE_ROWS = env_int("DRIFTWATCH_CHECK_SLICE_ROWS", 2_000_000, low=1)
# Where checks read a window's samples from: a name in monitoring.samples' registry ("columnar":
# Arrow parts in the default storage under samples/, with PredictionSample as their narrow index,
# where predictions are always written). An unknown name fails the first load, naming the known
# ("relational", the JSON rows before the columnar store, is gone since migration monitoring 0031).
DRIFTWATCH_SAMPLE_SOURCE = env_str("DRIFTWATCH_SAMPLE_SOURCE", "columnar")
# The columnar store: a part file no committed part row names (its request failed) and a retired
# part (replaced by compaction; a check may still be reading it) are deleted after this long.
DRIFTWATCH_PART_GRACE_SECONDS = env_int("DRIFTWATCH_PART_GRACE_SECONDS", 3600, low=1)
# An hour's parts are merged into one once the hour is over by this long (late samples settle).
DRIFTWATCH_COMPACT_AFTER_SECONDS = env_int("DRIFTWATCH_COMPACT_AFTER_SECONDS", 600, low=0)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["core.auth.BearerTokenAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    # JSON bodies only (the views that take uploads add multipart themselves), so the schema
    # documents what the API really accepts.
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "EXCEPTION_HANDLER": "core.exception_handler.api_exception_handler",
    "UNAUTHENTICATED_USER": None,
}
# The OpenAPI schema and /api/docs/ need a login or a token unless this is on.
DRIFTWATCH_PUBLIC_API_DOCS = env_bool("DRIFTWATCH_PUBLIC_API_DOCS", False)
SPECTACULAR_SETTINGS = {
    "TITLE": "driftwatch API",
    "DESCRIPTION": "Model registry, prediction and label ingestion, quality checks, retraining.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # Swagger UI served from our own static files: the app works offline.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Three models have a `state`: each gets its own enum name in the document.
    "ENUM_NAME_OVERRIDES": {
        "CheckStateEnum": "monitoring.models.CheckState",
        "AlertStateEnum": "monitoring.models.AlertState",
        "NotificationStateEnum": "monitoring.models.NotificationState",
    },
}

# --- Celery -------------------------------------------------------------------------------
# The cache holds the per-token ingestion counters: Redis (shared by every web process) when
# configured, else per process memory (the embedded default runs one machine).
_REDIS = env_str("REDIS_URL")
CACHES = {
    "default": (
        {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": _REDIS,
            # Redis down must cost a request a moment, not hang it (the limiter then fails open).
            "OPTIONS": {"socket_connect_timeout": 2, "socket_timeout": 2},
        }
        if _REDIS
        else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    )
}

REDIS_URL = env_str("REDIS_URL")
if REDIS_URL:
    CELERY_BROKER_URL = REDIS_URL
    CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object] = {
        # Long GPU jobs are tracked by their database row, not by redelivery (STYLE.md #10).
        "visibility_timeout": 3600,
    }
else:
    BROKER_DIR = VAR_DIR / "broker"
    CELERY_BROKER_URL = "filesystem://"
    # kombu's filesystem channel with its two multi-process races closed (driftwatch.broker_transport).
    CELERY_BROKER_TRANSPORT = "driftwatch.broker_transport:Transport"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(BROKER_DIR / "queue"),
        "data_folder_out": str(BROKER_DIR / "queue"),
        "processed_folder": str(BROKER_DIR / "processed"),
        "control_folder": str(BROKER_DIR / "control"),
        "store_processed": False,
    }
CELERY_RESULT_BACKEND = "django-db"
CELERY_RESULT_EXTENDED = True
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = TIME_ZONE
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ALWAYS_EAGER = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

# SMTP when DRIFTWATCH_EMAIL_HOST is set, else the console (driftwatch.backends).
_EMAIL = email_from_env()
EMAIL_BACKEND = _EMAIL.backend
EMAIL_HOST = _EMAIL.host
EMAIL_PORT = _EMAIL.port
EMAIL_HOST_USER = _EMAIL.user
EMAIL_HOST_PASSWORD = _EMAIL.password
EMAIL_USE_TLS = _EMAIL.use_tls
EMAIL_USE_SSL = _EMAIL.use_ssl
EMAIL_TIMEOUT = _EMAIL.timeout
DEFAULT_FROM_EMAIL = env_str("DRIFTWATCH_FROM_EMAIL", "driftwatch@localhost")
# The dashboard's address as people reach it: alert messages (Slack, PagerDuty) link back to it.
DRIFTWATCH_PUBLIC_URL = env_str("DRIFTWATCH_PUBLIC_URL", "http://127.0.0.1:8000").rstrip("/")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    # One line per event with the ids that follow a check or a job through the flow.
    "formatters": {
        "driftwatch": {"format": "%(asctime)s %(levelname)s %(processName)s %(name)s: %(message)s"}
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "driftwatch"}},
    "root": {
        "handlers": ["console"],
        "level": env_choice("DRIFTWATCH_LOG_LEVEL", "info", LOG_LEVELS).upper(),
    },
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}
