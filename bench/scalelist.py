"""``manage.py tslock list [ARGS]`` as an operator runs it, with its output written to
/dev/null, then one JSON line: the process's peak resident memory and the lines printed.

Run by ``bench.scalebench`` in a fresh process per measurement (``BENCH_DB_NAME`` names
the filled database), so the peak belongs to this listing alone.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time


class CountingSink:
    """A text stream that keeps nothing: counts lines and bytes, like a pipe to wc."""

    def __init__(self) -> None:
        self.lines = 0
        self.bytes = 0

    def write(self, text: str) -> int:
        self.lines += text.count("\n")
        self.bytes += len(text)
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


def main(args: list[str]) -> dict[str, object]:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    import django

    django.setup()
    from django.core.management import call_command

    sink = CountingSink()
    started = time.perf_counter()
    call_command("tslock", "list", *args, stdout=sink)
    seconds = time.perf_counter() - started
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"seconds": round(seconds, 2), "peak_rss_kib": peak_kib, "lines": sink.lines, "bytes": sink.bytes}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])))
