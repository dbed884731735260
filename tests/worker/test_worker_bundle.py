"""``write_worker_bundle``: what ``manage.py tslock worker --output DIR`` writes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tslock_django.worker.export import WORKER_DIR, WRANGLER_VERSION, parse_jsonc, write_worker_bundle


def test_the_bundle_holds_the_shipped_worker_and_a_valid_config(tmp_path: Path) -> None:
    paths = write_worker_bundle(tmp_path / "out", worker_name="acme-locks")
    assert [p.name for p in paths] == ["index.js", "wrangler.jsonc", "package.json", "DEPLOY.md"]
    assert (tmp_path / "out" / "index.js").read_bytes() == (WORKER_DIR / "index.js").read_bytes()
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
    source = (WORKER_DIR / "index.js").read_text()
    assert "export class LockObject" in source
    assert "export class LockIndex" in source


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
