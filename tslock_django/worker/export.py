"""Write the companion Worker to a folder the user deploys with wrangler.

``python manage.py tslock worker --output DIR`` calls :func:`write_worker_bundle`.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

WORKER_DIR = Path(__file__).resolve().parent

#: The Worker's entry module: wrangler.jsonc's ``main``, exporting the fetch handler and
#: the Durable Object classes; the other modules are the ones it imports.
ENTRY_MODULE = "index.js"

# Cloudflare's rule for Worker names: lowercase letters, digits and dashes, at most 63,
# not starting or ending with a dash (the name becomes a DNS label on workers.dev).
_WORKER_NAME = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_NAME_LINE = '  "name": "tslock",\n'

#: The wrangler the bundle's package.json pins exactly, so `npx wrangler` in that folder
#: never takes whatever is newest. 4.86.0 is the newest that runs on Node.js 20 (>= 20.3;
#: later releases need Node 22) and bundles the same Miniflare (4.20260426.0) the tests
#: and LocalWorker run the Worker on.
WRANGLER_VERSION = "4.86.0"

DEPLOY_NOTES = """\
# Deploying the tslock Worker

This folder holds the companion Worker of tslock-django: one Durable Object per lock
name (SQLite-backed) and N index objects (shards) for listing. The Worker is the `.js`
files, plain ES modules: `index.js` is its entry (`main` in wrangler.jsonc), and wrangler
bundles the modules it imports when it deploys. You need a Cloudflare account and
Node.js 20.3 or newer; nothing here needs a build step.

0. Install the wrangler version this folder pins (package.json; about 200 MB in
   node_modules), so every `npx wrangler` below runs that version:

       npm install

1. Choose a long random secret and store it as the Worker's secret (it is never in a file):

       npx wrangler secret put TSLOCK_TOKEN

   (`python -c "import secrets; print(secrets.token_urlsafe(32))"` makes a good one.)
   If wrangler asks to create the Worker `{worker_name}` first, say yes.

2. Deploy:

       npx wrangler deploy

   wrangler prints the Worker's URL, e.g. `https://{worker_name}.<your-subdomain>.workers.dev`.

3. Check it answers (no secret needed for this route):

       curl https://{worker_name}.<your-subdomain>.workers.dev/v1/health

4. Point Django at it, e.g. in the environment:

       TSLOCK_URL=cloudflare-do://<the secret>@{worker_name}.<your-subdomain>.workers.dev/

   or in settings:

       TSLOCK_PROVIDERS = {{
           "default": {{
               "BACKEND": "tslock_django.providers.cloudflare_do.DurableObjectLockProvider",
               "OPTIONS": {{"url": "https://{worker_name}.<your-subdomain>.workers.dev",
                           "token": env("TSLOCK_DO_TOKEN")}},
           }},
       }}

Keep `migrations` in wrangler.jsonc as it is: Durable Object classes are created by
migration tag `v1`, and renaming a class or tag later needs a new migration.
Upgrading tslock-django: deploy this folder's Worker first, then upgrade the apps. The
index object upgrades its table in place when it starts (no data is lost, locks stay
held), and the new Worker still answers the listing requests of the previous release.
An app upgraded before its Worker gets an error asking to redeploy when it lists locks;
taking and releasing locks work either way. Coming from a release whose wrangler.jsonc
has no TSLOCK_INDEX_SHARDS (one index object), deploy the first time with
"TSLOCK_INDEX_SHARDS_PREVIOUS": "1" added and follow "Changing N" below from step 2.

## The index and its shard count N

Each lock object answers its caller first and then reports the change to one index
object, chosen by a hash of the lock name (SHA-256, mod N); a listing asks all N and
merges their pages. N is `TSLOCK_INDEX_SHARDS` in `wrangler.jsonc` ("16" as written).

The report delay: a lock object reports `TSLOCK_REPORT_DELAY_MS` after a change ("1000"
as written), from its alarm, and sends only the state it has then. A lock taken and
released within the delay costs the index nothing; a longer one costs two reports
(taken, ended), as many as with no delay. A force release reports at once. "0" reports
every change at once (what a Worker without the variable does).

Choosing N: one Durable Object handles on the order of a thousand small requests a
second, and every lock that outlives the report delay sends its shard two reports
(taken and ended; an extend sends one more). Take your peak lock operations per second,
divide by 500 and round up to a power of two: 16 covers about 8,000 operations a second.
More shards cost every listing page one call per shard (each reading at most one row
more than the page holds), so do not raise N far beyond that; 1 is fine for a small
deployment.

Staleness: a listing never shows a lock past its lock_until (the index filters by time
when it reads). A change shows once its report lands: the report delay plus
milliseconds after the caller's answer. If a report is lost (an index object
restarting, a network failure), the lock object's alarm re-sends it after 1 s, then
after 2, 4, 8 and 16 s and every 30 s while the index stays unreachable; until then a
listing can show the previous state of that lock: a new lock missing, a released lock
still listed, an extended lock with its old lock_until. As a last resort each index
object reconciles: every 15 minutes it asks the lock objects of up to 50 entries that no
report has confirmed for an hour to send their records again, and drops entries whose
lock object holds no lock at all.

Changing N on a deployed Worker (also the way to upgrade from a release before shards,
whose index is the 1-shard layout: use "1" as the old value):

1. Set the new count and keep the old one as previous, then deploy:

       "vars": {{ "TSLOCK_INDEX_SHARDS": "32", "TSLOCK_INDEX_SHARDS_PREVIOUS": "16" }}

   Lock objects now report to both layouts; listings still read the old, complete one.

2. Rebuild the new layout: each call re-sends a batch of lock objects' current records
   (the names either layout lists). From the Django project:

       python manage.py tslock reindex --provider ALIAS [--batch-size 25]

   or by hand, repeating with `after` set to the answer's `next` until `next` is null.
   Safe to repeat or restart.

       curl -X POST https://{worker_name}.<your-subdomain>.workers.dev/v1/reindex \
            -H "Authorization: Bearer $TSLOCK_DO_TOKEN" -d '{{"after": null, "limit": 25}}'

   (Each batch makes one call per shard of both layouts plus one per name: keep
   `limit` small on plans with a low subrequest limit.)

3. Remove `TSLOCK_INDEX_SHARDS_PREVIOUS` and deploy again. Listings now read the new
   layout. The old index objects are no longer used; if you ever return to that N,
   follow the same steps (the rebuild also repairs entries the old layout missed).

Skipping step 2 loses the listing of every lock that does not change until it ends;
taking and releasing locks are never affected by any of this.

Rotating the secret: run step 1 again; clients with the old secret get HTTP 401.
Logs: the Worker logs only failures (for example an index update that did not go
through); watch them with `npx wrangler tail`.
"""


def worker_modules() -> list[str]:
    """The file names of the Worker's ES modules: :data:`ENTRY_MODULE` first, then the
    modules beside it (every ``.js`` file of the package's worker folder) by name."""
    others = sorted(p.name for p in WORKER_DIR.glob("*.js") if p.name != ENTRY_MODULE)
    return [ENTRY_MODULE, *others]


def copy_worker_modules(folder: str | Path) -> list[Path]:
    """Copy the Worker's ES modules into ``folder`` (created if missing) and return their
    paths, the entry first.

    A test or benchmark wrapper placed beside them imports ``./index.js`` and runs the
    shipped Worker with its own changes on top."""
    target = Path(folder)
    target.mkdir(parents=True, exist_ok=True)
    copied = [target / name for name in worker_modules()]
    for path in copied:
        shutil.copyfile(WORKER_DIR / path.name, path)
    return copied


def write_worker_bundle(
    output_dir: str | Path, *, worker_name: str = "tslock", overwrite: bool = False
) -> list[Path]:
    """Write the Worker's ES modules (``index.js`` first, then the modules it imports),
    ``wrangler.jsonc``, ``package.json`` (pinning wrangler) and ``DEPLOY.md`` into
    ``output_dir``.

    Args:
        output_dir: the folder to write to; created if missing.
        worker_name: the Worker's name in ``wrangler.jsonc`` (lowercase letters, digits
            and dashes, at most 63 characters).
        overwrite: replace files that already exist; by default an existing file is an
            error and nothing is written.

    Returns:
        The paths written, in that order.

    Raises:
        ValueError: a bad ``worker_name``.
        FileExistsError: one of the files exists and ``overwrite`` is false.
        OSError: the folder cannot be created or written (the message says which).
    """
    if not isinstance(worker_name, str) or not _WORKER_NAME.fullmatch(worker_name):
        raise ValueError(
            f"{worker_name!r} is not a valid Worker name (--name, worker_name): use lowercase letters, "
            'digits and dashes (at most 63, not starting or ending with a dash), e.g. "tslock"'
        )
    target = Path(output_dir)
    contents = {
        **{name: (WORKER_DIR / name).read_text(encoding="utf-8") for name in worker_modules()},
        "wrangler.jsonc": _wrangler_config(worker_name),
        "package.json": _package_json(worker_name),
        "DEPLOY.md": DEPLOY_NOTES.format(worker_name=worker_name),
    }
    paths = [target / filename for filename in contents]
    existing = [p for p in paths if p.exists()]
    if existing and not overwrite:
        names = ", ".join(p.name for p in existing)
        verb = "exists" if len(existing) == 1 else "exist"
        raise FileExistsError(
            f"{names} already {verb} in {target}; choose an empty folder, or add --overwrite to "
            "replace the bundle's files (overwrite=True from Python)"
        )
    try:
        target.mkdir(parents=True, exist_ok=True)
        for path in paths:
            path.write_text(contents[path.name], encoding="utf-8")
    except OSError as err:
        # The same exception type (callers catch PermissionError and friends), with a
        # message that says what was being written instead of a bare errno line.
        raise type(err)(
            f"cannot write the Worker bundle to {err.filename or target}: {err.strerror or err}"
        ) from err
    return paths


def _package_json(worker_name: str) -> str:
    package = {
        "name": worker_name,
        "private": True,
        "description": "The tslock-django companion Worker; see DEPLOY.md.",
        "engines": {"node": ">=20.3"},
        "devDependencies": {"wrangler": WRANGLER_VERSION},
    }
    return json.dumps(package, indent=2) + "\n"


def _wrangler_config(worker_name: str) -> str:
    template = (WORKER_DIR / "wrangler.jsonc").read_text(encoding="utf-8")
    if _NAME_LINE not in template:  # pragma: no cover - guards edits of the template
        raise RuntimeError("wrangler.jsonc template lost its name line")
    return template.replace(_NAME_LINE, f'  "name": {json.dumps(worker_name)},\n', 1)


def parse_jsonc(text: str) -> Any:
    """JSON with // and /* */ comments and trailing commas, as wrangler reads it."""
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char == '"':
            end = i + 1
            while text[end] != '"':
                end += 2 if text[end] == "\\" else 1
            out.append(text[i : end + 1])
            i = end + 1
        elif text.startswith("//", i):
            i = text.find("\n", i) if "\n" in text[i:] else len(text)
        elif text.startswith("/*", i):
            i = text.index("*/", i) + 2
        else:
            out.append(char)
            i += 1
    return json.loads(re.sub(r",(\s*[}\]])", r"\1", "".join(out)))


def shipped_variables() -> dict[str, str]:
    """The Worker variables (``vars``) of the shipped ``wrangler.jsonc``: what a deployment
    made from the exported bundle runs with (the benchmarks run the Worker with them)."""
    config = parse_jsonc((WORKER_DIR / "wrangler.jsonc").read_text(encoding="utf-8"))
    return dict(config.get("vars", {}))
