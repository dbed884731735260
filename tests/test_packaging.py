"""What the package says about itself: the license text, the versions it claims, where it
points to. (The built wheel installed into a fresh project: `make check-install`.)"""

from __future__ import annotations

import ast
import hashlib
import re
from pathlib import Path
from typing import Any

from tools import matrix
from tools.check_install import REQUIRED_IN_WHEEL

ROOT = Path(__file__).resolve().parent.parent
#: SHA-256 of the Apache License 2.0 as the Apache Software Foundation publishes it
#: (the text Debian keeps in /usr/share/common-licenses/Apache-2.0).
APACHE_2_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"


def meta() -> dict[str, Any]:
    project = matrix.project()["project"]
    assert isinstance(project, dict)
    return project


def test_the_license_file_is_the_apache_2_text_the_metadata_names() -> None:
    assert hashlib.sha256((ROOT / "LICENSE").read_bytes()).hexdigest() == APACHE_2_SHA256
    assert meta()["license"] == "Apache-2.0"
    assert meta()["license-files"] == ["LICENSE"]
    sdist = matrix.project()["tool"]["hatch"]["build"]["targets"]["sdist"]  # type: ignore[index]
    assert "LICENSE" in sdist["include"]


def test_the_classifiers_name_exactly_what_the_matrix_runs() -> None:
    classifiers = meta()["classifiers"]
    djangos = {c.rsplit(" :: ", 1)[1] for c in classifiers if c.startswith("Framework :: Django :: ")}
    pythons = {
        c.rsplit(" :: ", 1)[1]
        for c in classifiers
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    }
    assert djangos == set(matrix.DJANGO_SERIES)
    assert pythons == set(matrix.PYTHONS)
    assert meta()["requires-python"] == f">={matrix.PYTHONS[0]}"
    assert f"Django>={matrix.DJANGO_SERIES[0]}" in meta()["dependencies"]


def test_the_author_and_urls_hold_no_placeholder() -> None:
    assert meta()["authors"] == [{"name": "tslock-django developers"}]
    for label, url in meta()["urls"].items():
        assert url.startswith("https://"), label
        assert not re.search(r"example|todo|xxx|<|your-", url, re.IGNORECASE), url


def test_each_extra_names_a_dependency_with_the_same_floor() -> None:
    dependencies = set(meta()["dependencies"])
    extras = meta()["optional-dependencies"]
    assert extras["cloudflare"] == ["httpx>=0.25"]
    assert extras["environ"] == ["django-environ>=0.11"]
    # Installed by default as well (for now): the extras must not ask for another version.
    assert {*extras["cloudflare"], *extras["environ"]} <= dependencies


def test_the_package_reaches_http_only_through_httpx() -> None:
    # Issue 33: httpcore (and the h11, sniffio and anyio under it) are httpx's own
    # business, and not dependencies of ours: importing them means driving httpx's
    # internals (a transport of our own, a network backend swapped in).
    internals = {"h11", "httpcore", "sniffio", "anyio"}
    found = set()
    for path in (ROOT / "tslock_django").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            found |= {f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] in internals}
    assert not found


def test_the_files_the_wheel_must_carry_exist_and_node_modules_stay_out() -> None:
    for name in REQUIRED_IN_WHEEL:
        assert (ROOT / name).is_file(), name
    wheel = matrix.project()["tool"]["hatch"]["build"]["targets"]["wheel"]  # type: ignore[index]
    assert "tslock_django/worker/node_modules" in wheel["exclude"]


def test_the_floor_run_pins_the_lowest_versions_pyproject_allows() -> None:
    assert matrix.floors(matrix.project()) == {
        "django": "4.2",
        "httpx": "0.25",
        "django-environ": "0.11",
        "cronsim": "2.6",
    }


def test_the_matrix_installs_the_test_group_without_lint_and_type_tools() -> None:
    requirements = matrix.suite_requirements(matrix.project())
    names = {matrix.requirement_name(r) for r in requirements}
    assert "pytest" in names and "pytest-django" in names
    assert not names & matrix.NOT_FOR_THE_SUITE


def test_the_summary_names_the_store_of_every_built_in_provider() -> None:
    # What `pip show` and package indexes print: a store left out there is one a reader
    # never learns this package supports.
    from tslock_django import conf

    stores = {
        conf.DATABASE_BACKEND: "Django database",
        conf.REDIS_BACKEND: "Redis",
        conf.DURABLE_OBJECT_BACKEND: "Cloudflare Durable Objects",
        conf.KV_BACKEND: "Workers KV",
    }
    built_in = {value for name, value in vars(conf).items() if name.endswith("_BACKEND")}
    # The in-process store is for tests; the invalid-URL marker is no store at all.
    assert built_in - {conf.MEMORY_BACKEND, conf.INVALID_URL_BACKEND} == set(stores)
    missing = [store for store in stores.values() if store not in meta()["description"]]
    assert missing == []
