"""``python -m bench [--quick] [--only SECTION ...]``: run the benchmarks, print a table
and write ``bench/results/latest.json``."""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.stats import target

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "latest.json"
SECTIONS = (
    "db",
    "contention",
    "do",
    "kv",
    "redis",
    "async",
    "admin",
    "scale",
    "startup",
    "journal",
    "jobs",
    "metrics",
    "notify",
)
SERVERS = {"sqlite": None, "postgres": ("127.0.0.1", 5432), "mariadb": ("127.0.0.1", 3306)}
#: Rows in tslock_lock for the scale section, per server (filled in this order).
SCALE_SIZES = {"postgres": "1000,100000,1000000", "sqlite": "1000,100000"}
#: The servers of the contention section (SQLite has one writer: nothing to contend for).
CONTENTION_SERVERS = ("postgres", "mariadb")


def reachable(address: tuple[str, int] | None) -> bool:
    import socket

    if address is None:
        return True
    try:
        with socket.create_connection(address, timeout=0.5):
            return True
    except OSError:
        return False


def machine() -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import django

    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "django": django.get_version(),
        "platform": platform.platform(),
    }


def child(module: str, *args: str, **env: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{module} {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a fast smoke run (few, short rounds)")
    parser.add_argument("--only", nargs="+", choices=SECTIONS, help="run only these sections")
    parser.add_argument("--output", type=Path, default=RESULTS, help=f"JSON file (default {RESULTS})")
    args = parser.parse_args(argv)
    sections = args.only or list(SECTIONS)
    rounds, seconds = (3, 0.05) if args.quick else (31, 0.3)
    started = time.monotonic()
    report: dict[str, Any] = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "quick": args.quick,
        "machine": machine(),
        "settings": {"rounds": rounds, "seconds_per_batch": seconds},
        "missing": [],
    }
    if "db" in sections:
        report["db"] = {}
        for server, address in SERVERS.items():
            if not reachable(address):
                report["missing"].append(f"{server}: not reachable")
                continue
            print(f"database: {server} ...", file=sys.stderr, flush=True)
            report["db"][server] = child("bench.dbbench", str(rounds), str(seconds), BENCH_DB=server)
    if "contention" in sections:
        report["contention"] = {}
        # Full: 1, 4, 8 and 16 processes, 2 rounds of 1.5 s per contender and cell (about
        # 1.5 minutes per server); quick: the ends of that range, one short round.
        counts, run_s, runs = ("1,16", "0.25", "1") if args.quick else ("1,4,8,16", "1.5", "2")
        for server in CONTENTION_SERVERS:
            if not reachable(SERVERS[server]):
                report["missing"].append(f"contention on {server}: not reachable")
                continue
            print(f"contention: {server} ({counts} processes) ...", file=sys.stderr, flush=True)
            report["contention"][server] = child("bench.contention", counts, run_s, runs, BENCH_DB=server)
    if "do" in sections:
        if shutil.which("node") is None:
            report["missing"].append("durable objects: node is not installed")
        else:
            print("durable objects (local workerd) ...", file=sys.stderr, flush=True)
            from bench import dobench

            report["do"] = dobench.run(rounds, seconds, (500, 5_000) if args.quick else (500, 50_000))
    if "kv" in sections:
        report["kv"] = child("bench.kvbench")
    if "redis" in sections:
        from bench import redisbench

        if not reachable(redisbench.ADDRESS):
            report["missing"].append("redis: nothing listens on 127.0.0.1:6379")
        else:
            print("redis ...", file=sys.stderr, flush=True)
            report["redis"] = child("bench.redisbench", str(rounds), str(seconds))
    if "async" in sections:
        print("alock against lock() on Redis and Durable Objects ...", file=sys.stderr, flush=True)
        report["async"] = child("bench.asyncbench", str(rounds), str(seconds))
        report["missing"] += report["async"].pop("missing", [])
    if "admin" in sections:
        print("admin Locks page ...", file=sys.stderr, flush=True)
        report["admin"] = child("bench.adminbench", "1000,10000", "3" if args.quick else "9")
    if "scale" in sections:
        report["scale"] = {}
        for server, sizes in SCALE_SIZES.items():
            if not reachable(SERVERS[server]):
                report["missing"].append(f"scale on {server}: not reachable")
                continue
            if args.quick:
                sizes = "1000"
            print(f"listing at scale: {server} {sizes} rows ...", file=sys.stderr, flush=True)
            report["scale"][server] = child(
                "bench.scalebench", sizes, "1" if args.quick else "7", BENCH_DB=server
            )
    if "startup" in sections:
        print("import and start-up ...", file=sys.stderr, flush=True)
        from bench import startup

        runs = 3 if args.quick else 15
        report["startup"] = {
            "import_tslock_django": startup.import_time(runs),
            "command": startup.command_startup(runs),
            "checks": startup.checks_time(runs),
            "httpx_imported": startup.httpx_imported(),
            "redis_imported": startup.redis_imported(),
            "monitors": startup.monitored_startup(runs),
        }
    if "journal" in sections:
        print(
            "run journal: start-up with and without, reads at 1k and 1M runs ...", file=sys.stderr, flush=True
        )
        report["journal"] = {"startup": child("bench.journalbench", "startup", "3" if args.quick else "15")}
        if reachable(SERVERS["postgres"]) and not args.quick:
            report["journal"]["scale"] = child("bench.journalbench", "scale", "7", BENCH_DB="postgres")
    if "jobs" in sections:
        from bench import jobbench

        print("job runners: tslock run, locked_task under Celery ...", file=sys.stderr, flush=True)
        report["jobs"] = jobbench.run(args.quick)
        if report["jobs"]["celery"] is None:
            report["missing"].append("jobs: celery or redis-server is missing (no Celery round trip)")
    if "metrics" in sections:
        report["metrics"] = {}
        # Issue 31 item 8: 20,000 job names against 100, in one run per server.
        for server in ("postgres", "sqlite"):
            if not reachable(SERVERS[server]):
                report["missing"].append(f"metrics on {server}: not reachable")
                continue
            print(
                f"metrics scrape and health check: {server}, 100 and 20,000 names ...",
                file=sys.stderr,
                flush=True,
            )
            report["metrics"][server] = child(
                "bench.metricsbench", "100,20000", "3" if args.quick else "15", BENCH_DB=server
            )
    if "notify" in sections:
        report["notify"] = {}
        # Issue 34: overdue --notify with 10,000 scheduled names against 100, in one run.
        for server in ("postgres", "sqlite"):
            if not reachable(SERVERS[server]):
                report["missing"].append(f"notify on {server}: not reachable")
                continue
            print(f"overdue --notify: {server}, 100 and 10,000 names ...", file=sys.stderr, flush=True)
            report["notify"][server] = child(
                "bench.notifybench", "100,10000", "3" if args.quick else "9", BENCH_DB=server
            )
    report["targets"] = targets(report)
    report["elapsed_s"] = round(time.monotonic() - started, 1)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    print(render(report))
    print(f"\nwritten to {args.output} in {report['elapsed_s']} s", file=sys.stderr)
    return 0


def targets(report: dict[str, Any]) -> dict[str, Any]:
    """The project's stated targets, each with the measured value and whether it is met."""
    found: dict[str, Any] = {}
    # Issue 14: the share of the raw two-statement floor each server must reach.
    # Issue 33: against raw SQL through Django's cursor, with one acquire statement.
    for server, floor in (("postgres", 0.9), ("sqlite", 0.9), ("mariadb", 0.75)):
        data = report.get("db", {}).get(server)
        if data:
            ratio = data["tslock_over"]["raw-sql"]
            found[f"{server}: tslock >= {floor}x raw-sql"] = target(ratio, floor, ">=")
    pg = report.get("db", {}).get("postgres")
    if pg:
        found["postgres: tslock >= 2.5x django-db-mutex"] = target(
            pg["tslock_over"]["django-db-mutex"], 2.5, ">="
        )
    from bench import contention

    found.update(contention.targets(report.get("contention")))
    do = report.get("do")
    if do:
        found["durable objects: time per operation <= 1.2x raw httpx"] = target(
            do["tslock_time_over_raw"], 1.2, "<="
        )
    from bench import dobench

    found.update(dobench.targets(do))
    found.update(scale_targets(report.get("scale", {}).get("postgres")))
    found.update(journal_targets(report.get("journal")))
    from bench import redisbench

    found.update(redisbench.targets(report.get("redis")))
    from bench import jobbench

    found.update(jobbench.targets(report.get("jobs")))

    from bench import asyncbench

    found.update(asyncbench.targets(report.get("async")))
    from bench import metricsbench

    found.update(metricsbench.targets(report.get("metrics")))
    from bench import notifybench

    found.update(notifybench.targets(report.get("notify")))
    httpx = report.get("startup", {}).get("httpx_imported")
    if httpx:
        found["httpx not imported without a Cloudflare provider"] = {
            "value": httpx,
            "met": not httpx["database provider only"] and httpx["with a cloudflare-do provider"],
        }
    checks = report.get("startup", {}).get("checks")
    if checks:
        found["tslock's system checks add under 1 ms to a command's start (database provider)"] = target(
            checks["database provider only"]["median_ms"], 1.0, "<="
        )
    if "redis_imported" in report.get("startup", {}):
        imported = report["startup"]["redis_imported"]
        found["redis-py not imported without a Redis provider"] = {"value": imported, "met": not imported}
    monitored = report.get("startup", {}).get("monitors")
    if monitored:
        found["monitors and alerts configured: a locked command's start-up <= 1.05x without"] = target(
            monitored["with_over_without"], 1.05, "<="
        )
    return found


def journal_targets(journal: dict[str, Any] | None) -> dict[str, Any]:
    """Issue 20's targets: the journal's start-up cost and its reads at 1M runs."""
    found: dict[str, Any] = {}
    for server, cell in ((journal or {}).get("startup") or {}).items():
        found[f"journal: locked command with the journal <= 1.05x without ({server})"] = target(
            cell["on_over_off"], 1.05, "<="
        )
    scale = (journal or {}).get("scale") or {}
    for label, ratio in scale.get("large_over_small", {}).items():
        found[f"journal: {label} at 1M runs <= 3x at 1k"] = target(ratio, 3, "<=")
    for label, cell in scale.get("sizes", {}).get("1M runs of 10,000 names", {}).items():
        if "peak_mib" in cell:
            found[f"journal: {label} peak Python memory at 1M runs <= 20 MiB"] = target(
                cell["peak_mib"], 20, "<="
            )
    return found


def scale_targets(pg: dict[str, Any] | None) -> dict[str, Any]:
    """Listing at scale on PostgreSQL: the largest size against the smallest."""
    if not pg:
        return {}
    sizes = sorted(pg["results"], key=int)
    small, large = pg["results"][sizes[0]], pg["results"][sizes[-1]]
    found: dict[str, Any] = {}
    for page in ("first page", "search", "next page"):
        ratio = large["admin"][page]["median_ms"] / small["admin"][page]["median_ms"]
        found[f"scale: admin {page} at {int(sizes[-1]):,} rows <= 3x its time at {int(sizes[0]):,}"] = target(
            ratio, 3, "<="
        )
    peak = max(p["peak_kib"] for p in large["admin"].values()) / 1024
    found[f"scale: peak Python memory per admin request at {int(sizes[-1]):,} rows <= 20 MiB"] = target(
        peak, 20, "<="
    )
    for label in ("tslock list", "tslock list --all"):
        ratio = large["cli"][label]["peak_rss_kib"] / small["cli"][label]["peak_rss_kib"]
        found[f"scale: {label} peak RSS at {int(sizes[-1]):,} rows <= 1.5x at {int(sizes[0]):,}"] = target(
            ratio, 1.5, "<="
        )
    return found


def render(report: dict[str, Any]) -> str:
    """The report as plain-text tables (also pasted into docs)."""
    m = report["machine"]
    lines = [f"machine: {m['cpu']}, {m['cores']} cores, Python {m['python']}, Django {m['django']}"]
    if report.get("db"):
        lines += ["", "lock+unlock cycles/s (median, p10-p90; ratio = tslock median / contender median)"]
        lines.append(f"{'server':<10} {'contender':<25} {'median':>8} {'p10-p90':>15} {'tslock/x':>9}")
        for server, data in report["db"].items():
            for name, r in data["results"].items():
                ratio = data["tslock_over"].get(name)
                lines.append(
                    f"{server:<10} {name:<25} {r['median']:>8.0f} {r['p10']:>7.0f}-{r['p90']:<7.0f} "
                    f"{'' if ratio is None else f'{ratio:.2f}x':>9}"
                )
            prepared = [data["results"].get(f"{who}, psycopg prepared") for who in ("tslock", "raw-sql")]
            if all(prepared):
                lines.append(
                    f"{server:<10} psycopg prepared (opt-in): tslock / raw-sql = "
                    f"{prepared[0]['median'] / prepared[1]['median']:.2f}x"
                )
    from bench import contention

    lines += contention.render(report.get("contention"))
    do = report.get("do")
    if do:
        lines += ["", "Durable Objects on local workerd: ms per operation (median, p10-p90)"]
        for name, r in do["ms_per_operation"].items():
            lines.append(f"  {name:<12} {r['median']:.2f} ms  ({r['p90']:.2f}-{r['p10']:.2f})")
        lines.append(f"  tslock time / raw time: {do['tslock_time_over_raw']:.2f}x")
        lines.append(f"  HTTP requests per operation: {do['requests_per_operation']}")
        from bench import dobench

        lines += dobench.render(do)
    kv = report.get("kv")
    if kv:
        lines += ["", "Workers KV requests per operation (counted by the fake)"]
        for label, counts in kv["requests"].items():
            lines.append(f"  {label:<32} {sum(counts.values()):>5}  {counts}")
    admin = report.get("admin")
    if admin:
        lines += ["", "admin Locks page, server time (median, p10-p90)"]
        for label, r in admin["results"].items():
            lines.append(f"  {label:<30} {r['median_ms']:>7.1f} ms  ({r['p10_ms']:.1f}-{r['p90_ms']:.1f})")
    for server, data in report.get("scale", {}).items():
        lines += [
            "",
            f"listing at scale on {server}: admin ms (median) / peak KiB; tslock list s / peak RSS MiB",
        ]
        for size, r in data["results"].items():
            lines.append(f"  {int(size):>9,} rows (filled in {r['fill_s']} s)")
            for label, a in r["admin"].items():
                lines.append(f"    {label:<34} {a['median_ms']:>8.1f} ms  {a['peak_kib']:>7} KiB")
            for label, c in r["cli"].items():
                lines.append(
                    f"    {label:<34} {c['seconds']:>8.2f} s   {c['peak_rss_kib'] / 1024:>7.1f} MiB  "
                    f"({c['lines']:,} lines)"
                )
    from bench import redisbench

    lines += redisbench.render(report.get("redis"))
    from bench import asyncbench

    lines += asyncbench.render(report.get("async"))
    start = report.get("startup")
    if start:
        imp, cmd = start["import_tslock_django"], start["command"]
        lines += [
            "",
            f"import tslock_django: {imp['median_us'] / 1000:.1f} ms cumulative (python -X importtime), "
            f"median of {imp['runs']}",
            f"command start-up: plain {cmd['bench_plain']['median_ms']:.0f} ms, decorated "
            f"{cmd['bench_locked']['median_ms']:.0f} ms (+{cmd['decorated_minus_plain_ms']:.0f} ms, "
            f"{cmd['decorated_over_plain']:.2f}x)",
            f"httpx imported: {start['httpx_imported']}",
        ]
        if "checks" in start:
            lines.append(
                "tslock's system checks at a command's start: "
                + ", ".join(f"{k} {v['median_ms']:.2f} ms" for k, v in start["checks"].items())
            )
        if "redis_imported" in start:
            lines.append(f"redis-py imported with the database provider only: {start['redis_imported']}")
        if "monitors" in start:
            mon = start["monitors"]
            lines.append(
                f"scheduled locked command with monitors and alerts {mon['with']['median_ms']:.0f} ms, "
                f"without {mon['without']['median_ms']:.0f} ms ({mon['with_over_without']:.3f}x; "
                f"{mon['requests_received']} requests received)"
            )
    from bench import jobbench

    lines += jobbench.render(report.get("jobs"))
    from bench import metricsbench

    lines += metricsbench.render(report.get("metrics"))
    from bench import notifybench

    lines += notifybench.render(report.get("notify"))
    if report["targets"]:
        lines += ["", "targets"]
        for label, t in report["targets"].items():
            lines.append(f"  [{'met' if t['met'] else 'NOT MET'}] {label}: {t['value']}")
    if report["missing"]:
        lines += ["", "not run: " + "; ".join(report["missing"])]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
