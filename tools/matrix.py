"""`make matrix`: the test suite on every Python 3.10-3.13 found here crossed with every
supported Django series, each in a virtualenv of its own under var/matrix/.

    python -m tools.matrix                  every combination, then the floor run
    python -m tools.matrix --newest         the newest Django on the newest Python,
                                            Django-facing tests only (--full for all)
    python -m tools.matrix --newest --oldest  and the oldest Django on the oldest Python
                                            (CI: the pair that breaks first, and the one
                                            most users pin)
    python -m tools.matrix --python 3.10 --django 4.2 --no-floor

Interpreters: ``python3.X`` on PATH when it runs (a pyenv shim for a version that is not
enabled does not), else ``$(pyenv root)/versions/3.X.*/bin/python3.X``. For each one the
newest release of each Django series that pip offers for it is used; a series pip does not
offer for that Python (Django 6.0 needs 3.12) is listed as "not offered" and not run. The
floor run uses the oldest Python found with the oldest Django, httpx and django-environ
that pyproject.toml allows.

Each run installs the project (editable, every extra) and the ``test`` dependency group
without the lint and type tools, and runs pytest without the stress tests (``-m "not
stress"``), the browser test and the benchmark smoke test, in two processes (pytest-xdist,
as ``make test`` runs it; ``--processes 0`` for one). The table goes to stdout and to
var/matrix/results.md; each run's output to var/matrix/<name>.log. Exit status 1 when a
run failed.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the TOML reader pip carries is the same code
    from pip._vendor import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "var" / "matrix"
PYTHONS = ("3.10", "3.11", "3.12", "3.13")
DJANGO_SERIES = ("4.2", "5.1", "5.2", "6.0", "6.1")
#: Test-group entries a suite run does not need: lint and type tools (django-stubs would
#: also pull its own Django requirement into the resolution) and the browser driver.
NOT_FOR_THE_SUITE = {"ruff", "mypy", "django-stubs", "playwright"}
PYTEST_ARGS = [
    "-q",
    "-m",
    "not stress",
    "--ignore=tests/browser",
    "--ignore=tests/test_bench_smoke.py",
    "-p",
    "no:randomly",
]
#: What ``--newest`` leaves out to stay within CI's time budget (about 2 minutes instead of
#: 5): the Workers runtime, Workers KV and fault-injection tests exercise Node.js, httpx and
#: the database servers rather than Django, and the main suite runs them on every commit.
NOT_DJANGO_FACING = ["--ignore=tests/kv", "--ignore=tests/worker", "--ignore=tests/faults"]


@dataclasses.dataclass
class Run:
    """One combination and, once run, its outcome."""

    python: str  # "3.13"
    interpreter: str
    django: str  # an exact version, or "" when pip offers none of the series
    series: str
    pins: dict[str, str] = dataclasses.field(default_factory=dict)  # floor pins besides Django
    result: str = "not run"
    counts: str = ""
    seconds: float = 0.0

    @property
    def name(self) -> str:
        floor = "-floor" if self.pins else ""
        return f"py{self.python}-django{self.series}{floor}"


def requirement_name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0].lower()


def project() -> dict[str, object]:
    with open(ROOT / "pyproject.toml", "rb") as file:
        return tomllib.load(file)


def suite_requirements(data: dict[str, object]) -> list[str]:
    groups = data.get("dependency-groups", {})
    assert isinstance(groups, dict)
    return [
        entry
        for entry in groups.get("test", [])
        if isinstance(entry, str) and requirement_name(entry) not in NOT_FOR_THE_SUITE
    ]


def editable_target(data: dict[str, object]) -> str:
    meta = data["project"]
    assert isinstance(meta, dict)
    extras = sorted(meta.get("optional-dependencies", {}))
    return f"{ROOT}[{','.join(extras)}]" if extras else str(ROOT)


def floors(data: dict[str, object]) -> dict[str, str]:
    """The lowest version each runtime dependency allows (its ``>=``), by name."""
    meta = data["project"]
    assert isinstance(meta, dict)
    found = {}
    for requirement in meta["dependencies"]:
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)\s*>=\s*([0-9][0-9.]*)", requirement.strip())
        if match:
            found[match[1].lower()] = match[2]
    return found


def find_interpreter(version: str) -> str | None:
    candidates = [shutil.which(f"python{version}")]
    pyenv = shutil.which("pyenv")
    if pyenv:
        root = subprocess.run([pyenv, "root"], capture_output=True, text=True, check=False).stdout.strip()
        if root:
            found = sorted(Path(root, "versions").glob(f"{version}.*/bin/python{version}"))
            candidates += [str(p) for p in reversed(found)]
    for candidate in candidates:
        if candidate is None:
            continue
        probe = subprocess.run(
            [candidate, "-c", "import sys, venv; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            check=False,
        )
        if probe.returncode == 0 and probe.stdout.strip() == version:
            return candidate
    return None


def offered_djangos(interpreter: str) -> list[str]:
    """The Django releases pip offers for ``interpreter`` (it filters by Requires-Python)."""
    done = subprocess.run(
        [interpreter, "-m", "pip", "index", "versions", "django"], capture_output=True, text=True, check=False
    )
    match = re.search(r"Available versions: (.*)", done.stdout)
    if done.returncode != 0 or not match:
        raise SystemExit(f"matrix: `{interpreter} -m pip index versions django` failed:\n{done.stderr}")
    return [v.strip() for v in match[1].split(",") if re.fullmatch(r"\d+\.\d+(\.\d+)?", v.strip())]


def numeric(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def newest_of(series: str, versions: list[str]) -> str:
    matching = [v for v in versions if v == series or v.startswith(series + ".")]
    return max(matching, key=numeric, default="")


def plan(
    pythons: list[str], series: list[str], *, floor: bool, newest: bool, oldest: bool = False
) -> tuple[list[Run], list[str]]:
    """The runs to make and notes about what was not found."""
    notes: list[str] = []
    found = {}
    for version in pythons:
        interpreter = find_interpreter(version)
        if interpreter is None:
            notes.append(f"Python {version}: not found on PATH or under pyenv")
        else:
            found[version] = interpreter
    runs: list[Run] = []
    for version, interpreter in found.items():
        offered = offered_djangos(interpreter)
        runs += [Run(version, interpreter, newest_of(s, offered), s) for s in series]
    if newest or oldest:
        installable = [r for r in runs if r.django]

        def age(run: Run) -> tuple[tuple[int, ...], tuple[int, ...]]:
            # Numeric order, not string order: 3.10 is newer than 3.9.
            return numeric(run.python), numeric(run.series)

        ends = []
        if installable and newest:
            ends.append(max(installable, key=age))
        if installable and oldest:
            ends.append(min(installable, key=age))
        runs = list({run.name: run for run in ends}.values())
    elif floor and found:
        oldest = min(found, key=numeric)
        lows = floors(project())
        django = lows.pop("django", "4.2")
        runs.append(Run(oldest, found[oldest], django, django, pins=lows))
    return runs, notes


def venv_ready(run: Run, requirements: list[str], log: Path) -> Path:
    """The run's virtualenv with its packages; reused while what it holds is unchanged."""
    venv = OUT / run.name
    wanted = json.dumps(
        {"python": run.interpreter, "django": run.django, "pins": run.pins, "requirements": requirements},
        sort_keys=True,
    )
    stamp = venv / ".matrix-stamp"
    if stamp.is_file() and stamp.read_text() == hashlib.sha256(wanted.encode()).hexdigest():
        return venv
    if venv.exists():
        shutil.rmtree(venv)
    pins = [f"Django=={run.django}"] + [f"{name}=={version}" for name, version in sorted(run.pins.items())]
    with log.open("w") as output:
        subprocess.run([run.interpreter, "-m", "venv", str(venv)], check=True, stdout=output, stderr=output)
        subprocess.run(
            [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", *pins, *requirements],
            check=True,
            cwd=ROOT,
            stdout=output,
            stderr=output,
        )
    stamp.write_text(hashlib.sha256(wanted.encode()).hexdigest())
    return venv


def execute(run: Run, requirements: list[str], pytest_args: list[str], *, install_only: bool = False) -> None:
    started = time.monotonic()
    log = OUT / f"{run.name}.log"
    print(f"matrix: {run.name} (Django {run.django}) ...", flush=True)
    try:
        venv = venv_ready(run, requirements, log)
    except subprocess.CalledProcessError as err:
        run.result = f"install failed ({err.returncode}; see {log.name})"
        run.seconds = time.monotonic() - started
        return
    if install_only:
        run.result, run.seconds = "installed", time.monotonic() - started
        return
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("VIRTUAL_ENV", "PYTHONPATH", "DJANGO_SETTINGS_MODULE")
    }
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    with log.open("w") as output:
        done = subprocess.run(
            [str(venv / "bin" / "python"), "-m", "pytest", *pytest_args],
            cwd=ROOT,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            check=False,
        )
    run.seconds = time.monotonic() - started
    tail = log.read_text().strip().splitlines()
    summary = next((line for line in reversed(tail) if re.search(r"\d+ (passed|failed|error)", line)), "")
    run.counts = re.sub(r"=+", "", re.sub(r" in [\d.]+s.*", "", summary)).strip()
    run.result = "passed" if done.returncode == 0 else f"FAILED ({done.returncode})"


def table(runs: list[Run]) -> str:
    rows = [
        "| Python | Django | httpx | django-environ | result | tests | minutes |",
        "|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        django = run.django or f"{run.series}: not offered for this Python"
        rows.append(
            f"| {run.python} | {django} | {run.pins.get('httpx', 'newest')} | "
            f"{run.pins.get('django-environ', 'newest')} | {run.result if run.django else '-'} | "
            f"{run.counts} | {run.seconds / 60:.1f} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", nargs="+", default=list(PYTHONS), choices=PYTHONS, metavar="3.X")
    parser.add_argument(
        "--django", nargs="+", default=list(DJANGO_SERIES), choices=DJANGO_SERIES, metavar="X.Y"
    )
    parser.add_argument("--no-floor", dest="floor", action="store_false", help="Skip the floor run.")
    parser.add_argument(
        "--newest",
        action="store_true",
        help="Only the newest Django on the newest Python found, Django-facing tests only (CI).",
    )
    parser.add_argument(
        "--oldest",
        action="store_true",
        help="Only the oldest Django on the oldest Python found (with --newest: both ends), "
        "Django-facing tests only.",
    )
    parser.add_argument("--full", action="store_true", help="With --newest or --oldest: the whole suite.")
    parser.add_argument(
        "--install-only", action="store_true", help="Prepare the virtualenvs without running the suite."
    )
    parser.add_argument(
        "--jobs", type=int, default=1, help="Runs at a time (each test run has databases of its own)."
    )
    parser.add_argument(
        "--processes",
        type=int,
        default=2,
        help="pytest-xdist processes per run (default 2, as make test; 0 runs each suite in one).",
    )
    args = parser.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    data = project()
    requirements = [f"-e{editable_target(data)}", *suite_requirements(data)]
    pytest_args = [*PYTEST_ARGS, "-n", str(args.processes), "--dist", "loadgroup", "--no-loadscope-reorder"]
    ends_only = args.newest or args.oldest
    pytest_args += NOT_DJANGO_FACING if ends_only and not args.full else []
    runs, notes = plan(args.python, args.django, floor=args.floor, newest=args.newest, oldest=args.oldest)
    if ends_only and not args.full:
        notes.append(
            "Django-facing tests only (tests/kv, tests/worker and tests/faults left out: --full runs them)"
        )
    for note in notes:
        print(f"matrix: {note}")
    if not runs:
        print(f"matrix: skipped: none of Python {', '.join(args.python)} was found to run the suite on")
        return 0

    def record() -> str:
        # Written after every run, so a long matrix shows its progress (and survives a stop).
        report = table(runs)
        (OUT / "results.md").write_text(report + "\n" + "".join(f"\n{note}" for note in notes) + "\n")
        return report

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        pending = [
            pool.submit(execute, run, requirements, pytest_args, install_only=args.install_only)
            for run in runs
            if run.django
        ]
        for done in concurrent.futures.as_completed(pending):
            done.result()
            record()
    print(record())
    expected = "installed" if args.install_only else "passed"
    return 1 if any(r.django and r.result != expected for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
