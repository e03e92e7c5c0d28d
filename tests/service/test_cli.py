"""The command line on real tables and on bad input: one-line errors, exit codes, nothing written."""

from __future__ import annotations

import hashlib
import json
import os
import struct
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from hoodied.service.cli.main import EXIT_CORRUPT, EXIT_NOT_FOUND, EXIT_UNSUPPORTED, cli


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def tree_digest(root: Path) -> str:
    """A digest of every file name, size and content under ``root``: proof nothing was written."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in sorted(os.walk(root)):
        dirnames.sort()
        for name in sorted(filenames):
            p = Path(dirpath, name)
            h.update(str(p.relative_to(root)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def assert_one_line_error(stderr: str, *needles: str) -> None:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("hoodied: error:"), stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


# -- real tables --------------------------------------------------------------------------


def test_timeline_json_lists_every_instant(shared_table) -> None:
    table = shared_table("mor/avro/v8_trips_8i3u1d")
    code, out, _ = run("timeline", str(table), "--json")
    assert code == 0
    rows = json.loads(out)
    assert len(rows) == 8
    assert all(r["state"] == "completed" for r in rows)
    compaction = [r for r in rows if r["requested_time"] == "20251220210129235"]
    assert compaction[0]["action"] == "compaction"
    assert compaction[0]["completion_time"] == "20251220210129883"


def test_inspect_reports_pending_compaction_with_plan(hudi_table) -> None:
    table = hudi_table("mor/avro/v8_trips_8i3u1d")
    (table / ".hoodie/timeline/20251220210129235_20251220210129883.commit").unlink()
    code, out, _ = run("inspect", str(table), "--json")
    assert code == 0, out
    report = json.loads(out)
    pending = report["pending_table_services"]
    assert [p["action"] for p in pending] == ["compaction"]
    assert "3 file groups" in pending[0]["plan"]
    code, text, _ = run("timeline", str(table))
    assert code == 0
    line = next(x for x in text.splitlines() if x.startswith("20251220210129235"))
    assert "compaction" in line and "inflight" in line and "3 file groups" in line


def test_inspect_text_and_drift_zero_on_mdt_table(shared_table) -> None:
    table = shared_table("mor/avro/v9_txns_simple_meta")
    code, out, _ = run("inspect", str(table), "--json")
    assert code == 0
    report = json.loads(out)
    assert report["metadata_table"]["enabled"] is True
    assert report["metadata_table"]["drift"]["total"] == 0
    assert report["files"]["listing"] == "metadata"
    code, text, _ = run("inspect", str(table))
    assert code == 0 and "listing drift  none" in text


def test_read_writes_parquet_with_meta_columns(shared_table, tmp_path: Path) -> None:
    table = shared_table("mor/avro/v6_trips_8i3d")
    out = tmp_path / "out.parquet"
    code, stdout, _ = run("read", str(table), "--output", str(out))
    assert code == 0, stdout
    t = pq.read_table(out)
    assert t.num_rows == 5
    assert t.column_names[:5] == [
        "_hoodie_commit_time",
        "_hoodie_commit_seqno",
        "_hoodie_record_key",
        "_hoodie_partition_path",
        "_hoodie_file_name",
    ]
    code, _, _ = run("read", str(table), "--output", str(out), "--read-optimized")
    assert code == 0 and pq.read_table(out).num_rows == 8


def test_help_explains_exit_codes() -> None:
    code, out, _ = run("--help")
    assert code == 0
    assert "Exit codes" in out and "corrupt" in out
    for command in ("timeline", "inspect", "read", "demo"):
        assert command in out


# -- bad input ----------------------------------------------------------------------------


def test_missing_path(tmp_path: Path) -> None:
    code, _, err = run("inspect", str(tmp_path / "nope"))
    assert code == EXIT_NOT_FOUND
    assert_one_line_error(err, "nope", "no such path")


def test_folder_that_is_not_a_table(tmp_path: Path) -> None:
    (tmp_path / "data.csv").write_text("a,b\n")
    before = tree_digest(tmp_path)
    code, _, err = run("timeline", str(tmp_path))
    assert code == EXIT_NOT_FOUND
    assert_one_line_error(err, "not a Hudi table")
    assert tree_digest(tmp_path) == before


def test_missing_properties(hudi_table) -> None:
    table = hudi_table("cow/v8_nonpartitioned")
    (table / ".hoodie/hoodie.properties").unlink()
    before = tree_digest(table)
    code, _, err = run("inspect", str(table))
    assert code == EXIT_NOT_FOUND
    assert_one_line_error(err, "hoodie.properties")
    assert tree_digest(table) == before


def test_corrupt_properties(hudi_table) -> None:
    table = hudi_table("cow/v8_nonpartitioned")
    props = table / ".hoodie/hoodie.properties"
    props.write_text(props.read_text().replace("hoodie.table.name=", "hoodie.table.name=renamed_"))
    before = tree_digest(table)
    code, _, err = run("inspect", str(table))
    assert code == EXIT_CORRUPT
    assert_one_line_error(err, "hoodie.properties", "checksum")
    assert tree_digest(table) == before


@pytest.mark.parametrize("version", ["5", "10"])
def test_unsupported_table_version(hudi_table, version: str) -> None:
    table = hudi_table("cow/v8_nonpartitioned")
    props = table / ".hoodie/hoodie.properties"
    props.write_text(props.read_text().replace("hoodie.table.version=8", f"hoodie.table.version={version}"))
    before = tree_digest(table)
    code, _, err = run("timeline", str(table))
    assert code == EXIT_UNSUPPORTED
    assert_one_line_error(err, f"version {version}")
    assert tree_digest(table) == before


def test_lance_table_refused(hudi_table, tmp_path: Path) -> None:
    table = hudi_table("cow/v9_lance_nonpartitioned")
    before = tree_digest(table)
    code, _, err = run("read", str(table), "--output", str(tmp_path / "x.parquet"))
    assert code == EXIT_UNSUPPORTED
    assert_one_line_error(err, "LANCE")
    assert tree_digest(table) == before
    assert not (tmp_path / "x.parquet").exists()


def _only_log_file(table: Path) -> Path:
    logs = [p for p in table.rglob(".*.log.*") if ".hoodie" not in p.parts]
    assert len(logs) == 1, logs
    return logs[0]


def test_truncated_log_file(hudi_table, tmp_path: Path) -> None:
    table = hudi_table("mor/avro/v6_trips_8i1u")
    log = _only_log_file(table)
    data = log.read_bytes()
    log.write_bytes(data[: len(data) // 2])
    before = tree_digest(table)
    out = tmp_path / "x.parquet"
    code, _, err = run("read", str(table), "--output", str(out))
    assert code == EXIT_CORRUPT
    assert_one_line_error(err, log.name)
    assert tree_digest(table) == before
    assert not out.exists()


def test_log_block_length_fields_disagree(hudi_table, tmp_path: Path) -> None:
    table = hudi_table("mor/avro/v6_trips_8i1u")
    log = _only_log_file(table)
    data = bytearray(log.read_bytes())
    assert data[:6] == b"#HUDI#"
    (block_len,) = struct.unpack(">q", data[6:14])
    data[6:14] = struct.pack(">q", block_len - 7)
    log.write_bytes(bytes(data))
    before = tree_digest(table)
    out = tmp_path / "x.parquet"
    code, _, err = run("read", str(table), "--output", str(out))
    assert code == EXIT_CORRUPT
    assert_one_line_error(err, log.name)
    assert tree_digest(table) == before
    assert not out.exists()


def test_garbage_plan_file(hudi_table) -> None:
    table = hudi_table("mor/avro/v8_trips_8i3u1d")
    (table / ".hoodie/timeline/20251220210129235_20251220210129883.commit").unlink()
    plan = table / ".hoodie/timeline/20251220210129235.compaction.requested"
    plan.write_bytes(b"this is not avro at all")
    before = tree_digest(table)
    code, out, err = run("inspect", str(table))  # shows the table, the instant marked
    assert code == 0, err
    assert "20251220210129235 compaction inflight: corrupt plan: .hoodie/timeline/" in out
    assert tree_digest(table) == before
    code, _, err = run("execute", str(table), "--instant", "20251220210129235")
    assert code == EXIT_CORRUPT
    assert_one_line_error(err, "20251220210129235.compaction.requested")


def test_unknown_action_file_is_ignored_with_warning(hudi_table) -> None:
    table = hudi_table("cow/v8_nonpartitioned")
    (table / ".hoodie/timeline/20990101000000000.frobnicate.requested").write_bytes(b"")
    code, out, err = run("timeline", str(table), "--json")
    assert code == 0
    assert all(r["requested_time"] != "20990101000000000" for r in json.loads(out))
    assert "20990101000000000.frobnicate.requested" in err


def test_kryo_delete_block_is_unsupported(hudi_table, tmp_path: Path) -> None:
    from hoodied.hoodie.log import BlockType, HeaderKey, encode_block

    table = hudi_table("mor/avro/v6_trips_8i3d")
    log = _only_log_file(table)
    data = bytearray(log.read_bytes())
    # Replace the delete block with one whose content says version 2 (Kryo-serialised keys).
    from hoodied.hoodie.log import read_log_blocks
    from hoodied.hoodie.storage import LocalStorage

    storage = LocalStorage(str(table))
    rel = str(log.relative_to(table))
    blocks = list(read_log_blocks(storage, rel))
    delete = next(b for b in blocks if b.block_type == BlockType.DELETE)
    kryo = struct.pack(">ii", 2, 4) + b"\x01\x02\x03\x04"
    header = {HeaderKey.INSTANT_TIME: delete.header[HeaderKey.INSTANT_TIME]}
    new = encode_block(BlockType.DELETE, header, kryo)
    data = data[: delete.offset] + new
    log.write_bytes(bytes(data))
    before = tree_digest(table)
    out = tmp_path / "x.parquet"
    code, _, err = run("read", str(table), "--output", str(out))
    assert code == EXIT_UNSUPPORTED
    assert_one_line_error(err, log.name, "Kryo")
    assert tree_digest(table) == before
    assert not out.exists()


def test_demo_then_inspect_and_read(tmp_path: Path) -> None:
    demo = tmp_path / "demo"
    code, out, err = run("demo", str(demo))
    assert code == 0, err
    code, out, err = run("inspect", str(demo), "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["table"]["type"] == "MERGE_ON_READ"
    assert report["files"]["log_files"] > 0
    code, out, err = run("read", str(demo), "--output", str(tmp_path / "demo.parquet"))
    assert code == 0, err
    import hudi

    expected = sum(b.num_rows for b in hudi.HudiTableBuilder(str(demo)).build().read())
    assert pq.read_table(tmp_path / "demo.parquet").num_rows == expected > 0


def test_torn_block_of_an_uncommitted_append_is_skipped(hudi_table, tmp_path: Path) -> None:
    """A v6 writer that crashed mid-append leaves half a block of its inflight instant at the
    end of a committed log file: Hudi skips it, and so does hoodied; hudi-rs agrees."""
    import hudi

    from hoodied.hoodie.log import BlockType, HeaderKey, encode_block

    table = hudi_table("mor/avro/v6_trips_8i1u")
    log = _only_log_file(table)
    inflight = "20990101000000000"
    (table / ".hoodie" / f"{inflight}.deltacommit.requested").write_bytes(b"")
    (table / ".hoodie" / f"{inflight}.deltacommit.inflight").write_bytes(b"")
    block = encode_block(BlockType.AVRO_DATA, {HeaderKey.INSTANT_TIME: inflight}, b"\x00" * 400)
    log.write_bytes(log.read_bytes() + block[: len(block) // 2])
    out = tmp_path / "x.parquet"
    code, _, err = run("read", str(table), "--output", str(out))
    assert code == 0, err
    expected = sum(b.num_rows for b in hudi.HudiTableBuilder(str(table)).build().read())
    assert pq.read_table(out).num_rows == expected == 8


def test_torn_block_of_a_committed_instant_still_fails(hudi_table, tmp_path: Path) -> None:
    from hoodied.hoodie.log import BlockType, HeaderKey, encode_block

    table = hudi_table("mor/avro/v6_trips_8i1u")
    log = _only_log_file(table)
    committed = sorted(p.name.split(".")[0] for p in (table / ".hoodie").glob("*.deltacommit"))[-1]
    block = encode_block(BlockType.AVRO_DATA, {HeaderKey.INSTANT_TIME: committed}, b"\x00" * 400)
    log.write_bytes(log.read_bytes() + block[: len(block) // 2])
    code, _, err = run("read", str(table), "--output", str(tmp_path / "x.parquet"))
    assert code == EXIT_CORRUPT
    assert_one_line_error(err, log.name, "truncated")


def test_bad_as_of_and_missing_output_folder_are_usage_errors(shared_table, tmp_path: Path) -> None:
    table = shared_table("cow/v8_nonpartitioned")
    code, _, err = run("read", str(table), "--output", str(tmp_path / "x.parquet"), "--as-of", "yesterday")
    assert code == 2 and "yesterday" in err
    code, _, err = run("read", str(table), "--output", str(tmp_path / "missing" / "x.parquet"))
    assert code == 2 and "does not exist" in err


def test_export_is_readable_by_others(shared_table, tmp_path: Path) -> None:
    table = shared_table("cow/v8_nonpartitioned")
    old = os.umask(0o022)
    try:
        code, _, err = run("read", str(table), "--output", str(tmp_path / "x.parquet"))
    finally:
        os.umask(old)
    assert code == 0, err
    assert (tmp_path / "x.parquet").stat().st_mode & 0o777 == 0o644


def test_partial_update_mode_is_refused(hudi_table, tmp_path: Path) -> None:
    table = hudi_table("mor/avro/v8_trips_8i3u1d")  # its latest slices have log files to merge
    props = table / ".hoodie/hoodie.properties"
    props.write_text(props.read_text() + "hoodie.table.partial.update.mode=IGNORE_DEFAULTS\n")
    code, _, err = run("read", str(table), "--output", str(tmp_path / "x.parquet"))
    assert code == EXIT_UNSUPPORTED
    assert_one_line_error(err, "partial update mode IGNORE_DEFAULTS")


def test_inspect_reports_metadata_table_upkeep(shared_table) -> None:
    table = shared_table("mor/avro/v8_trips_8i3u1d")
    code, out, _ = run("inspect", str(table), "--json")
    assert code == 0
    health = json.loads(out)["metadata_table"]["timeline"]
    # the MDT compacted at ...130942; the delta commit 130911 completed after it (131727 > 131219) but
    # was requested before it, so Hudi's compaction trigger (requested times) does not count it
    assert health == {
        "last_compaction": "20251220210130942",
        "delta_commits_since_compaction": 0,
        "last_clean": None,
        "pending": [],
    }
    code, text, _ = run("inspect", str(table))
    assert "metadata upkeep last compaction 20251220210130942, 0 delta commits since" in text


@pytest.mark.parametrize("source", ["file", "environment"])
def test_config_check_never_shows_the_redis_password(
    source: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = "redis://hoodied:s3cr3t-pa55@127.0.0.1:6379/0"
    settings = tmp_path / "hoodied.yaml"
    if source == "file":
        settings.write_text(f"lock:\n  url: {url}\n")
    else:
        settings.write_text("concurrency:\n  workers: 2\n")
        monkeypatch.setenv("HOODIED_LOCK__URL", url)
    for extra in ([], ["--print"]):
        code, out, err = run("config", "check", *extra, str(settings))
        assert code == 0, err
        assert "s3cr3t" not in out + err and "redis://hoodied:***@127.0.0.1:6379/0" in out


@pytest.mark.parametrize(
    "command",
    [["rollback", "{table}", "--instant"], ["execute", "{table}", "--instant"],
     ["read", "{table}", "--output", "{out}", "--as-of"]],
    ids=["rollback", "execute", "read"],
)
def test_a_malformed_instant_time_is_a_usage_error(hudi_table, tmp_path: Path, command: list[str]) -> None:
    table = hudi_table("mor/avro/v8_trips_8i3u1d")  # a pending compaction: something to run
    before = tree_digest(table)
    args = [arg.format(table=table, out=tmp_path / "x.parquet") for arg in command]
    for value in ("notatime", "2024010112", "2024-01-01T00:00:00"):
        code, _, err = run(*args, value)
        assert code == 2, err
        assert f"{value!r} is not an instant time" in err
    assert tree_digest(table) == before


def test_archive_and_schedule_clean_take_hudis_other_key_names(hudi_table) -> None:
    table = hudi_table("cow/v8_nonpartitioned")
    timeline = tree_digest(table / ".hoodie" / "timeline")
    code, out, err = run("archive", str(table), "-o", "hoodie.cleaner.commits.retained=1",
                         "-o", "hoodie.clean.hours.retained=5", "--dry-run", "--json")
    assert code == 0, err
    assert json.loads(out)["dry_run"] is True
    assert tree_digest(table / ".hoodie" / "timeline") == timeline  # dry runs: no instant written
    code, out, err = run("schedule", "clean", str(table), "-o", "hoodie.clean.failed.writes.policy=LAZY",
                         "--dry-run", "--json")
    assert code == 0, err
    assert json.loads(out)["planned"] is False and tree_digest(table / ".hoodie" / "timeline") == timeline
    code, _, err = run("archive", str(table), "-o", "hoodie.cleaner.commits.retaind=1", "--dry-run")
    assert code == 2 and "hoodie.cleaner.commits.retaind: not an archival option" in err
