"""The Jinja2 environment every page of reports/ renders through (report, serve, nightly).

Autoescaping is on for every template, so a table name, a DDL statement or an error message
from a history is always text, never markup; the few trusted pieces (our own CSS and script,
JSON inside a <script> element) are marked safe here, in one place.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup


def asset(name: str) -> Markup:
    """A file of reports/templates inlined as is (our CSS and JavaScript, never run data)."""
    text = resources.files("reports").joinpath("templates", name).read_text(encoding="utf-8")
    return Markup(text)


def script_json(value: Any) -> Markup:
    """JSON that is safe inside a <script> element: no `</` can close it early."""
    text = json.dumps(value, separators=(",", ":"), default=str).replace("</", "<\\/")
    return Markup(text)


def pretty_json(value: Any, limit: int = 200_000) -> str:
    """Indented JSON for a <pre> block (escaped by the template), cut at `limit` characters."""
    text = json.dumps(value, indent=2, sort_keys=True, default=str)
    return text if len(text) <= limit else text[:limit] + "\n... (truncated)"


@functools.cache
def environment() -> Environment:
    env = Environment(
        loader=PackageLoader("reports", "templates"),
        autoescape=True,
        undefined=StrictUndefined,  # a missing value is a bug in the page, not an empty cell
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["script_json"] = script_json
    env.filters["pretty_json"] = pretty_json
    env.filters["compact_json"] = lambda v: json.dumps(v, sort_keys=True, default=str)
    env.globals["asset"] = asset
    return env


def render(template: str, **context: Any) -> str:
    return environment().get_template(template).render(**context)


def render_fragment(template: str, **context: Any) -> Markup:
    """A template's output to be inlined in another page (an anomaly's SVG): it went through
    this autoescaped environment already, so it is markup we made, not run data."""
    return Markup(render(template, **context))
