"""Time in text: whether a unit dates something, and which days a query names.

A question that names a time ("what did Caroline do on 7 May 2023?", "the bug we fixed last
week") is answered by units written around that time. `query_dates` resolves the times a query
names into day ranges (relative ones against the query's `now`); `gap_days` is how far a unit's
timestamp lies from the nearest of them, which the ranker reads as the `date_gap` feature.
"""

from __future__ import annotations

import calendar
import re
from datetime import datetime, timedelta
from typing import Callable

DayRange = tuple[datetime, datetime]  # [start, end), naive UTC like every timestamp in the store

MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
          "november", "december")
DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
TIME_CUE_RE = re.compile(  # a turn that dates something: what "when" questions need
    rf"\b(yesterday|today|tomorrow|tonight|last (?:week|month|year|weekend|night|{'|'.join(DAYS)})|"
    rf"next (?:week|month|year|weekend)|ago|(?:19|20)\d\d|{'|'.join(MONTHS)}|{'|'.join(DAYS)}|weekend|"
    r"recently|just)\b", re.I)
WHEN_RE = re.compile(r"^\s*(when|what (?:year|month|day|date|time))\b|\bhow long\b", re.I)  # a "when" question

_MONTH_NUMBER = {m: i + 1 for i, m in enumerate(MONTHS)} | {m[:3]: i + 1 for i, m in enumerate(MONTHS)} | {"sept": 9}
_COUNT = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
          "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "a couple of": 2, "a few": 3, "few": 3}
_SPAN_DAYS = {"day": 1, "week": 7, "weekend": 7, "month": 30, "year": 365}
_DAYS_BACK = {"yesterday": 1, "today": 0, "tonight": 0, "the day before yesterday": 2}
_M = "(?P<mon>sept|" + "|".join(f"{m[:3]}(?:{m[3:]})?" for m in MONTHS) + ")"  # "sep", "sept", "september"
_ORD = r"(?:st|nd|rd|th)?"
_Y = r"(?P<y>(?:19|20)\d\d)"
_DOW = "|".join(DAYS)
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (  # most specific first: a span is read once
    ("iso", re.compile(rf"\b{_Y}-(?P<m>\d\d)-(?P<d>\d\d)\b")),
    ("day_month", re.compile(rf"\b(?P<d>\d{{1,2}}){_ORD}\s+(?:of\s+)?{_M}\.?,?(?:\s+{_Y})?\b", re.I)),
    ("month_day", re.compile(rf"\b{_M}\.?\s+(?P<d>\d{{1,2}}){_ORD}\b(?:,?\s+{_Y})?", re.I)),
    ("month_year", re.compile(rf"\b{_M}\.?,?\s+{_Y}\b", re.I)),
    ("month", re.compile(rf"\b(?:in|during|of|from|to|since|until|before|after|last|this)\s+"
                         rf"(?:the\s+month\s+of\s+)?{_M}\b", re.I)),
    ("year", re.compile(rf"\b(?:in|during|since|of|from|to)\s+{_Y}\b", re.I)),
    ("ago", re.compile(rf"\b(?P<n>\d+|{'|'.join(sorted(_COUNT, key=len, reverse=True))})\s+"
                       r"(?P<u>day|week|month|year)s?\s+ago\b", re.I)),
    ("last", re.compile(rf"\b(?P<which>last|this|past|previous)\s+(?P<u>week(?:end)?|month|year|{_DOW})\b", re.I)),
    ("relative", re.compile(r"\b(?P<w>yesterday|today|tonight|the day before yesterday)\b", re.I)),
    ("weekday", re.compile(rf"\bon\s+(?P<dow>{_DOW})\b", re.I)),
)


def _day(y: int, m: int, d: int) -> DayRange | None:
    try:
        start = datetime(y, m, d)
    except ValueError:  # "31 February"
        return None
    return start, start + timedelta(days=1)


def _days_back(today: datetime, back: int) -> DayRange:
    return today - timedelta(days=back), today - timedelta(days=back - 1)


def _latest_year(now: datetime, month: int, day: int = 1) -> int:
    """A date named without its year is the latest one at or before now."""
    return now.year if (month, day) <= (now.month, now.day) else now.year - 1


def _month_range(y: int, m: int) -> DayRange:
    start = datetime(y, m, 1)
    return start, start + timedelta(days=calendar.monthrange(y, m)[1])


def _named_day(g: dict[str, str], now: datetime, today: datetime) -> DayRange | None:
    month, day = _MONTH_NUMBER[g["mon"].lower().rstrip(".")], int(g["d"])
    return _day(int(g["y"]) if g["y"] else _latest_year(now, month, day), month, day)


def _ago(g: dict[str, str], now: datetime, today: datetime) -> DayRange:
    """"three weeks ago": that point, give or take half a unit."""
    n = int(g["n"]) if g["n"].isdigit() else _COUNT[g["n"].lower()]
    span = _SPAN_DAYS[g["u"].lower()]
    centre, half = today - timedelta(days=n * span), timedelta(days=max(1, span // 2))
    return centre - half, centre + half + timedelta(days=1)


def _last(g: dict[str, str], now: datetime, today: datetime) -> DayRange:
    unit, which = g["u"].lower(), g["which"].lower()
    if unit in DAYS:
        return _days_back(today, (today.weekday() - DAYS.index(unit)) % 7 or 7)
    span = _SPAN_DAYS[unit]
    if which == "this":
        return today - timedelta(days=span), today + timedelta(days=1)
    return today - timedelta(days=span + span // 2), today - timedelta(days=span // 2 - 1)  # the one before


_RESOLVE: dict[str, Callable[[dict[str, str], datetime, datetime], DayRange | None]] = {
    "iso": lambda g, now, today: _day(int(g["y"]), int(g["m"]), int(g["d"])),
    "day_month": _named_day,
    "month_day": _named_day,
    "month_year": lambda g, now, today: _month_range(int(g["y"]), _MONTH_NUMBER[g["mon"].lower().rstrip(".")]),
    "month": lambda g, now, today: _month_range(_latest_year(now, m := _MONTH_NUMBER[g["mon"].lower()]), m),
    "year": lambda g, now, today: (datetime(int(g["y"]), 1, 1), datetime(int(g["y"]) + 1, 1, 1)),
    "ago": _ago,
    "last": _last,
    "relative": lambda g, now, today: _days_back(today, _DAYS_BACK[g["w"].lower()]),
    "weekday": lambda g, now, today: _days_back(today, (today.weekday() - DAYS.index(g["dow"].lower())) % 7),
}


def query_dates(query: str, now: datetime) -> list[DayRange]:
    """The day ranges a query names, relative ones resolved against `now`; [] when it names none."""
    today = datetime(now.year, now.month, now.day)
    found: list[DayRange] = []
    taken: list[tuple[int, int]] = []
    for kind, pattern in _PATTERNS:
        for m in pattern.finditer(query):
            if any(a < m.end() and m.start() < b for a, b in taken):
                continue
            taken.append((m.start(), m.end()))
            if (span := _RESOLVE[kind](m.groupdict(), now, today)) is not None:
                found.append(span)
    return found


def gap_days(at: datetime, ranges: list[DayRange]) -> float:
    """Days from `at` to the nearest of `ranges` (0 inside one)."""
    return min((max((start - at).total_seconds(), (at - end).total_seconds(), 0.0) / 86400
                for start, end in ranges), default=float("inf"))
