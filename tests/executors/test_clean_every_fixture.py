"""Clean runs on every fixture table Apache Hudi wrote, with or without a metadata table.

For each table: ``hoodied schedule clean`` with the most aggressive retention
(``KEEP_LATEST_FILE_VERSIONS``, one version), then ``hoodied execute``. A table with nothing
to clean gets no plan and is not changed; a table hoodied cannot clean is refused with one
line and is not changed; every other table's clean completes, and afterwards hudi-rs reads
the same rows as before, with the metadata table (where there is one) and with
``.hoodie/metadata`` moved away, and the metadata table's listing has no drift.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.table import HoodieTable
from hoodied.service.cli.main import cli
from hoodied.service.cli.report import committed_listing_drift
from tests.executors.test_clean_executor import _files, _hudi_rs
from tests.helpers.fixtures import ALL_FIXTURES

SKEW = ["--clock-skew-ms", "5"]
#: The Lance table is not a parquet table: hoodied refuses it (exit 5, unsupported).
REFUSED = {"cow/v9_lance_nonpartitioned": "base file format LANCE"}


@pytest.mark.parametrize("fid", sorted(ALL_FIXTURES) or [pytest.param("none", marks=pytest.mark.skip(
    reason="no Hudi fixtures found (set HOODIED_FIXTURES)"))])
def test_clean_on_every_fixture(fid: str, hudi_table, tmp_path: Path) -> None:
    root = hudi_table(fid)
    before = _files(root)
    scheduled = CliRunner().invoke(cli, ["schedule", "clean", str(root), "--policy",
                                         "KEEP_LATEST_FILE_VERSIONS", "--retained", "1", *SKEW])
    if fid in REFUSED:
        assert scheduled.exit_code == 5, scheduled.output
        assert REFUSED[fid] in scheduled.stderr and len(scheduled.stderr.splitlines()) == 1
        assert _files(root) == before
        return
    assert scheduled.exit_code == 0, scheduled.output
    if "nothing to clean" in scheduled.stdout:
        assert _files(root) == before
        return
    rows = _hudi_rs(root, None)
    t = scheduled.stdout.split()[0]
    executed = CliRunner().invoke(cli, ["execute", str(root), "--instant", t, *SKEW])
    assert executed.exit_code == 0, executed.output
    assert f"{t} clean: " in executed.stdout and "completed" in executed.stdout, executed.stdout
    deleted = before - _files(root)
    assert deleted and all(not f.startswith(".hoodie/") for f in deleted)

    assert _hudi_rs(root, None) == rows
    if load_table_config(LocalStorage(str(root))).metadata_table_available:
        assert committed_listing_drift(HoodieTable.open(str(root))).count == 0
        copy = tmp_path / "without-mdt" / root.name
        shutil.copytree(root, copy)
        shutil.rmtree(copy / ".hoodie" / "metadata")
        assert _hudi_rs(copy, None) == rows
