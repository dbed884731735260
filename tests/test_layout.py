"""The shape of the code: no module imports itself back at run time, and no room grows
past what one reader takes in.

The imports are read from the sources (``ast`` for Python, the ``import`` statements
of the Worker's ES modules), not from a running interpreter, so an import inside a
function counts like any other: a lazy import that closes a circle is still a circle.
Imports under ``if TYPE_CHECKING:`` are for the type checker only and do not count.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("tslock_django", "bench")
#: The most lines a source file of the package may hold.
MAX_LINES = 700
#: The ``tslock`` command's own file keeps only the entry.
MAX_COMMAND_LINES = 200


def sources(package: str, suffix: str) -> Iterator[Path]:
    for path in sorted((ROOT / package).rglob(f"*{suffix}")):
        if "node_modules" not in path.parts:
            yield path


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def runtime_imports(tree: ast.AST, module: str, is_package: bool, modules: set[str]) -> Iterator[str]:
    """Every module of ``modules`` named by an import that runs (at import time or in a
    function). ``from package import submodule`` depends on the submodule, not on the
    package's ``__init__`` (which Python has begun to run before any of its modules)."""
    package = module if is_package else module.rpartition(".")[0]

    def visit(node: ast.AST) -> Iterator[str]:
        if isinstance(node, ast.If) and is_type_checking(node.test):
            for child in node.orelse:
                yield from visit(child)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                yield submodule if submodule in modules else base
        for child in ast.iter_child_nodes(node):
            yield from visit(child)

    yield from visit(tree)


def python_graph() -> dict[str, set[str]]:
    paths = {module_name(p): p for package in PACKAGES for p in sources(package, ".py")}
    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        named = runtime_imports(tree, module, path.name == "__init__.py", set(paths))
        graph[module] = {name for name in named if name in paths and name != module}
    return graph


_JS_IMPORT = re.compile(r"""^\s*(?:import|export)\s[^;]*?from\s+["'](\.{1,2}/[^"']+)["']""", re.M)


def worker_graph() -> dict[str, set[str]]:
    files = {p.relative_to(ROOT).as_posix(): p for p in sources("tslock_django/worker", ".js")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        targets = set()
        for relative in _JS_IMPORT.findall(path.read_text(encoding="utf-8")):
            target = (path.parent / relative).resolve().relative_to(ROOT).as_posix()
            targets.add(target)
        graph[name] = targets & set(files)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph.get(node, ()):
            if other not in index:
                connect(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def test_the_circle_finder_finds_a_circle_through_a_lazy_import() -> None:
    tree = ast.parse("def later():\n    from .b import thing\n")
    graph = {"p.a": set(runtime_imports(tree, "p.a", False, {"p.a", "p.b"})), "p.b": {"p.a"}}
    assert circles(graph) == [["p.a", "p.b"]]
    typing_only = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import thing\n")
    assert "p.b" not in set(runtime_imports(typing_only, "p.a", False, {"p.a", "p.b"}))


def test_no_python_module_imports_itself_back_at_run_time() -> None:
    assert circles(python_graph()) == []


def test_no_worker_module_imports_itself_back() -> None:
    graph = worker_graph()
    assert graph, "the Worker's modules were found"
    assert circles(graph) == []


@pytest.mark.parametrize("suffix", [".py", ".js"])
def test_no_source_file_of_the_package_is_over_the_limit(suffix: str) -> None:
    sizes = {
        path.relative_to(ROOT).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
        for path in sources("tslock_django", suffix)
        if "migrations" not in path.parts
    }
    assert sizes, f"the package has {suffix} sources"
    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}


def test_the_tslock_command_keeps_only_its_entry() -> None:
    command = ROOT / "tslock_django/management/commands/tslock.py"
    assert len(command.read_text(encoding="utf-8").splitlines()) < MAX_COMMAND_LINES


# -- what ships is what users use ---------------------------------------------------------

#: The package users' own tests import (the provider contract suites), and nothing else.
TESTING = "tslock_django.testing"
#: This repository's code that is not shipped: its tests, benchmarks, tools and demo.
UNSHIPPED = ("tests", "bench", "tools", "testproject")


def imported_names(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """Every module a Python file names in an import, relative ones made absolute, typing-only
    ones included (``from a.b import c`` names ``a.b`` and ``a.b.c``)."""
    package = module if is_package else module.rpartition(".")[0]
    named: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            named.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            named.add(base)
            named.update(f"{base}.{alias.name}" for alias in node.names)
    return named


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return imported_names(tree, module_name(path), path.name == "__init__.py")


def is_within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_the_import_reader_resolves_relative_and_typing_only_imports() -> None:
    source = "from ..worker import runtime\nif TYPE_CHECKING:\n    from .testing import kit\n"
    named = imported_names(ast.parse(source), "p.cli.run", False)
    assert {"p.worker.runtime", "p.cli.testing.kit"} <= named
    assert "p.contract" in imported_names(ast.parse("from .contract import Case\n"), "p", True)


def test_the_shipped_test_support_holds_only_what_users_tests_import() -> None:
    """Each module of ``tslock_django.testing`` is part of what the package exports (its
    ``__init__`` imports it, directly or through another of its modules), and none reaches
    into this repository's own tests, benchmarks or tools. A fake or runner that only this
    repository uses lives under ``tests/``; one the package needs at run time, beside the
    code it serves."""
    folder = ROOT / "tslock_django/testing"
    modules = {module_name(path): path for path in sources("tslock_django/testing", ".py")}
    assert TESTING in modules, "the package is found"
    exported, todo = set(), [TESTING]
    while todo:
        module = todo.pop()
        if module not in exported:
            exported.add(module)
            todo.extend(name for name in imported_modules(modules[module]) if name in modules)
    assert sorted(set(modules) - exported) == [], f"modules of {folder} that the package does not export"
    reaching = {
        module: sorted(n for n in imported_modules(path) if any(is_within(n, top) for top in UNSHIPPED))
        for module, path in modules.items()
    }
    assert {module: names for module, names in reaching.items() if names} == {}


def test_nothing_but_tests_imports_the_shipped_test_support() -> None:
    """``tslock_django.testing`` needs pytest: no module of the package outside it, and no
    benchmark, tool or demo, may import it (the local Worker runner, run by ``tslock runtime``,
    lives in ``tslock_django/worker/``)."""
    importers: dict[str, list[str]] = {}
    for top in ("tslock_django", "bench", "tools", "testproject"):
        for path in sources(top, ".py"):
            module = module_name(path)
            if is_within(module, TESTING):
                continue
            named = sorted(n for n in imported_modules(path) if is_within(n, TESTING))
            if named:
                importers[module] = named
    assert importers == {}


#: Underscore names of other packages that the package uses, each public in its own way.
FOREIGN_UNDERSCORE_ALLOWED = {
    # The documented way for a forked child to leave without running the parent's exit code.
    ("tslock_django/launcher.py", "_exit"),
    # A named tuple's documented method (urllib.parse's SplitResult).
    ("tslock_django/conf.py", "_replace"),
    # Django's RedisCache offers its redis-py client only through this attribute; the
    # provider builds a pool of its own like the cache's from it (django-redis: public).
    ("tslock_django/providers/redis/provider.py", "_cache"),
}


def own_underscore_names() -> set[str]:
    """Every ``_name`` the package defines: functions, classes, attributes it assigns
    (``self._x = ...``, class bodies) and names it binds."""
    names: set[str] = set()
    for path in sources("tslock_django", ".py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, ast.alias):
                names.add(node.asname or node.name.rpartition(".")[2])
    return {name for name in names if name.startswith("_")}


def test_the_package_touches_no_other_packages_underscore_attributes() -> None:
    """Public APIs only: ``x._name`` is read or written only where ``_name`` is one of the
    package's own (on ``self``, ``cls`` or another object of ours), or in the short list
    above with its reason. A private attribute of httpx, redis-py, Django or asyncio
    changes without notice."""
    own = own_underscore_names()
    foreign = []
    for path in sources("tslock_django", ".py"):
        relative = path.relative_to(ROOT).as_posix()
        if "/migrations/" in relative:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Attribute) or not node.attr.startswith("_"):
                continue
            if node.attr.startswith("__") and node.attr.endswith("__"):
                continue
            if node.attr in own or (relative, node.attr) in FOREIGN_UNDERSCORE_ALLOWED:
                continue
            foreign.append(f"{relative}:{node.lineno}: {ast.unparse(node)}")
    assert foreign == []


def test_h11_and_sniffio_are_not_dependencies_of_ours() -> None:
    """httpx brings what its transports need; the package names neither (they were the
    home-made HTTP transport's)."""
    from tools.matrix import project as read_pyproject  # a TOML reader on Python 3.10 too

    project = read_pyproject()["project"]
    extras = project["optional-dependencies"].values()
    named = [*project["dependencies"], *(d for extra in extras for d in extra)]
    assert [d for d in named if re.match(r"(h11|sniffio)\b", d)] == []
