"""The facts the fixture catalogue (``INDEX.md`` next to the zips) records per table.

Tests compare what hoodied reads against these independently written notes: table version,
type, partitioning, keys, merge mode, base format, metadata-table partitions and the ordered
list of timeline instants (``c[insert]``, ``compaction→c[compact]``, ``indexing×2``, ...).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from hoodied.hoodie.timeline.instant import Action
from tests.helpers.fixtures import FIXTURES, fixture_id

_HEADER = re.compile(r"^### `(hudi-rs/[^`]+\.zip)`")
_VERSION = re.compile(r"^- Table version (\d+), (COW|MOR)")
_TIMELINE = re.compile(r"^- Timeline \((\d+) completed instants, [^)]*\): (.*?)\. No pending instants\.")
_PARTITIONING = re.compile(r"^- Partitioning: (.*)$")
_MDT = re.compile(r"^- Metadata table: (yes: (\S+)|no)\.?$")
_ITEM = re.compile(
    r"^(compaction→c|clustering→rc|c|dc|rc|indexing|rollback|clean)(?:\[([a-z_]+)\])?(?:×(\d+))?$"
)

ABBREVIATIONS = {
    "c": Action.COMMIT,
    "dc": Action.DELTA_COMMIT,
    "rc": Action.REPLACE_COMMIT,
    "compaction→c": Action.COMPACTION,
    "clustering→rc": Action.CLUSTERING,
    "indexing": Action.INDEXING,
    "rollback": Action.ROLLBACK,
    "clean": Action.CLEAN,
}


@dataclass
class IndexEntry:
    fid: str
    version: int = 0
    table_type: str = ""
    instant_count: int = 0
    #: (action, operationType upper-case or None) per completed instant, in timeline order
    instants: list[tuple[Action, str | None]] = field(default_factory=list)
    partition_fields: tuple[str, ...] = ()
    hive_style: bool | None = None
    record_key: tuple[str, ...] = ()
    ordering: tuple[str, ...] = ()
    merge_mode: str | None = None
    base_format: str = "PARQUET"
    populate_meta_fields: bool = True
    mdt_partitions: tuple[str, ...] = ()


def _timeline(text: str) -> list[tuple[Action, str | None]]:
    if text.startswith("(none"):
        return []
    out: list[tuple[Action, str | None]] = []
    for item in text.split(", "):
        m = _ITEM.match(item.strip())
        assert m, f"INDEX.md: cannot read timeline item {item!r}"
        abbr, op, times = m.groups()
        out.extend([(ABBREVIATIONS[abbr], op.upper() if op else None)] * int(times or 1))
    return out


def _partitioning(entry: IndexEntry, text: str) -> None:
    parts = [p.strip() for p in text.rstrip(".").split(";")]
    head = parts[0]
    if head != "(non-partitioned)":
        m = re.match(r"^(\S+) \(hive-style=(true|false)\)$", head)
        assert m, head
        entry.partition_fields = tuple(m.group(1).split(","))
        entry.hive_style = m.group(2) == "true"
    for part in parts[1:]:
        if part.startswith("record key"):
            entry.record_key = tuple(part.split("`")[1].split(","))
        elif part.startswith("ordering field"):
            value = part.split("`")[1]
            entry.ordering = () if value == "(none)" else tuple(value.split(","))
        elif part.startswith("merge mode"):
            entry.merge_mode = part.split()[-1]
        elif part.startswith("base format"):
            entry.base_format = part.split()[-1]
        elif part.startswith("populate.meta.fields"):
            entry.populate_meta_fields = part.endswith("true")


def load_index() -> dict[str, IndexEntry]:
    """Entries by fixture id; empty when the catalogue is absent."""
    path = FIXTURES / "INDEX.md"
    if not path.is_file():
        return {}
    entries: dict[str, IndexEntry] = {}
    current: IndexEntry | None = None
    for line in path.read_text(encoding="utf-8").splitlines():
        if m := _HEADER.match(line):
            current = IndexEntry(fixture_id(FIXTURES / m.group(1)))
            entries[current.fid] = current
        elif current is None:
            continue
        elif m := _VERSION.match(line):
            current.version, current.table_type = int(m.group(1)), m.group(2)
        elif m := _TIMELINE.match(line):
            current.instant_count = int(m.group(1))
            current.instants = _timeline(m.group(2))
        elif m := _PARTITIONING.match(line):
            _partitioning(current, m.group(1))
        elif m := _MDT.match(line):
            current.mdt_partitions = tuple(m.group(2).rstrip(".").split(",")) if m.group(2) else ()
    return entries


INDEX = load_index()
