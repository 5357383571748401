"""Setting values: each parser turns a variable's text into its value, or raises ValueError
saying what is expected (settings_spec.load names the variable). Used by notifier.config's
declarations, as `parse.seconds(1, 3600)`, `parse.text`, ...
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, get_args
from urllib.parse import urlsplit


def seconds(low: float, high: float) -> Callable[[str], float]:
    """A parser for a duration written in seconds, within `low`..`high`."""
    wanted = f"a number of seconds from {human_duration(low)} to {human_duration(high)}"

    def parse(raw: str) -> float:
        try:
            value = float(raw)
        except ValueError:
            # "1h" is what people write: say what number it is in seconds.
            meant = _with_unit(raw)
            hint = f": write {meant:g} for {raw}" if meant is not None else ""
            raise ValueError(f"must be {wanted}{hint}") from None
        if not low <= value <= high:
            raise ValueError(f"must be {wanted}")
        return value

    return parse


# The units a duration is shown in, largest first: a range reads "60 s to 30 days".
_SHOWN_UNITS = ((86400.0, "day"), (3600.0, "hour"), (60.0, "minute"))


def human_duration(value: float) -> str:
    """Seconds as a person reads them: 30 days, 2 hours, 90 s, 0.5 s."""
    if value == math.inf:
        return "no limit"
    for size, name in _SHOWN_UNITS:
        if value >= size and (value / size).is_integer():
            count = int(value / size)
            return f"{count} {name}{'' if count == 1 else 's'}"
    return f"{value:g} s"


_WITH_UNIT = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd])", re.IGNORECASE)


def _with_unit(raw: str) -> float | None:
    """The seconds meant by a duration written with a unit (90s, 30m, 1.5h, 2d), if it is one."""
    match = _WITH_UNIT.fullmatch(raw.strip())
    if match is None:
        return None
    return float(match[1]) * _UNITS[match[2].lower()]


def integer(low: int, high: int) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        value = int(raw)
        if not low <= value <= high:
            raise ValueError(f"must be an integer between {low} and {high}")
        return value

    return parse


def choice(kind: Any) -> Callable[[str], Any]:
    """A parser for one of a Literal type's words (case-insensitive)."""
    choices = get_args(kind)

    def parse(raw: str) -> Any:
        if raw.lower() not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return raw.lower()

    return parse


def boolean(raw: str) -> bool:
    lowered = raw.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError("must be true or false")


def database_url(raw: str) -> str | None:
    if not raw.startswith(("postgres://", "postgresql://")):
        raise ValueError("must be a postgresql:// URL")
    return raw


def http_url(raw: str) -> str:
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError("must be an http:// or https:// URL")
    return raw.rstrip("/")


TRACE_ID_PLACEHOLDER = "{trace_id}"


def trace_url_template(raw: str) -> str | None:
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError("must be an http:// or https:// URL")
    rest = raw.replace(TRACE_ID_PLACEHOLDER, "", 1)
    if TRACE_ID_PLACEHOLDER not in raw or "{" in rest or "}" in rest:
        raise ValueError(f"must hold {TRACE_ID_PLACEHOLDER} once, where the trace id goes")
    return raw


def address(raw: str) -> str:
    # The sender address is operator configuration, checked for shape only; recipient
    # addresses are validated properly where requests come in.
    local, _, domain = raw.rpartition("@")
    if (
        not local
        or ("." not in domain and domain != "localhost")
        or any(c in raw for c in "\r\n <>")
    ):
        raise ValueError("must be an address like noreply@example.com")
    return raw


def existing_file(raw: str) -> Path | None:
    path = Path(raw)
    if not path.is_file():
        raise ValueError("must name a readable file")
    return path


def text(raw: str) -> str:
    if any(c in raw for c in "\r\n"):
        raise ValueError("must be a single line")
    return raw


# Display names longer than this do not fit a mail client's sender column anyway.
DISPLAY_NAME_MAX_CHARS = 100


def display_name(raw: str) -> str:
    if len(raw) > DISPLAY_NAME_MAX_CHARS or not raw.isprintable():
        raise ValueError(
            f"must be one line of at most {DISPLAY_NAME_MAX_CHARS} printable characters"
        )
    return raw


def float_at_least(low: float) -> Callable[[str], float]:
    def parse(raw: str) -> float:
        value = float(raw)
        if not math.isfinite(value) or value < low:
            raise ValueError(f"must be at least {low:g}")
        return value

    return parse


def fraction(raw: str) -> float:
    value = float(raw)
    if not 0 <= value < 1:
        raise ValueError("must be a fraction from 0 up to (not including) 1")
    return value


def separators(raw: str) -> str:
    if len(raw) > 4 or any(c.isalnum() or c.isspace() or c in '@"' for c in raw):
        raise ValueError("must be up to 4 punctuation characters, such as + or +-")
    return raw


def domains(raw: str) -> frozenset[str]:
    domains = frozenset(d.strip().lower() for d in raw.split(",") if d.strip())
    if any(not d.isascii() or "." not in d or any(c in d for c in " @/") for d in domains):
        raise ValueError("must be comma-separated domains in ASCII (IDNA) form, like gmail.com")
    return domains


_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def schedule(raw: str) -> tuple[float, ...]:
    """Waits such as "5s,5m,30m,2h" (a bare number is seconds), in order."""
    waits = []
    for part in (p.strip() for p in raw.split(",")):
        unit = _UNITS.get(part[-1:])
        number = part[:-1] if unit is not None else part
        try:
            value = float(number) * (unit or 1.0)
        except ValueError:
            raise ValueError("must be waits such as 5s,5m,30m,2h,1d, comma-separated") from None
        if not 0 <= value <= 30 * 86400:
            raise ValueError("each wait must be between 0 and 30 days")
        waits.append(value)
    if not 1 <= len(waits) <= 50:
        raise ValueError("must list between 1 and 50 waits")
    return tuple(waits)


_TOPIC_ARN = re.compile(
    r"arn:aws(?:-cn|-us-gov)?:sns:[a-z0-9-]{1,30}:[0-9]{12}:[A-Za-z0-9_.-]{1,256}"
)


def topic_arns(raw: str) -> tuple[str, ...]:
    """SNS topic ARNs, comma-separated."""
    arns = tuple(a.strip() for a in raw.split(",") if a.strip())
    if any(not _TOPIC_ARN.fullmatch(a) for a in arns):
        raise ValueError("must be SNS topic ARNs like arn:aws:sns:eu-west-1:123456789012:ses")
    return arns


def url_prefixes(raw: str) -> tuple[str, ...]:
    """http(s) URL prefixes, comma-separated."""
    prefixes = tuple(p.strip() for p in raw.split(",") if p.strip())
    for prefix in prefixes:
        http_url(prefix)
    return prefixes
