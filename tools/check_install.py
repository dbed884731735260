"""Install tslock-django the way a user does and check it works from site-packages.

    python -m tools.check_install [--keep DIR]      (make check-install)

Builds the sdist and the wheel with ``python -m build`` (the wheel from the sdist, so the
sdist is proven complete), installs the wheel into a fresh virtualenv, makes a project with
``django-admin startproject`` in another folder, adds the app and a locked command, and
checks: one run and one skip, the admin's Locks page, and
``LocalWorker(persist_dir="worker-state")`` keeping its data under the project folder with
the runtime in the per-user cache and nothing new under site-packages. Prints what the
wheel holds. Needs the network as ``pip install`` and ``npm ci`` do (their caches help).
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Files the wheel must carry besides Python modules: without them the admin, the
#: migrations or the local Worker break only after installation.
REQUIRED_IN_WHEEL = (
    "tslock_django/py.typed",
    # The Worker's ES modules (index.js the entry).
    "tslock_django/worker/index.js",
    "tslock_django/worker/answers.js",
    "tslock_django/worker/index_shard.js",
    "tslock_django/worker/layout.js",
    "tslock_django/worker/listing.js",
    "tslock_django/worker/lock_object.js",
    "tslock_django/worker/repair.js",
    "tslock_django/worker/router.js",
    "tslock_django/worker/text.js",
    "tslock_django/worker/validation.js",
    "tslock_django/worker/serve.mjs",
    "tslock_django/worker/package.json",
    "tslock_django/worker/package-lock.json",
    "tslock_django/worker/wrangler.jsonc",
    "tslock_django/migrations/0001_initial.py",
)

NIGHTLY = """\
from django.core.management.base import BaseCommand

from tslock_django import locked_command


@locked_command("5m", "1m")
class Command(BaseCommand):
    def handle(self, *args, **options):
        self.stdout.write("nightly ran")
"""

ADMIN_PAGE = """\
from django.contrib.auth import get_user_model
from django.test import Client
from django.test.utils import setup_test_environment

setup_test_environment()
user = get_user_model().objects.create_superuser("admin", "admin@example.com", "x")
client = Client()
client.force_login(user)
page = client.get("/admin/tslock_django/lock/")
body = page.content.decode()
assert page.status_code == 200, page.status_code
assert "nightly" in body, "the held lock is listed"
print("ADMIN OK")
"""

LOCAL_WORKER = """\
import httpx

from tslock_django.worker.runtime import LocalWorker, find_runtime

with LocalWorker(persist_dir="worker-state") as worker:
    answer = httpx.post(
        worker.url + "/v1/acquire",
        headers={"Authorization": f"Bearer {worker.token}"},
        json={"name": "nightly", "lock_at_most_for_ms": 600000},
    )
    assert answer.status_code == 200, answer.text
print("RUNTIME", find_runtime())
"""


class CheckFailed(Exception):
    """A step did not do what a user would expect."""


def run(args: list[str | Path], *, cwd: Path, env: dict[str, str] | None = None) -> str:
    """Run a step; its output on success, a CheckFailed with the output otherwise."""
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise CheckFailed(
            f"`{' '.join(map(str, args))}` failed ({done.returncode}):\n{done.stdout}{done.stderr}"
        )
    return done.stdout + done.stderr


def step(text: str) -> None:
    print(f"check-install: {text}", flush=True)


def build(work: Path) -> tuple[Path, Path]:
    """The sdist and the wheel, built by `python -m build` in a virtualenv of its own."""
    tools = work / "build-env"
    run([sys.executable, "-m", "venv", tools], cwd=work)
    run([tools / "bin" / "python", "-m", "pip", "install", "--quiet", "build"], cwd=work)
    dist = work / "dist"
    run([tools / "bin" / "python", "-m", "build", "--outdir", dist, ROOT], cwd=work)
    (sdist,) = dist.glob("*.tar.gz")
    (wheel,) = dist.glob("*.whl")
    return sdist, wheel


def check_archives(sdist: Path, wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    missing = [n for n in REQUIRED_IN_WHEEL if n not in names]
    if missing:
        raise CheckFailed(f"the wheel lacks {', '.join(missing)}")
    if not any(n.endswith(".dist-info/licenses/LICENSE") for n in names):
        raise CheckFailed("the wheel carries no LICENSE in its .dist-info/licenses")
    if any("node_modules" in n for n in names):
        raise CheckFailed("the wheel carries node_modules")
    with tarfile.open(sdist) as archive:
        if not any(n.endswith("/LICENSE") for n in archive.getnames()):
            raise CheckFailed("the sdist carries no LICENSE")
    return names


def summary(wheel: Path, names: list[str]) -> str:
    """The wheel's size and its files counted by folder and by kind."""

    def folder(name: str) -> str:
        parts = Path(name).parts
        if ".dist-info" in parts[0]:
            return parts[0].split("-")[0] + "-*.dist-info"
        return "/".join(parts[:2]) + "/" if len(parts) > 2 else parts[0] + "/*"

    files = [n for n in names if not n.endswith("/")]
    kinds = collections.Counter(Path(n).suffix or Path(n).name for n in files)
    lines = [f"{wheel.name}: {wheel.stat().st_size / 1024:.0f} KiB, {len(files)} files"]
    lines.append("  by kind: " + ", ".join(f"{count} {kind}" for kind, count in kinds.most_common()))
    for place, count in sorted(collections.Counter(folder(n) for n in files).items()):
        lines.append(f"  {count:3d}  {place}")
    return "\n".join(lines)


def site_packages(venv: Path) -> Path:
    (folder,) = venv.glob("lib/python3*/site-packages")
    return folder


def snapshot(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def check(work: Path) -> None:
    started = time.monotonic()
    step("building the sdist and the wheel (python -m build)")
    sdist, wheel = build(work)
    names = check_archives(sdist, wheel)
    step("installing the wheel into a fresh virtualenv")
    venv = work / "app-env"
    run([sys.executable, "-m", "venv", venv], cwd=work)
    python = venv / "bin" / "python"
    run([python, "-m", "pip", "install", "--quiet", wheel], cwd=work)
    before = snapshot(site_packages(venv))

    step("django-admin startproject, the app and a locked command")
    project = work / "project"
    project.mkdir()
    run([venv / "bin" / "django-admin", "startproject", "mysite", "."], cwd=project)
    settings = project / "mysite" / "settings.py"
    settings.write_text(
        settings.read_text().replace(
            "INSTALLED_APPS = [\n", 'INSTALLED_APPS = [\n    "tslock_django",\n    "jobs",\n', 1
        )
    )
    commands = project / "jobs" / "management" / "commands"
    commands.mkdir(parents=True)
    for package in (project / "jobs", project / "jobs" / "management", commands):
        (package / "__init__.py").write_text("")
    (commands / "nightly.py").write_text(NIGHTLY)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "TSLOCK_", "VIRTUAL_ENV"))},
        "XDG_CACHE_HOME": str(work / "cache"),
        "npm_config_prefer_offline": "true",
        "PYTHONDONTWRITEBYTECODE": "",
    }
    env.pop("PYTHONPATH", None)
    manage = [python, "manage.py"]
    run([*manage, "migrate", "--verbosity", "0"], cwd=project, env=env)
    first = run([*manage, "nightly"], cwd=project, env=env)
    second = run([*manage, "nightly"], cwd=project, env=env)
    if "nightly ran" not in first or "skipped: lock 'nightly' is held by" not in second:
        raise CheckFailed(f"expected one run and one skip, got:\n{first}\n{second}")
    step(f"skip line: {second.strip()}")
    run([*manage, "check", "--deploy", "--fail-level", "CRITICAL"], cwd=project, env=env)

    step("the admin's Locks page")
    if "ADMIN OK" not in run([*manage, "shell", "-c", ADMIN_PAGE], cwd=project, env=env):
        raise CheckFailed("the admin page check did not finish")

    step('LocalWorker(persist_dir="worker-state") from the project folder (installs the runtime)')
    said = run([python, "-c", LOCAL_WORKER], cwd=project, env=env)
    runtime = Path(said.split("RUNTIME ", 1)[1].strip())
    if not runtime.is_relative_to(work / "cache"):
        raise CheckFailed(f"the runtime is in {runtime}, not in the per-user cache")
    if "tslock: installing the local Workers runtime" not in said:
        raise CheckFailed(f"no progress line while npm ran:\n{said}")
    if not any((project / "worker-state").rglob("*.sqlite")):
        raise CheckFailed("the Worker's data is not under the project's worker-state folder")
    new = sorted(snapshot(site_packages(venv)) - before)
    if new:
        raise CheckFailed("new files under site-packages:\n  " + "\n  ".join(new[:20]))

    step(f"all checks passed in {time.monotonic() - started:.0f} s")
    print(summary(wheel, names))
    print(f"{sdist.name}: {sdist.stat().st_size / 1024:.0f} KiB")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--keep", type=Path, help="work in this folder and keep it (default: a temporary one)"
    )
    args = parser.parse_args(argv)
    try:
        if args.keep:
            args.keep.mkdir(parents=True, exist_ok=False)
            check(args.keep.resolve())
        else:
            with tempfile.TemporaryDirectory(prefix="tslock-check-install-") as work:
                check(Path(work))
    except CheckFailed as failed:
        print(f"check-install: FAILED: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
