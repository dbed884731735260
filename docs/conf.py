"""Sphinx configuration of the tslock-django documentation (``make docs``).

The site is Markdown (MyST), like the README, with the reference generated from the code
where the code holds it: the Python API by autodoc from the docstrings, the ``tslock``
command's reference from its argparse parsers, and each provider's OPTIONS and defaults
from ``tslock_django.providers.store_options`` (both by ``_ext/tslock_docs.py``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent / "_ext")]

# autodoc imports the package and the generated reference builds the management
# command's parser: both need configured settings. The demo project's are read from the
# environment; these defaults keep the build away from any real database or store.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
os.environ.setdefault("DATABASE_URL", "sqlite://:memory:")
os.environ.setdefault("TSLOCK_URL", "db://default")

import django  # noqa: E402

django.setup()

from tslock_django import __version__  # noqa: E402

project = "tslock-django"
author = "tslock-django developers"
copyright = "tslock-django developers"
release = __version__
version = __version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "tslock_docs",
]

myst_enable_extensions = [
    "attrs_block",  # {.run-commands} before a fence marks it for tests/test_docs.py
    "colon_fence",
    "deflist",
]
myst_heading_anchors = 3

# Text is shown as written: "--state" must not become an en dash in the CLI reference.
smartquotes = False

exclude_patterns = ["_build", "README.md"]
templates_path: list[str] = []
html_static_path: list[str] = []

html_theme = "furo"
html_title = f"tslock-django {release}"

# The docstrings are Google style (Args:, Returns:, Raises:).
napoleon_google_docstring = True
napoleon_numpy_docstring = False
# The built-in providers' docstrings list their settings under "OPTIONS:".
napoleon_custom_sections = [("OPTIONS", "params_style")]
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_description_target = "documented_params"
autodoc_default_options = {"members": True, "show-inheritance": True}

# -n makes every unresolved cross-reference a warning, and -W a failure. Names outside
# this project (the standard library, Django, httpx) are not resolved without
# intersphinx inventories, which would be downloaded at build time; they are listed here
# instead, so a broken reference to one of *our* names still fails the build.
nitpick_ignore_regex = [
    (r"py:.*", r"(datetime|collections|typing|types|contextvars|enum|argparse|abc|threading)\..*"),
    (r"py:.*", r"(django|httpx|redis|environ|health_check|prometheus_client|opentelemetry)(\..*)?"),
    (r"py:class", r"(Any|Callable|Mapping|Iterator|Iterable|Sequence|TracebackType|ParamSpec|TypeVar)"),
    (r"py:class", r"(timedelta|datetime|tzinfo|Signal|ImproperlyConfigured|BaseCommand|ValueError)"),
    (r"py:class", r"(NoneType|Literal\[.*\]|ellipsis|function|os\.PathLike|pathlib\.Path)"),
]
