"""``write_worker_bundle``: what ``manage.py tslock worker --output DIR`` writes."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tools.check_install import REQUIRED_IN_WHEEL
from tslock_django.worker.export import (
    WORKER_DIR,
    WRANGLER_VERSION,
    parse_jsonc,
    worker_modules,
    write_worker_bundle,
)

MODULES = worker_modules()


def test_the_bundle_holds_the_shipped_worker_and_a_valid_config(tmp_path: Path) -> None:
    paths = write_worker_bundle(tmp_path / "out", worker_name="acme-locks")
    assert [p.name for p in paths] == [*MODULES, "wrangler.jsonc", "package.json", "DEPLOY.md"]
    assert MODULES[0] == "index.js" and len(MODULES) > 1
    for name in MODULES:
        assert (tmp_path / "out" / name).read_bytes() == (WORKER_DIR / name).read_bytes(), name
    config = parse_jsonc((tmp_path / "out" / "wrangler.jsonc").read_text())
    assert config["name"] == "acme-locks"
    assert config["main"] == "index.js"
    bindings = {b["name"]: b["class_name"] for b in config["durable_objects"]["bindings"]}
    assert bindings == {"LOCKS": "LockObject", "LOCK_INDEX": "LockIndex"}
    assert config["migrations"] == [{"tag": "v1", "new_sqlite_classes": ["LockObject", "LockIndex"]}]
    assert "TSLOCK_TOKEN" not in json.dumps(config.get("vars", {}))
    deploy = (tmp_path / "out" / "DEPLOY.md").read_text()
    assert "npx wrangler secret put TSLOCK_TOKEN" in deploy
    assert "npx wrangler deploy" in deploy
    assert "cloudflare-do://" in deploy
    assert "acme-locks" in deploy
    assert deploy.index("    npm install\n") < deploy.index("    npx wrangler secret put"), (
        "the pinned wrangler is installed before its first use"
    )
    assert "deploy this folder's Worker first" in deploy, "the upgrade order is part of the notes"


def test_the_bundle_pins_wrangler_exactly(tmp_path: Path) -> None:
    write_worker_bundle(tmp_path, worker_name="acme-locks")
    package = json.loads((tmp_path / "package.json").read_text())
    assert package["devDependencies"] == {"wrangler": WRANGLER_VERSION}
    assert re.fullmatch(r"\d+\.\d+\.\d+", WRANGLER_VERSION), "an exact version, no range"
    assert package["private"] is True and package["name"] == "acme-locks"
    # The config's schema reference resolves once `npm install` put wrangler there.
    assert parse_jsonc((tmp_path / "wrangler.jsonc").read_text())["$schema"] == (
        "node_modules/wrangler/config-schema.json"
    )


def test_the_classes_the_config_names_are_exported_by_the_worker() -> None:
    entry = (WORKER_DIR / "index.js").read_text()
    assert 'export { LockObject } from "./lock_object.js";' in entry
    assert 'export { LockIndex } from "./index_shard.js";' in entry
    assert "export default {" in entry
    assert "export class LockObject " in (WORKER_DIR / "lock_object.js").read_text()
    assert "export class LockIndex " in (WORKER_DIR / "index_shard.js").read_text()


RELATIVE_IMPORT = re.compile(r'^(?:import|export)\b[^;]*?\bfrom "(\./[^"]+)";', re.MULTILINE)


def test_the_modules_are_exactly_what_the_entry_imports() -> None:
    # What the bundle, the wheel and the test copies ship is every .js file of the
    # folder: each must be reached from the entry, and every import must be shipped.
    reached, waiting = set(), ["index.js"]
    while waiting:
        name = waiting.pop()
        if name in reached:
            continue
        reached.add(name)
        for target in RELATIVE_IMPORT.findall((WORKER_DIR / name).read_text()):
            assert target[2:] in MODULES, f"{name} imports {target}, which is not shipped"
            waiting.append(target[2:])
    assert reached == set(MODULES)
    # Any other import is the runtime's own.
    for name in MODULES:
        for line in (WORKER_DIR / name).read_text().splitlines():
            if line.startswith("import "):
                assert '"./' in line or '"cloudflare:workers"' in line, f"{name}: {line}"


def test_the_wheel_check_names_every_module() -> None:
    assert {f"tslock_django/worker/{name}" for name in MODULES} <= set(REQUIRED_IN_WHEEL)


def test_the_local_runtime_and_the_deployment_use_one_compatibility_date() -> None:
    config = parse_jsonc((WORKER_DIR / "wrangler.jsonc").read_text())
    serve = (WORKER_DIR / "serve.mjs").read_text()
    assert f'COMPATIBILITY_DATE = "{config["compatibility_date"]}"' in serve
    # workerd from the pinned miniflare accepts dates up to its build date only.
    assert config["compatibility_date"] <= "2026-04-26"


def test_existing_files_are_not_overwritten_unless_asked(tmp_path: Path) -> None:
    (tmp_path / "wrangler.jsonc").write_text("// mine\n{}")
    with pytest.raises(FileExistsError) as refused:
        write_worker_bundle(tmp_path)
    assert str(refused.value) == (
        f"wrangler.jsonc already exists in {tmp_path}; choose an empty folder, or add --overwrite "
        "to replace the bundle's files (overwrite=True from Python)"
    )
    assert (tmp_path / "wrangler.jsonc").read_text() == "// mine\n{}"
    assert not (tmp_path / "index.js").exists(), "nothing is written when one file exists"
    write_worker_bundle(tmp_path, overwrite=True)
    assert parse_jsonc((tmp_path / "wrangler.jsonc").read_text())["name"] == "tslock"


@pytest.mark.parametrize("bad", ["", "Upper", "-dash", "dash-", "under_score", "x" * 64, "a b"])
def test_bad_worker_names_are_refused(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ValueError, match=r"not a valid Worker name \(--name, worker_name\)"):
        write_worker_bundle(tmp_path, worker_name=bad)
    assert list(tmp_path.iterdir()) == []


def test_the_npm_lockfile_pins_the_runtime() -> None:
    lock = json.loads((WORKER_DIR / "package-lock.json").read_text())
    package = json.loads((WORKER_DIR / "package.json").read_text())
    pinned = package["devDependencies"]["miniflare"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", pinned), "pin an exact miniflare version (Node 20 support)"
    assert lock["packages"]["node_modules/miniflare"]["version"] == pinned
    assert package["private"] is True


def test_the_bundle_sets_the_index_variables_and_tells_how_to_change_them(tmp_path: Path) -> None:
    write_worker_bundle(tmp_path / "out")
    config = parse_jsonc((tmp_path / "out" / "wrangler.jsonc").read_text())
    assert config["vars"] == {"TSLOCK_INDEX_SHARDS": "16", "TSLOCK_REPORT_DELAY_MS": "1000"}
    deploy = (tmp_path / "out" / "DEPLOY.md").read_text()
    needed_words = ("TSLOCK_INDEX_SHARDS_PREVIOUS", "/v1/reindex", "Choosing N", "Staleness", "`next`")
    for needed in (*needed_words, "TSLOCK_REPORT_DELAY_MS", "reconciles"):
        assert needed in deploy, needed


def test_an_unwritable_folder_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(NotADirectoryError) as caught:
        write_worker_bundle(tmp_path / "file" / "out")
    assert str(caught.value).startswith(f"cannot write the Worker bundle to {tmp_path / 'file' / 'out'}")


#: Where ``make test`` installs wrangler (``make wrangler``: tools/wrangler/package.json).
PINNED_WRANGLER = Path(__file__).resolve().parents[2] / "tools" / "wrangler"


def find_wrangler() -> str:
    """wrangler's executable: ``$TSLOCK_WRANGLER``, else the one ``make test`` installs, else
    ``wrangler`` on PATH. Required when CI is set."""
    pinned = PINNED_WRANGLER / "node_modules" / ".bin" / "wrangler"
    found = os.environ.get("TSLOCK_WRANGLER") or (
        str(pinned) if pinned.exists() else shutil.which("wrangler")
    )
    if not found:
        if os.environ.get("CI"):
            pytest.fail("wrangler is not installed: `make wrangler` installs it into tools/wrangler")
        pytest.skip(
            "wrangler is not installed: set TSLOCK_WRANGLER to its executable or put it on PATH "
            f"(`npm install wrangler@{WRANGLER_VERSION}` in a scratch folder puts it in "
            "node_modules/.bin)"
        )
    return found


def test_the_wrangler_make_test_installs_is_the_version_the_export_names() -> None:
    pinned = json.loads((PINNED_WRANGLER / "package.json").read_text())["devDependencies"]["wrangler"]
    assert pinned == WRANGLER_VERSION


def test_wrangler_bundles_the_exported_folder_as_it_is(tmp_path: Path) -> None:
    # What `npx wrangler deploy` does first, without an account: follow the imports
    # from `main`, bundle them, and read the bindings.
    wrangler = find_wrangler()
    write_worker_bundle(tmp_path / "bundle")
    home = tmp_path / "home"
    env = {
        **os.environ,
        # Nothing written under the real home; no telemetry.
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "WRANGLER_SEND_METRICS": "false",
        "CI": "true",
    }
    done = subprocess.run(
        [wrangler, "deploy", "--dry-run", "--outdir", str(tmp_path / "out")],
        cwd=tmp_path / "bundle",
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "env.LOCKS (LockObject)" in done.stdout and "env.LOCK_INDEX (LockIndex)" in done.stdout
    bundled = (tmp_path / "out" / "index.js").read_text()
    # The script wrangler uploads exports what wrangler.jsonc names...
    assert re.search(r"export \{\s*LockIndex,\s*LockObject,\s*\w+ as default\s*\}", bundled)
    # ...and holds something of every module.
    for needed in (
        "CREATE TABLE IF NOT EXISTS lock_state",  # lock_object.js
        "CREATE INDEX IF NOT EXISTS locks_by_lock_until",  # index_shard.js
        "function route(",  # router.js
        "function queryLayout(",  # listing.js
        "function reconcileRound(",  # repair.js
        "function layouts(",  # layout.js
        "function requireDurations(",  # validation.js
        "function readJson(",  # answers.js
        "function compareNames(",  # text.js
        "internal error in the tslock Worker",  # index.js
    ):
        assert needed in bundled, needed
