"""Sphinx directives that generate reference pages from tslock's own code, so the pages
cannot drift from it:

``tslock-cli``
    the ``tslock`` management command, one section per subcommand, read from the argparse
    parser Django builds for it (``BaseCommand.create_parser``).
``tslock-command-options``
    the options ``@locked_command`` adds to a command, read from the parser of the demo
    project's locked command.
``tslock-options BACKEND``
    a table of the OPTIONS of a built-in provider with their defaults, from
    ``tslock_django.providers.store_options``. The directive's content gives one line of meaning
    per option (``key: text``); an option the code has and the page does not describe, or
    the other way round, is a warning, which ``make docs`` (``-W``) turns into a failure.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.application import Sphinx
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

logger = logging.getLogger(__name__)

__version__ = "1"


def _depend_on_the_package(directive: SphinxDirective) -> None:
    """Rebuild the page whenever a module of the package changes: what these directives
    generate comes from the code, which Sphinx's incremental build does not otherwise
    connect to the page (a new subcommand would stay missing from a page built before)."""
    import tslock_django

    package = Path(tslock_django.__file__).resolve().parent
    for path in [*sorted(package.rglob("*.py")), Path(__file__).resolve()]:
        directive.env.note_dependency(str(path))


def _table(directive: SphinxDirective, header: list[str], rows: list[list[nodes.Node]]) -> nodes.table:
    """A docutils table whose cells are the given nodes (a header row, then ``rows``)."""
    table = nodes.table(classes=["tslock-generated"])
    group = nodes.tgroup(cols=len(header))
    table += group
    for _ in header:
        group += nodes.colspec(colwidth=1)
    head = nodes.thead()
    group += head
    row = nodes.row()
    for text in header:
        row += nodes.entry("", nodes.paragraph(text=text))
    head += row
    body = nodes.tbody()
    group += body
    for cells in rows:
        row = nodes.row()
        for cell in cells:
            entry = nodes.entry()
            entry += cell if isinstance(cell, nodes.Element) else nodes.paragraph("", "", cell)
            row += entry
        body += row
    return table


def _literal(text: str) -> nodes.paragraph:
    return nodes.paragraph("", "", nodes.literal(text=text))


def _inline(directive: SphinxDirective, text: str) -> nodes.paragraph:
    """``text`` parsed as inline markup of the page (MyST: backticks, links)."""
    parsed, messages = directive.parse_inline(text, lineno=directive.lineno)
    return nodes.paragraph("", "", *parsed, *messages)


def _argument_rows(directive: SphinxDirective, parser: argparse.ArgumentParser) -> list[list[nodes.Node]]:
    rows: list[list[nodes.Node]] = []
    for action in parser._actions:  # argparse keeps no public list of its arguments
        if action.help == argparse.SUPPRESS or isinstance(
            action, (argparse._HelpAction, argparse._SubParsersAction)
        ):
            continue
        if action.option_strings:
            metavar = "" if action.nargs == 0 else f" {action.metavar or action.dest.upper()}"
            if action.choices is not None and action.nargs != 0 and not action.metavar:
                metavar = " {" + ",".join(map(str, action.choices)) + "}"
            shown = ", ".join(f"{flag}{metavar}" for flag in action.option_strings)
        else:
            shown = action.metavar or action.dest
            if action.nargs == "?":
                shown = f"[{shown}]"
        help_text = (action.help or "").replace("%%", "%")
        extras = []
        if action.required and action.option_strings:
            extras.append("required")
        default = action.default
        if action.nargs != 0 and default not in (None, argparse.SUPPRESS, "") and "default" not in help_text:
            extras.append(f"default: {default}")
        text = help_text.rstrip(".")
        if extras:
            text = f"{text} ({'; '.join(extras)})" if text else "; ".join(extras)
        rows.append([_literal(shown), nodes.paragraph(text=text + ("." if text else ""))])
    return rows


def _subcommands(parser: argparse.ArgumentParser) -> tuple[argparse._SubParsersAction, dict[str, str]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            return action, helps
    raise LookupError("the tslock command has no subcommands")


class TslockCli(SphinxDirective):
    """The ``tslock`` command's subcommands, from its parser."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        from tslock_django.management.commands.tslock import Command

        _depend_on_the_package(self)
        parser = Command().create_parser("manage.py", "tslock")
        action, helps = _subcommands(parser)
        out: list[nodes.Node] = []
        for name, sub in action.choices.items():
            section_id = f"tslock-{name}"
            section = nodes.section(ids=[section_id], names=[f"tslock {name}"])
            section += nodes.title(text=f"tslock {name}")
            if helps.get(name):
                section += nodes.paragraph(text=helps[name])
            usage = sub.format_usage().strip()
            usage = "python " + usage.removeprefix("usage: ")
            usage = " ".join(usage.split())  # one line, whatever the terminal width
            section += nodes.literal_block(usage, usage, language="text")
            rows = _argument_rows(self, sub)
            if rows:
                section += _table(self, ["argument", "meaning"], rows)
            out.append(section)
        return out


class TslockCommandOptions(SphinxDirective):
    """The options ``@locked_command`` adds, from the demo project's locked command."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        from django.core.management import load_command_class

        _depend_on_the_package(self)
        command = load_command_class("testproject.demo", "demo_report")
        parser = command.create_parser("manage.py", "demo_report")
        added = argparse.ArgumentParser(add_help=False)
        for action in parser._actions:
            if any(flag.startswith("--lock-") for flag in action.option_strings):
                added._add_action(action)
        rows = _argument_rows(self, added)
        if not rows:
            logger.warning("tslock-command-options: no --lock-* options found", location=self.get_location())
        return [_table(self, ["option", "meaning"], rows)]


def _default(value: Any) -> str:
    from tslock_django.core.options import REQUIRED

    return "required" if value is REQUIRED else repr(value)


class TslockOptions(SphinxDirective):
    """One built-in provider's OPTIONS, their defaults from the code, their meaning from
    the directive's content."""

    has_content = True
    required_arguments = 1
    option_spec = {"exclude-defaults": directives.flag}

    def run(self) -> list[nodes.Node]:
        from tslock_django.providers.store_options import BUILT_IN

        _depend_on_the_package(self)
        backend = self.arguments[0]
        spec = BUILT_IN.get(backend)
        if spec is None:
            logger.warning(
                f"tslock-options: {backend!r} is not a built-in provider", location=self.get_location()
            )
            return []
        meanings: dict[str, str] = {}
        for line in self.content:
            if not line.strip():
                continue
            key, sep, text = line.partition(":")
            if not sep:
                logger.warning(
                    f"tslock-options: expected 'key: meaning', got {line!r}", location=self.get_location()
                )
                continue
            meanings[key.strip()] = text.strip()
        for key in spec.defaults:
            if key not in meanings:
                logger.warning(
                    f"tslock-options: {spec.provider} accepts {key!r}, which this page does not describe",
                    location=self.get_location(),
                )
        for key in meanings:
            if key not in spec.defaults:
                logger.warning(
                    f"tslock-options: {spec.provider} has no option {key!r} (it accepts "
                    f"{', '.join(spec.defaults)})",
                    location=self.get_location(),
                )
        rows = [
            [_literal(key), _literal(_default(default)), _inline(self, meanings.get(key, ""))]
            for key, default in spec.defaults.items()
        ]
        if not rows:
            return [nodes.paragraph(text=f"{spec.provider} takes no OPTIONS.")]
        return [_table(self, ["option", "default", "meaning"], rows)]


#: Names the docstrings mention that are deliberately not in the reference (internal
#: helpers, type variables): shown as text, not as a broken link.
INTERNAL = {
    "tslock_django.core.provider.Attempt",
    "tslock_django.conf.invalid_url_entry",
    "tslock_django.worker.export.copy_worker_modules",
    "tslock_django.worker.runtime.ProgressStream",
}
_TYPE_VARIABLES = {"P", "~P", "R", "T", "C", "P.args", "P.kwargs"}


def resolve_our_names(app: Sphinx, env: Any, node: Any, contnode: nodes.Node) -> nodes.Node | None:
    """Resolve a Python reference that Sphinx could not: the docstrings name tslock's
    classes by their defining module (``tslock_django.exceptions.LockHeld``) or bare
    (``LockProviderError`` in a ``Raises:`` section), while the reference documents them
    where users import them (``tslock_django.LockHeld``). A target is matched by its last
    component against the objects documented under ``tslock_django``; what stays
    unresolved is still a warning (and a failure under ``-W``)."""
    if node.get("refdomain") != "py":
        return None
    target = str(node.get("reftarget", ""))
    if any(ch.isspace() for ch in target) or target in {".", ""}:
        # Prose that napoleon took for a type ("Whatever task raises", "The reason ..."):
        # keep it as text.
        return contnode
    last = target.rsplit(".", 1)[-1].lstrip("~")
    if target in INTERNAL or last in _TYPE_VARIABLES:
        return contnode
    domain = env.get_domain("py")
    ours = target.startswith(("tslock_django.", "~tslock_django.")) or "." not in target
    if not ours:
        return None
    candidates = sorted(
        name
        for name in domain.objects
        if name.startswith("tslock_django.") and name.rsplit(".", 1)[-1] == last
    )
    # A method named like the target in the class being documented wins (``close``,
    # ``query``); otherwise a unique match anywhere in the package.
    context = node.get("py:class")
    if context:
        own = [c for c in candidates if c.rsplit(".", 2)[-2] == context.rsplit(".", 1)[-1]]
        if len(own) == 1:
            candidates = own
    if len(candidates) != 1:
        return None
    from sphinx.util.nodes import make_refnode

    docname = domain.objects[candidates[0]].docname
    return make_refnode(app.builder, node["refdoc"], docname, candidates[0], contnode, candidates[0])


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("missing-reference", resolve_our_names)
    app.add_directive("tslock-cli", TslockCli)
    app.add_directive("tslock-command-options", TslockCommandOptions)
    app.add_directive("tslock-options", TslockOptions)
    return {"version": __version__, "parallel_read_safe": True, "parallel_write_safe": True}
