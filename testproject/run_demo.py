"""`make demo`: two overlapping runs of one locked command; one runs, one skips; the run
journal shows both. Then a run fails, and the operator is told once: one email and one
signed webhook, however many times the jobs' status is evaluated afterwards.

PROVIDER=edge runs the same demo against the companion Durable Object Worker on the
local Workers runtime (Miniflare), so no Cloudflare account is needed.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import shutil
import subprocess
import sys
import threading
from contextlib import ExitStack
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MANAGE = [sys.executable, str(ROOT / "manage.py")]
# `python testproject/run_demo.py` puts testproject/ first on sys.path; the LocalWorker
# imported below must come from this checkout, as the manage.py runs do.
sys.path.insert(0, str(ROOT))


def manage(*args: str, env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*MANAGE, *args], env=env, cwd=ROOT, text=True, capture_output=True, check=check)


def step(text: str) -> None:
    """One progress line, shown at once (the steps below take seconds each)."""
    print(f"demo: {text}", flush=True)


def show(label: str, result: subprocess.CompletedProcess[str]) -> None:
    print(f"--- {label} (exit status {result.returncode})")
    for stream in (result.stdout, result.stderr):
        for line in stream.splitlines():
            print(f"    {line}")


def overlapping_runs(env: dict[str, str]) -> None:
    step("two overlapping runs of `manage.py demo_report` (about 5 s)")
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


def journal(env: dict[str, str]) -> None:
    """What the run journal recorded: the run and the skip, newest first, and whether the
    scheduled job is on time."""
    print("--- the run journal (python manage.py tslock runs demo_report --limit 4)")
    runs = manage("tslock", "runs", "demo_report", "--limit", "4", env=env, check=False)
    print(runs.stdout.rstrip() or runs.stderr.rstrip())
    if "succeeded" not in runs.stdout or "skipped" not in runs.stdout:
        sys.exit("demo: expected the journal to show the run and the skip; see the output above")
    print("--- is any scheduled job late or failing? (python manage.py tslock overdue)")
    overdue = manage("tslock", "overdue", env=env, check=False)
    print((overdue.stdout.rstrip() or overdue.stderr.rstrip()) + f"  (exit status {overdue.returncode})")


class Receiver(ThreadingHTTPServer):
    """The operator's webhook endpoint: keeps every notice whose signature is right."""

    def __init__(self, secret: str) -> None:
        super().__init__(("127.0.0.1", 0), _Hook)
        self.secret = secret.encode()
        self.notices: list[dict[str, object]] = []
        self.refused = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hooks/tslock"


class _Hook(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        expected = "sha256=" + hmac.new(self.server.secret, body, hashlib.sha256).hexdigest()
        if hmac.compare_digest(expected, self.headers.get("X-Tslock-Signature", "")):
            self.server.notices.append(json.loads(body))
            self.send_response(204)
        else:
            self.server.refused += 1
            self.send_response(401)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass  # the demo prints what it received itself


def failing_run(env: dict[str, str], receiver: Receiver) -> None:
    """A run that fails: one email and one webhook say so, and evaluating again (as cron
    would every minute with `tslock overdue --notify`) sends nothing more."""
    mail = Path(env["DEMO_MAIL_DIR"])
    shutil.rmtree(mail, ignore_errors=True)
    receiver.notices.clear()
    step("a run that fails (manage.py demo_report --seconds -1), once run 1's lock_at_least_for is over")
    failed = manage("demo_report", "--seconds", "-1", "--lock-wait", "20", env=env, check=False)
    show("the failing run", failed)
    for _ in range(2):
        manage("tslock", "overdue", "--notify", env=env, check=False)
    emails = sorted(mail.glob("*")) if mail.exists() else []
    print(f"--- told once: {len(emails)} email, {len(receiver.notices)} webhook (after two more evaluations)")
    for path in emails:
        subject = next((line for line in path.read_text().splitlines() if line.startswith("Subject:")), "")
        print(f"    email   {subject}")
    for notice in receiver.notices:
        print(f"    webhook {json.dumps(notice)}")
    if len(emails) != 1 or len(receiver.notices) != 1 or receiver.notices[0].get("status") != "failing":
        sys.exit("demo: expected one email and one webhook saying the job is failing; see the output above")


def main() -> None:
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="testproject.settings", PYTHONUNBUFFERED="1")
    (ROOT / "var").mkdir(exist_ok=True)
    with ExitStack() as stack:
        receiver = Receiver(secret=secrets.token_urlsafe(24))
        threading.Thread(target=receiver.serve_forever, name="webhook", daemon=True).start()
        stack.callback(receiver.shutdown)
        env.update(DEMO_ALERT_WEBHOOK=receiver.url, DEMO_ALERT_SECRET=receiver.secret.decode())
        env.setdefault("DEMO_MAIL_DIR", str(ROOT / "var" / "demo-mail"))
        if os.environ.get("PROVIDER", "") == "edge":
            from tslock_django.worker.runtime import LocalWorker

            step(
                "starting the Durable Object Worker on the local Workers runtime (the first run "
                "installs the runtime: about 165 MB, once per user)"
            )
            token = secrets.token_urlsafe(24)
            worker = stack.enter_context(LocalWorker(token=token, persist_dir=ROOT / "var" / "worker-state"))
            host = worker.url.split("://", 1)[1].rstrip("/")
            env["TSLOCK_URL"] = f"cloudflare-do+http://{token}@{host}/"
            print(f"provider: the Durable Object Worker on the local Workers runtime at {worker.url}")
        else:
            print("provider: the Django database (SQLite file var/demo.sqlite3)")
        step("creating the demo database (manage.py migrate)")
        manage("migrate", "--verbosity", "0", env=env)
        overlapping_runs(env)
        print("--- the lock records now (python manage.py tslock list)")
        listing = manage("tslock", "list", env=env, check=False)
        print(listing.stdout.rstrip() or listing.stderr.rstrip())
        journal(env)
        failing_run(env, receiver)
    step("creating the demo superuser")
    password = secrets.token_urlsafe(12)
    manage("shell", "-c", _SUPERUSER.format(password=password), env=env)
    if os.environ.get("PROVIDER", "") == "edge":
        print(EDGE_HINT)
    print(
        "--- the admin's Locks page\n"
        f"    start the server:  {VENV_PY} manage.py runserver\n"
        "    then open:         http://127.0.0.1:8000/admin/tslock_django/lock/\n"
        f"    log in as:         admin / {password}   (a demo superuser; the password is new each run)"
    )


VENV_PY = ".venv/bin/python"
# Every line runs as written in one shell from the project folder: the Worker and the
# client read the same secret from TSLOCK_TOKEN, which is never printed.
EDGE_HINT = f"""\
--- the local Worker stopped with the demo; its state is kept in var/worker-state.
    To look at it (the admin below shows the database provider unless TSLOCK_EDGE_URL is set),
    start it again in the background with a secret of your own, and point the `edge` provider at it:
      export TSLOCK_TOKEN="$({VENV_PY} -c 'import secrets; print(secrets.token_urlsafe(24))')"
      {VENV_PY} manage.py tslock runtime --serve --persist var/worker-state --port 8787 &
      export TSLOCK_EDGE_URL="cloudflare-do+http://$TSLOCK_TOKEN@127.0.0.1:8787/"
      {VENV_PY} manage.py tslock list --provider edge"""
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
