"""The compatibility page's "Tested with Apache Hudi" table is the Apache Hudi lane's own
(``tests.hudi.matrix``): printed as it is, every cell backed by a lane test that exists and runs for
that release, and the writer settings the page gives are those the lane's writers run with."""

from __future__ import annotations

import importlib
from pathlib import Path

from tests.helpers.hudi_peer import RELEASES, writer_options
from tests.hudi import matrix

DOCS = Path(__file__).resolve().parents[2] / "docs"
#: the writer's keys that make it safe beside hoodied (its lock provider aside)
SAFE_BESIDE_HOODIED = (
    "hoodie.write.concurrency.mode", "hoodie.cleaner.policy.failed.writes", "hoodie.clean.automatic",
    "hoodie.compact.inline", "hoodie.compact.schedule.inline", "hoodie.clustering.inline",
    "hoodie.clustering.schedule.inline", "hoodie.clustering.async.enabled", "hoodie.archive.automatic",
)


def test_compatibility_page_prints_the_lanes_table() -> None:
    assert matrix.render() in (DOCS / "compatibility.md").read_text(), \
        "docs/compatibility.md: paste tests.hudi.matrix.render() under 'Tested with Apache Hudi'"


def _releases_run(node: str) -> list[str]:
    module_name, function_name = node.split("::")
    module = importlib.import_module(f"tests.hudi.{module_name.removesuffix('.py')}")
    function = getattr(module, function_name)
    for mark in getattr(function, "pytestmark", []):
        if mark.name == "parametrize" and mark.args[0] == "hudi_peer":
            return list(mark.args[1])
    return RELEASES  # the lane's session fixture runs every release


def test_matrix_names_the_lane_tests() -> None:
    for row in matrix.ROWS:
        assert len(row.cells) == len(matrix.SERVICES)
        for cell in filter(None, row.cells):
            for node in cell[1].split():
                assert row.release in _releases_run(node), f"{node} does not run Hudi {row.release}"


def test_writers_page_gives_the_lanes_writer_settings() -> None:
    """The keys that make a Hudi writer safe beside hoodied, as the lane's writers set them."""
    page = (DOCS / "writers.md").read_text()
    options = writer_options("1.1.1", "t", "MERGE_ON_READ")
    for key in SAFE_BESIDE_HOODIED:
        assert f"{key}={options[key]}" in page, key
    assert f"hoodie.write.lock.provider=org.apache.hudi.client.transaction.lock.{matrix.LOCK}" in page
