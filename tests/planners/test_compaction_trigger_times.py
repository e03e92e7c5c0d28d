"""The compaction trigger reads the age of its reference instant on every poll: its shortcut for
17-digit times must give ``instant_time_to_datetime``'s answer (and error) for every time, valid or
not, in a time zone with daylight saving time."""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass
from datetime import tzinfo
from zoneinfo import ZoneInfo

from hoodied.hoodie.timeline.instant import instant_time_to_datetime
from hoodied.planners.compaction import _seconds


@dataclass
class _Config:
    tzinfo: tzinfo


def _either(f: object, *args: object) -> object:
    try:
        return f(*args)  # type: ignore[operator]
    except Exception as exc:  # the error's type is the answer
        return type(exc)


def test_the_shortcut_reads_every_time_as_strptime_does() -> None:
    config = _Config(ZoneInfo("Europe/Amsterdam"))
    rng = random.Random(3)
    cases = ["".join(p) for p in itertools.product(
        ["2024", "2025"], ["00", "01", "02", "03", "10", "12", "13"], ["00", "01", "29", "30", "31", "32"],
        ["00", "02", "24"], ["00", "59", "60"], ["00", "59", "60", "61"], ["000", "999"])]
    cases += ["".join(f"{rng.randint(0, 99):02d}" for _ in range(7)) + "123" for _ in range(2000)]
    cases += ["2025033102300000", "202503310230000001", "2025033102x000000"]  # not 17 digits
    for value in cases:
        expected = _either(lambda v: instant_time_to_datetime(v, config.tzinfo).timestamp(), value)
        assert _either(_seconds, value, config) == expected, value
