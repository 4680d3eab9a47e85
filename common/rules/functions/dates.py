"""Time: the current time and epoch timestamps in RFC 3339 or any `format_date` format, and back
(`now_rfc3339`, `unix_ts_to_rfc3339`, `rfc3339_to_unix_ts`, `format_date`, `date_to_unix_ts`),
with EMQX's time units ('second', 'millisecond', ...) and offsets ('Z', '+08:00', seconds).
"""

from __future__ import annotations

import calendar
import functools
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from common.rules.errors import RuleRuntimeError
from common.rules.functions.registry import _bad, _int, _register, _show, _text

_UNITS = {"second": 1, "millisecond": 1_000, "microsecond": 1_000_000, "nanosecond": 10**9}


def _unit(value: Any) -> int:
    scale = _UNITS.get(value) if isinstance(value, str) else None
    if scale is None:
        raise RuleRuntimeError(f"invalid time unit {value!r}: use second, millisecond, ...")
    return scale


def _now(scale: int) -> int:
    return time.time_ns() // (10**9 // scale)


def _offset_seconds(offset: Any) -> int:
    """EMQX's offset: integer seconds, 'Z', 'local' (UTC here: servers run in UTC), or
    '+08:00' / '-0530' / '+08:00:30'."""
    if offset is None or offset in ("local", "Z", "z", ""):
        return 0
    if type(offset) is int:
        return offset
    if isinstance(offset, str):
        match = re.fullmatch(r"([+-])(\d{2}):?(\d{2})(?::?(\d{2}))?", offset)
        if match:
            sign = -1 if match.group(1) == "-" else 1
            hours, minutes, seconds = (int(g or 0) for g in match.group(2, 3, 4))
            return sign * (hours * 3600 + minutes * 60 + seconds)
    raise RuleRuntimeError(f"invalid time offset {offset!r}")


def _format_offset(seconds: int, style: str) -> str:
    sign = "-" if seconds < 0 else "+"
    seconds = abs(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if style == "z":
        return f"{sign}{hours:02d}{minutes:02d}"
    if style == ":z":
        return f"{sign}{hours:02d}:{minutes:02d}"
    return f"{sign}{hours:02d}:{minutes:02d}:{secs:02d}"


def _split_epoch(value: int, scale: int) -> tuple[datetime, int]:
    seconds, fraction = divmod(value, scale)
    nanos = fraction * (10**9 // scale)
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(seconds=seconds), nanos


def _rfc3339(value: int, scale: int, offset: int = 0) -> str:
    moment, nanos = _split_epoch(value, scale)
    moment = moment + timedelta(seconds=offset)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    digits = {1: 0, 1_000: 3, 1_000_000: 6, 10**9: 9}[scale]
    if digits:
        text += "." + f"{nanos:09d}"[:digits]
    return text + _format_offset(offset, ":z")


@_register("now_rfc3339")
def _now_rfc3339(unit="second"):
    scale = _unit(unit)
    return _rfc3339(_now(scale), scale)


@_register("unix_ts_to_rfc3339")
def _unix_ts_to_rfc3339(epoch, unit="second"):
    _int("unix_ts_to_rfc3339", epoch)
    scale = _unit(unit)
    try:
        return _rfc3339(epoch, scale)
    except (OverflowError, ValueError):
        raise _bad("unix_ts_to_rfc3339", epoch, unit) from None


_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?([Zz]|[+-]\d{2}:\d{2})"
)


@_register("rfc3339_to_unix_ts")
def _rfc3339_to_unix_ts(text, unit="second"):
    text = _text("rfc3339_to_unix_ts", text)
    scale = _unit(unit)
    match = _RFC3339.fullmatch(text)
    if not match:
        raise RuleRuntimeError(f"rfc3339_to_unix_ts: not an RFC 3339 date-time: {_show(text)}")
    year, month, day, hour, minute, second = (int(g) for g in match.group(1, 2, 3, 4, 5, 6))
    try:
        moment = datetime(year, month, day, hour, minute, second, tzinfo=UTC)
    except ValueError:
        raise RuleRuntimeError(f"rfc3339_to_unix_ts: invalid date {_show(text)}") from None
    nanos = int((match.group(7) or "0").ljust(9, "0"))
    offset = _offset_seconds(match.group(8))
    total_ns = (calendar.timegm(moment.timetuple()) - offset) * 10**9 + nanos
    return total_ns // (10**9 // scale)


@_register("now_timestamp")
def _now_timestamp(unit="second"):
    return _now(_unit(unit))


_DATE_DIRECTIVES: dict[str, Callable[[datetime, int, int], str]] = {
    "%Y": lambda m, n, o: f"{m.year:04d}",
    "%m": lambda m, n, o: f"{m.month:02d}",
    "%d": lambda m, n, o: f"{m.day:02d}",
    "%H": lambda m, n, o: f"{m.hour:02d}",
    "%M": lambda m, n, o: f"{m.minute:02d}",
    "%S": lambda m, n, o: f"{m.second:02d}",
    "%N": lambda m, n, o: f"{n:09d}",
    "%3N": lambda m, n, o: f"{n:09d}"[:3],
    "%6N": lambda m, n, o: f"{n:09d}"[:6],
    "%z": lambda m, n, o: _format_offset(o, "z"),
    "%:z": lambda m, n, o: _format_offset(o, ":z"),
    "%::z": lambda m, n, o: _format_offset(o, "::z"),
}


@functools.lru_cache(maxsize=256)
def _date_plan(fmt: str) -> tuple[Any, ...]:
    """A format string cut once into literals and directives (formats repeat per rule)."""
    plan: list[Any] = []
    i = 0
    while i < len(fmt):
        for token in ("%::z", "%:z", "%3N", "%6N"):
            if fmt.startswith(token, i):
                plan.append(_DATE_DIRECTIVES[token])
                i += len(token)
                break
        else:
            two = fmt[i : i + 2]
            if two in _DATE_DIRECTIVES:
                plan.append(_DATE_DIRECTIVES[two])
                i += 2
            else:
                plan.append(fmt[i])
                i += 1
    return tuple(plan)


def _format_date(value: int, scale: int, offset: int, fmt: str) -> str:
    moment, nanos = _split_epoch(value, scale)
    moment = moment + timedelta(seconds=offset)
    return "".join(
        part if type(part) is str else part(moment, nanos, offset) for part in _date_plan(fmt)
    )


@_register("format_date")
def _format_date_fn(unit, offset, fmt, epoch=None):
    scale = _unit(unit)
    if epoch is None:
        epoch = _now(scale)
    _int("format_date", epoch)
    try:
        return _format_date(epoch, scale, _offset_seconds(offset), _text("format_date", fmt))
    except (OverflowError, ValueError):
        raise _bad("format_date", unit, offset, fmt, epoch) from None


_DATE_FIELDS = {
    "%Y": r"(?P<Y>\d{4})",
    "%m": r"(?P<m>\d{1,2})",
    "%d": r"(?P<d>\d{1,2})",
    "%H": r"(?P<H>\d{1,2})",
    "%M": r"(?P<M>\d{1,2})",
    "%S": r"(?P<S>\d{1,2})",
    "%N": r"(?P<N>\d{9})",
    "%3N": r"(?P<N3>\d{3})",
    "%6N": r"(?P<N6>\d{6})",
    "%z": r"(?P<z>[+-]\d{4}|[Zz])",
    "%:z": r"(?P<z>[+-]\d{2}:\d{2}|[Zz])",
    "%::z": r"(?P<z>[+-]\d{2}:\d{2}:\d{2}|[Zz])",
}


@_register("date_to_unix_ts")
def _date_to_unix_ts(unit, a, b, c=None):
    """date_to_unix_ts(unit, [offset,] format, date): the inverse of format_date."""
    if c is None:
        offset, fmt, text = None, a, b
    else:
        offset, fmt, text = a, b, c
    scale = _unit(unit)
    fmt, text = _text("date_to_unix_ts", fmt), _text("date_to_unix_ts", text)
    pattern, i = [], 0
    while i < len(fmt):
        for token in ("%::z", "%:z", "%3N", "%6N", *_DATE_FIELDS):
            if fmt.startswith(token, i):
                pattern.append(_DATE_FIELDS[token])
                i += len(token)
                break
        else:
            # EMQX reads separators loosely: "%H-%M-%S" also parses "10:40:12".
            char = fmt[i]
            pattern.append(re.escape(char) if char.isalnum() else r"[^0-9]")
            i += 1
    try:
        match = re.fullmatch("".join(pattern), text)
    except re.error:
        raise _bad("date_to_unix_ts", unit, fmt, text) from None
    if not match:
        raise RuleRuntimeError(f"date_to_unix_ts: {_show(text)} does not match {_show(fmt)}")
    fields = match.groupdict()
    for part, label in (("Y", "year"), ("m", "month"), ("d", "day")):
        if not fields.get(part):
            raise RuleRuntimeError(f"date_to_unix_ts: the format has no {label} ({fmt!r})")
    try:
        moment = datetime(
            int(fields.get("Y") or 1970),
            int(fields.get("m") or 1),
            int(fields.get("d") or 1),
            int(fields.get("H") or 0),
            int(fields.get("M") or 0),
            int(fields.get("S") or 0),
            tzinfo=UTC,
        )
    except ValueError:
        raise RuleRuntimeError(f"date_to_unix_ts: invalid date {_show(text)}") from None
    nanos = 0
    if fields.get("N"):
        nanos = int(fields["N"])
    elif fields.get("N3"):
        nanos = int(fields["N3"]) * 1_000_000
    elif fields.get("N6"):
        nanos = int(fields["N6"]) * 1_000
    zone = fields.get("z")
    shift = _offset_seconds(zone) if zone else _offset_seconds(offset)
    total_ns = (calendar.timegm(moment.timetuple()) - shift) * 10**9 + nanos
    return total_ns // (10**9 // scale)


@_register("timezone_to_second", "timezone_to_offset_seconds")
def _timezone_to_second(zone):
    return _offset_seconds(zone)
