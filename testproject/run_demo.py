"""`make demo`: two overlapping runs of one locked command; one runs, one skips.

PROVIDER=edge runs the same demo against the companion Durable Object Worker on the
local Workers runtime (Miniflare), so no Cloudflare account is needed.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import threading
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MANAGE = [sys.executable, str(ROOT / "manage.py")]


def manage(*args: str, env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*MANAGE, *args], env=env, cwd=ROOT, text=True, capture_output=True, check=check)


def show(label: str, result: subprocess.CompletedProcess[str]) -> None:
    print(f"--- {label} (exit status {result.returncode})")
    for stream in (result.stdout, result.stderr):
        for line in stream.splitlines():
            print(f"    {line}")


def overlapping_runs(env: dict[str, str]) -> None:
    first = subprocess.Popen(
        # --lock-wait: a demo run a few seconds earlier may still hold the lock for its
        # lock_at_least_for (10 s); wait that out instead of skipping.
        [*MANAGE, "demo_report", "--seconds", "3", "--lock-wait", "20"],
        env=env,
        cwd=ROOT,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert first.stdout is not None
    first_lines = [first.stdout.readline()]  # blocks until the first run holds the lock
    second = manage("demo_report", "--seconds", "3", env=env, check=False)
    rest, err = first.communicate()
    first_lines.append(rest)
    show("run 1", subprocess.CompletedProcess(first.args, first.returncode, "".join(first_lines), err))
    show("run 2, started while run 1 was working", second)
    ran = [r for r in (first.returncode, second.returncode) if r == 0]
    if len(ran) != 2 or "skipped:" not in second.stderr:
        sys.exit("demo: expected one run and one skip; see the output above")


def main() -> None:
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="testproject.settings", PYTHONUNBUFFERED="1")
    (ROOT / "var").mkdir(exist_ok=True)
    with ExitStack() as stack:
        if os.environ.get("PROVIDER", "") == "edge":
            from tslock_django.testing.worker_runtime import LocalWorker

            token = secrets.token_urlsafe(24)
            worker = stack.enter_context(LocalWorker(token=token, persist_dir=ROOT / "var" / "worker-state"))
            host = worker.url.split("://", 1)[1].rstrip("/")
            env["TSLOCK_URL"] = f"cloudflare-do+http://{token}@{host}/"
            print(f"provider: the Durable Object Worker on the local Workers runtime at {worker.url}")
        else:
            print("provider: the Django database (SQLite file var/demo.sqlite3)")
        manage("migrate", "--verbosity", "0", env=env)
        overlapping_runs(env)
        print("--- the lock records now (python manage.py tslock list)")
        listing = manage("tslock", "list", env=env, check=False)
        print(listing.stdout.rstrip() or listing.stderr.rstrip())
    password = secrets.token_urlsafe(12)
    manage("shell", "-c", _SUPERUSER.format(password=password), env=env)
    if os.environ.get("PROVIDER", "") == "edge":
        print(
            "    (the local Worker stopped with the demo; `runserver` below shows the database "
            "provider. For the Worker's locks, start `node tslock_django/worker/serve.mjs "
            "--persist var/worker-state` and set TSLOCK_EDGE_URL=cloudflare-do+http://TOKEN@HOST/)"
        )
    print(
        "--- the admin's Locks page\n"
        f"    start the server:  {VENV_PY} manage.py runserver\n"
        "    then open:         http://127.0.0.1:8000/admin/tslock_django/lock/\n"
        f"    log in as:         admin / {password}   (a demo superuser; the password is new each run)"
    )


VENV_PY = ".venv/bin/python"
_SUPERUSER = """
from django.contrib.auth import get_user_model
User = get_user_model()
user, _ = User.objects.get_or_create(username="admin", defaults={{"email": "admin@example.com"}})
user.is_staff = user.is_superuser = True
user.set_password({password!r})
user.save()
"""

if __name__ == "__main__":
    threading.current_thread().name = "demo"
    main()
