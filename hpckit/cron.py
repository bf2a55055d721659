"""Five-field cron expressions: the nightly sweep's schedule, checked where a blueprint is read and used
where the Slurm-only schedule computes its next start (one parser for both)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from hpckit.errors import InputError

_FIELDS = (("minute", 0, 59), ("hour", 0, 23), ("day of month", 1, 31), ("month", 1, 12), ("day of week", 0, 7))


@dataclass(frozen=True)
class Cron:
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    any_day: bool  # day of month is '*'
    any_weekday: bool  # day of week is '*'

    def day_matches(self, day: dt.date) -> bool:
        """cron's rule: when both day fields are restricted, either may match."""
        by_day = day.day in self.days
        by_weekday = (day.isoweekday() % 7) in self.weekdays
        if self.any_day and self.any_weekday:
            return True
        if self.any_day:
            return by_weekday
        if self.any_weekday:
            return by_day
        return by_day or by_weekday

    def next_after(self, after: dt.datetime) -> dt.datetime:
        """The first matching minute strictly after ``after`` (within four years)."""
        start = after.replace(second=0, microsecond=0) + dt.timedelta(minutes=1)
        day = start.date()
        for _ in range(4 * 366):
            if day.month in self.months and self.day_matches(day):
                found = self._first_time(day, start)
                if found is not None:
                    return found
            day += dt.timedelta(days=1)
        raise InputError("cron expression never matches")

    def _first_time(self, day: dt.date, start: dt.datetime) -> dt.datetime | None:
        for hour in sorted(self.hours):
            for minute in sorted(self.minutes):
                when = dt.datetime.combine(day, dt.time(hour, minute), tzinfo=start.tzinfo)
                if when >= start:
                    return when
        return None


def parse_cron(text: str) -> Cron:
    """A five-field cron expression: numbers, ``*``, lists, ranges and ``/`` steps."""
    fields = text.split()
    if len(fields) != 5:
        raise InputError(f"cron expression {text!r}: expected 5 fields (minute hour day month weekday)")
    sets = [_field(f, name, low, high, text) for f, (name, low, high) in zip(fields, _FIELDS, strict=True)]
    weekdays = frozenset(d % 7 for d in sets[4])
    return Cron(sets[0], sets[1], sets[2], sets[3], weekdays, fields[2] == "*", fields[4] == "*")


def _field(text: str, name: str, low: int, high: int, whole: str) -> frozenset[int]:
    values: set[int] = set()
    for part in text.split(","):
        base, _, step_text = part.partition("/")
        try:
            step = int(step_text) if step_text else 1
            if base == "*":
                first, last = low, high
            elif "-" in base:
                first, last = (int(x) for x in base.split("-", 1))
            else:
                first = last = int(base)
                if step_text:
                    last = high
        except ValueError:
            raise InputError(f"cron expression {whole!r}: bad {name} {part!r}") from None
        if step < 1 or not (low <= first <= last <= high):
            raise InputError(f"cron expression {whole!r}: {name} {part!r} outside {low}-{high}")
        values.update(range(first, last + 1, step))
    return frozenset(values)
