"""The timeline of a Hudi table: instants, the active and archived timelines, plans, commit metadata.

The face: the value types (``Instant``, ``Action``, ``State``; Hudi's ``HoodieInstant``), the
active timeline (``Timeline``; ``HoodieActiveTimeline``), its writer (``TimelineWriter``) and
time generator (``TrueTime``; ``TimeGenerator``), and the instant-time grammar. Plans, commit
metadata, the LSM history and its writer are imported from ``hoodie.timeline.plans``,
``hoodie.timeline.commit_metadata``, ``hoodie.timeline.history`` and ``hoodie.timeline.archive_writer``;
the archived timeline of table version 6 (``.hoodie/archived`` log files) from
``hoodie.timeline.archived_v6``; a timeline built from file names in one pass and its compact copy
(what the daemon keeps between polls) from ``hoodie.timeline.compact``.
"""

from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import (
    WRITE_ACTIONS,
    Action,
    Instant,
    State,
    datetime_to_instant_time,
    instant_time_to_datetime,
    is_instant_time,
    require_instant_time,
)
from hoodied.hoodie.timeline.truetime import TimeSettings, TrueTime
from hoodied.hoodie.timeline.writer import TimelineWriter

__all__ = [
    "WRITE_ACTIONS",
    "Action",
    "Instant",
    "State",
    "TimeSettings",
    "Timeline",
    "TimelineWriter",
    "TrueTime",
    "datetime_to_instant_time",
    "instant_time_to_datetime",
    "is_instant_time",
    "require_instant_time",
]
