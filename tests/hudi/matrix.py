"""What the Apache Hudi lane shows, as the table the documentation prints ("Tested with Apache Hudi"
in ``docs/compatibility.md``): one row per Hudi release and table layout, one column per service, each
cell naming the lane's test that shows it, so that the page cannot claim a scenario no test runs
(``tests/docs`` renders this and compares it with the page; ``test_matrix_names_the_lane_tests``
checks every named test exists and runs for that release).
"""

from __future__ import annotations

from dataclasses import dataclass

TURNS = "test_writer_beside_daemon.py::test_writer_and_daemon_take_turns"
REFUSED = "test_writer_beside_daemon.py::test_a_version_6_metadata_table_is_refused_and_left_alone"
CROSS_COMPACTION = "test_cross_execution.py::test_compaction_planned_by_one_executed_by_the_other"
CROSS_CLUSTERING = "test_cross_execution.py::test_clustering_planned_by_one_executed_by_the_other"

#: the services of the table's columns, in order
SERVICES = ("compaction", "log compaction", "clean", "clustering", "archival",
            "Hudi's plans executed by hoodied", "hoodied's plans executed by Hudi")


@dataclass(frozen=True)
class Row:
    release: str
    table_version: int
    layout: str
    #: per service of ``SERVICES``: ``(what happens, the test that shows it)``; ``None``: not run (the
    #: service is not one hoodied runs there, or not one the lane runs yet)
    cells: tuple[tuple[str, str] | None, ...]


def _turns(log_compaction: bool) -> tuple[tuple[str, str] | None, ...]:
    return (("tested", TURNS), ("tested", TURNS) if log_compaction else None,
            ("tested", TURNS), ("tested", TURNS), ("tested", TURNS),
            ("compaction, clustering", f"{CROSS_COMPACTION} {CROSS_CLUSTERING}"),
            ("compaction, clustering", f"{CROSS_COMPACTION} {CROSS_CLUSTERING}"))


_REFUSED_ROW = (("refused, nothing written", REFUSED), None, ("refused, nothing written", REFUSED),
                ("refused, nothing written", REFUSED), None, None, None)

MOR_V8_V9 = "merge-on-read, metadata table (files, column_stats, partition_stats, record_index)"
ROWS = (
    Row("0.15.0", 6, "merge-on-read, no metadata table", _turns(log_compaction=False)),
    Row("0.15.0", 6, "merge-on-read, metadata table (files, column_stats, record_index)", _REFUSED_ROW),
    Row("1.0.2", 8, MOR_V8_V9, _turns(log_compaction=True)),
    Row("1.1.1", 9, MOR_V8_V9, _turns(log_compaction=True)),
)

#: the writer's settings and the lock in every row (``tests.helpers.hudi_peer.writer_options``)
LOCK = "FileSystemBasedLockProvider"


def render() -> str:
    """The documentation's table: what happens per cell; the tests are named in the text below it."""
    head = ["Hudi release", "table version", "table", *SERVICES]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in ROWS:
        cells = [cell[0] if cell else "—" for cell in row.cells]
        lines.append("| " + " | ".join([row.release, str(row.table_version), row.layout, *cells]) + " |")
    return "\n".join(lines)
