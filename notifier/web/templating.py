"""One way to write HTML: Jinja2 templates with autoescape on, from one base layout.

Every page is a template in a package's `templates/` folder that extends `base.html` (here):
the public pages, the console and the dev inbox. Values are escaped by Jinja; markup that is
trusted (an SVG chart drawn here, a fragment built from escaped parts) passes only as
`markupsafe.Markup`. A wing above this one adds its own folder in front of this one's
(`environment("notifier.dev")`), so its pages extend the same base.
"""

from __future__ import annotations

import html
from datetime import UTC
from functools import cache
from typing import Any

from jinja2 import ChoiceLoader, Environment, PackageLoader, StrictUndefined
from markupsafe import Markup


@cache
def environment(*packages: str) -> Environment:
    """The templates of `packages` (searched first, in order), then the web wing's."""
    loaders = [PackageLoader(package, "templates") for package in (*packages, "notifier.web")]
    env = Environment(
        loader=ChoiceLoader(loaders),
        autoescape=True,
        finalize=_escaped,
        # A name a template uses that the page does not give is an error, not an empty string.
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals["UTC"] = UTC
    return env


def _escaped(value: Any) -> Any:
    """Every value a template prints, escaped as the standard library escapes HTML (`&quot;`,
    `&#x27;`): what autoescape does, spelled as the pages always were. Markup passes."""
    if isinstance(value, Markup):
        return value
    return Markup(html.escape(str(value)))


def render(template: str, *packages: str, **values: Any) -> str:
    """`template`, rendered with `values`."""
    return environment(*packages).get_template(template).render(**values)
