"""Settings of the demo and test project, read from the environment with django-environ.

Environment:
    DATABASE_URL   the database (default: SQLite file var/demo.sqlite3)
    TSLOCK_URL     the default lock provider (default: db://default)
    TSLOCK_EDGE_URL  an extra provider "edge" (e.g. cloudflare-do+http://TOKEN@127.0.0.1:8787/)
    DEMO_ALERT_WEBHOOK  with DEMO_ALERT_SECRET: `make demo`'s alerts, to this webhook and by
                   email to ADMINS, written as files in DEMO_MAIL_DIR (default var/demo-mail)
"""

from __future__ import annotations

from pathlib import Path

from tslock_django.env import Env

BASE_DIR = Path(__file__).resolve().parent.parent
# SQLite files of the demo and the tests live here (git-ignored).
(BASE_DIR / "var").mkdir(exist_ok=True)
env = Env()

DEBUG = env.bool("DJANGO_DEBUG", default=True)
SECRET_KEY = env.str("DJANGO_SECRET_KEY", default="demo-only-not-secret")
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["127.0.0.1", "localhost"])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "tslock_django",
    "testproject.demo",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "testproject.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
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

DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'var' / 'demo.sqlite3'}")}
if DATABASES["default"]["ENGINE"] == "django.db.backends.mysql":
    try:
        import MySQLdb  # noqa: F401  (mysqlclient, the driver Django recommends; make mysqlclient)
    except ImportError:
        # PyMySQL stands in where mysqlclient has not been built (it needs C headers).
        import pymysql

        pymysql.install_as_MySQLdb()

TSLOCK_PROVIDERS = {"default": env.lock_provider_url("TSLOCK_URL", default="db://default")}
if env.str("TSLOCK_EDGE_URL", default=""):
    TSLOCK_PROVIDERS["edge"] = env.lock_provider_url("TSLOCK_EDGE_URL")

USE_TZ = True
TIME_ZONE = env.str("DJANGO_TIME_ZONE", default="Europe/Berlin")
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"tslock_django": {"handlers": ["console"], "level": "WARNING"}},
}

# `make demo` tells someone when a job fails: an email to ADMINS (files under var/demo-mail,
# where a real project sends through its SMTP server) and a signed webhook to a receiver
# that the demo runs.
if env.str("DEMO_ALERT_WEBHOOK", default=""):
    ADMINS = [("Demo operator", "operator@example.com")]
    SERVER_EMAIL = "tslock-demo@example.com"
    EMAIL_BACKEND = "django.core.mail.backends.filebased.EmailBackend"
    EMAIL_FILE_PATH = env.str("DEMO_MAIL_DIR", default=str(BASE_DIR / "var" / "demo-mail"))
    TSLOCK_ALERTS = {
        "channels": [
            {"BACKEND": "tslock_django.alerts.EmailChannel"},
            {
                "BACKEND": "tslock_django.alerts.WebhookChannel",
                "OPTIONS": {"url": env.str("DEMO_ALERT_WEBHOOK"), "secret": env.str("DEMO_ALERT_SECRET")},
            },
        ]
    }
