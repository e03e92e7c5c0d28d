"""hoodie.properties: the Java-properties grammar, checksums, versions, and every real fixture."""

from __future__ import annotations

import json
import pickle
import shutil
import zlib
from datetime import UTC
from pathlib import Path

import pytest

from hoodied.hoodie.errors import HoodieFormatError, TableNotFoundError, UnsupportedTableError
from hoodied.hoodie.properties import (
    PROPERTIES_BACKUP_FILE,
    PROPERTIES_FILE,
    MergeMode,
    TableConfig,
    TableType,
    format_java_properties,
    load_table_config,
    parse_java_properties,
    read_table_properties,
    table_checksum,
)
from hoodied.hoodie.storage import LocalStorage
from tests.helpers.fixtures import ALL_FIXTURES
from tests.helpers.hudi_index import INDEX

LANCE = "cow/v9_lance_nonpartitioned"


def props_path(table: Path) -> Path:
    return table / ".hoodie" / "hoodie.properties"


def rewrite(table: Path, **changes: str | None) -> None:
    """Rewrite hoodie.properties with some keys changed (None removes), as a Java writer would."""
    props = parse_java_properties(props_path(table).read_text(encoding="latin-1"))
    for key, value in changes.items():
        key = key.replace("__", ".")
        if value is None:
            props.pop(key, None)
        else:
            props[key] = value
    props_path(table).write_text(format_java_properties(props, ["Updated by a test"]), encoding="latin-1")


# ------------------------------------------------------------------ grammar


def test_parse_separators_and_whitespace() -> None:
    text = "a=1\nb:2\nc 3\n  d  =  4  \ne\t:\t5\nf\ng=\nh = = x\n"
    assert parse_java_properties(text) == {
        "a": "1",
        "b": "2",
        "c": "3",
        "d": "4  ",
        "e": "5",
        "f": "",
        "g": "",
        "h": "= x",
    }


def test_parse_comments_blank_lines_and_line_endings() -> None:
    text = "# comment\r\n  ! also a comment\r\n\r\nkey=value\rnext=1\n#tail\\\nnot.continued=2"
    assert parse_java_properties(text) == {"key": "value", "next": "1", "not.continued": "2"}


def test_parse_escapes() -> None:
    text = r"k\:e\=y\ 1=a\tb\nc\rd\fe\\f\u00e9\u20AC\q" + "\n" + r"url=http\://x\:1/a"
    assert parse_java_properties(text) == {"k:e=y 1": "a\tb\nc\rd\fe\\f\u00e9\u20acq", "url": "http://x:1/a"}


def test_parse_line_continuation() -> None:
    text = "list=a,\\\n    b,\\\n\t  c\nodd=x\\\\\nnext=y\n"
    assert parse_java_properties(text) == {"list": "a,b,c", "odd": "x\\", "next": "y"}


def test_parse_later_keys_win_and_malformed_unicode_fails() -> None:
    assert parse_java_properties("a=1\na=2\n") == {"a": "2"}
    with pytest.raises(ValueError, match="uxxxx"):
        parse_java_properties("a=\\u12G4\n")


def test_format_escapes_like_java() -> None:
    text = format_java_properties({"a b": " lead  inner", "k": "x:y=z#!é\t"}, ["Properties saved"])
    assert text == "#Properties saved\na\\ b=\\ lead  inner\nk=x\\:y\\=z\\#\\!\\u00E9\\t\n"


def test_format_parse_round_trip() -> None:
    props = {
        "hoodie.table.create.schema": json.dumps({"type": "record", "name": "r", "fields": []}),
        " spaced key ": " value with trailing space ",
        "unicode": "\u00e9\u4e2d\U0001f600",
        "controls": "\n\r\t\f\\",
        "empty": "",
        "#not-a-comment": "!x",
    }
    assert parse_java_properties(format_java_properties(props, ["c1", "c2"])) == props


def test_checksum_is_crc32_of_database_dot_name() -> None:
    db = "hoodie.database.name"
    assert table_checksum({"hoodie.table.name": "v8_trips_8i3u1d", db: "default"}) == 1197752875
    assert table_checksum({"hoodie.table.name": "v6_trips_8i3d", db: "default"}) == 3180720914
    # no database: an empty string before the dot (metadata tables)
    assert table_checksum({"hoodie.table.name": "t"}) == zlib.crc32(b".t")


# ------------------------------------------------------------------ every fixture


@pytest.mark.parametrize("fid", sorted(ALL_FIXTURES))
def test_fixture_config_matches_index(fid: str, shared_table) -> None:
    table = shared_table(fid)
    storage = LocalStorage(str(table))
    expected = INDEX.get(fid)
    if fid == LANCE:
        with pytest.raises(UnsupportedTableError, match="base file format LANCE is not supported"):
            load_table_config(storage)
        props, _ = read_table_properties(storage)
        config = TableConfig.from_props(props)
    else:
        config = load_table_config(storage)
    assert str(table_checksum(config.props)) == config.props["hoodie.table.checksum"]
    layout = 1 if config.version == 6 else 2
    assert config.timeline_layout == layout
    assert config.timeline_path == (".hoodie" if layout == 1 else ".hoodie/timeline")
    assert config.history_path == (".hoodie/archived" if layout == 1 else ".hoodie/timeline/history")
    assert config.has_completion_time == (layout == 2)
    assert config.timezone == "LOCAL"
    if config.create_schema is not None:
        assert json.loads(config.create_schema)["type"] == "record"
    if expected is None:
        pytest.skip(f"{fid} is not described in INDEX.md")
    assert config.version == expected.version
    mor = expected.table_type == "MOR"
    assert config.table_type is (TableType.MERGE_ON_READ if mor else TableType.COPY_ON_WRITE)
    assert config.is_mor == (expected.table_type == "MOR")
    assert config.partition_fields == expected.partition_fields
    if expected.hive_style is not None:
        assert config.hive_style_partitioning == expected.hive_style
    assert config.record_key_fields == expected.record_key
    assert config.ordering_fields == expected.ordering
    if expected.merge_mode:
        assert config.merge_mode.value == expected.merge_mode
    assert config.base_file_format == expected.base_format
    assert config.populate_meta_fields == expected.populate_meta_fields
    assert config.metadata_partitions == expected.mdt_partitions
    assert config.metadata_table_available == ("files" in expected.mdt_partitions)


def test_config_pickles(shared_table) -> None:
    config = load_table_config(LocalStorage(str(shared_table("mor/avro/v8_trips_8i3u1d"))))
    copy = pickle.loads(pickle.dumps(config))
    assert copy == config and copy.props == config.props and hash(copy) == hash(config)


@pytest.mark.parametrize("fid", sorted(f for f in ALL_FIXTURES if INDEX.get(f) and INDEX[f].mdt_partitions))
def test_metadata_table_config_loads_only_as_metadata_table(fid: str, shared_table) -> None:
    mdt = LocalStorage(str(shared_table(fid))).child(".hoodie/metadata")
    config = load_table_config(mdt, metadata_table=True)
    assert config.base_file_format == "HFILE"
    assert config.is_mor and config.merge_mode is MergeMode.CUSTOM
    assert config.database == "" and config.name.endswith("_metadata")
    with pytest.raises(UnsupportedTableError, match="HFILE is not supported"):
        load_table_config(mdt)


def test_v6_merge_mode_from_payload_and_v8_inference(hudi_table) -> None:
    table = hudi_table("mor/avro/v6_trips_8i1u")
    storage = LocalStorage(str(table))
    assert load_table_config(storage).merge_mode is MergeMode.COMMIT_TIME_ORDERING  # OverwriteWithLatest
    default_payload = "org.apache.hudi.common.model.DefaultHoodieRecordPayload"
    rewrite(table, hoodie__compaction__payload__class=default_payload)
    assert load_table_config(storage).merge_mode is MergeMode.EVENT_TIME_ORDERING
    rewrite(table, hoodie__compaction__payload__class="com.example.MyPayload")
    config = load_table_config(storage)
    assert config.merge_mode is MergeMode.CUSTOM and config.payload_class == "com.example.MyPayload"
    rewrite(table, hoodie__compaction__payload__class=None)
    assert load_table_config(storage).merge_mode is MergeMode.COMMIT_TIME_ORDERING

    v8 = hudi_table("cow/v8_nonpartitioned")
    v8_storage = LocalStorage(str(v8))
    rewrite(v8, hoodie__record__merge__mode=None)
    assert load_table_config(v8_storage).merge_mode is MergeMode.EVENT_TIME_ORDERING  # precombine set
    rewrite(v8, hoodie__table__precombine__field=None)
    config = load_table_config(v8_storage)
    assert config.ordering_fields == () and config.merge_mode is MergeMode.COMMIT_TIME_ORDERING


def test_ordering_fields_partition_types_and_timezone(hudi_table) -> None:
    table = hudi_table("cow/v9_txns_simple_nometa")
    storage = LocalStorage(str(table))
    rewrite(
        table,
        hoodie__table__ordering__fields="txn_ts, seq",
        hoodie__table__partition__fields="region:SIMPLE,day:TIMESTAMP",
        hoodie__table__timeline__timezone="UTC",
    )
    config = load_table_config(storage)
    assert config.ordering_fields == ("txn_ts", "seq")
    assert config.partition_fields == ("region", "day")
    assert config.timezone == "UTC" and config.tzinfo is UTC
    rewrite(table, hoodie__table__timeline__timezone="Mars/Olympus")
    with pytest.raises(HoodieFormatError, match="hoodie.table.timeline.timezone"):
        load_table_config(storage)


# ------------------------------------------------------------------ bad input


def test_missing_properties_is_not_a_table(tmp_path: Path) -> None:
    (tmp_path / ".hoodie").mkdir()
    with pytest.raises(TableNotFoundError, match=r"not a Hudi table \(no .hoodie/hoodie.properties\)"):
        load_table_config(LocalStorage(str(tmp_path)))


def test_backup_is_used_when_properties_is_missing(hudi_table) -> None:
    table = hudi_table("cow/v8_nonpartitioned")
    shutil.move(props_path(table), table / PROPERTIES_BACKUP_FILE)
    config = load_table_config(LocalStorage(str(table)))
    assert config.name == "v8_nonpartitioned"


def test_corrupt_properties_fall_back_to_a_valid_backup(hudi_table) -> None:
    table = hudi_table("cow/v8_nonpartitioned")
    shutil.copy(props_path(table), table / PROPERTIES_BACKUP_FILE)
    props_path(table).write_bytes(b"\x00\x01garbage\xff\n")
    assert load_table_config(LocalStorage(str(table))).name == "v8_nonpartitioned"


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"", "empty properties file"),
        (b"\x00\x01\x02garbage\xff\xfe", "hoodie.table.name is missing"),
        (b"hoodie.table.name=x\nhoodie.table.type=MERGE_ON_READ\nbad=\\u00zz\n", "not a valid properties"),
    ],
)
def test_corrupt_properties_raise_format_error(hudi_table, content: bytes, problem: str) -> None:
    table = hudi_table("cow/v8_nonpartitioned")
    props_path(table).write_bytes(content)
    with pytest.raises(HoodieFormatError, match=problem) as err:
        load_table_config(LocalStorage(str(table)))
    assert str(err.value).startswith(PROPERTIES_FILE) and "\n" not in str(err.value)


def test_checksum_mismatch(hudi_table) -> None:
    table = hudi_table("mor/avro/v8_trips_8i3u1d")
    rewrite(table, hoodie__table__name="renamed_by_hand")
    with pytest.raises(HoodieFormatError, match=r"checksum mismatch \(hoodie.table.checksum=1197752875"):
        load_table_config(LocalStorage(str(table)))
    # no checksum at all (old tables) is accepted, as Hudi does
    rewrite(table, hoodie__table__checksum=None)
    assert load_table_config(LocalStorage(str(table))).name == "renamed_by_hand"


@pytest.mark.parametrize("version", ["5", "7", "10"])
def test_unsupported_table_versions(hudi_table, version: str) -> None:
    table = hudi_table("cow/v8_nonpartitioned")
    rewrite(table, hoodie__table__version=version)
    with pytest.raises(UnsupportedTableError) as err:
        load_table_config(LocalStorage(str(table)))
    assert f"table version {version} is not supported (hoodied reads 6, 8, 9)" in str(err.value)


def test_version_and_layout_must_agree(hudi_table) -> None:
    table = hudi_table("cow/v8_nonpartitioned")
    rewrite(table, hoodie__timeline__layout__version="1")
    with pytest.raises(UnsupportedTableError, match="timeline layout 1 with table version 8"):
        load_table_config(LocalStorage(str(table)))
    rewrite(table, hoodie__timeline__layout__version="two")
    with pytest.raises(HoodieFormatError, match="hoodie.timeline.layout.version is not a number"):
        load_table_config(LocalStorage(str(table)))


@pytest.mark.parametrize("fmt", ["ORC", "HFILE", "LANCE"])
def test_non_parquet_base_formats_are_refused(hudi_table, fmt: str) -> None:
    table = hudi_table("cow/v8_nonpartitioned")
    rewrite(table, hoodie__table__base__file__format=fmt)
    with pytest.raises(UnsupportedTableError, match=f"base file format {fmt} is not supported"):
        load_table_config(LocalStorage(str(table)))


def test_lance_fixture_is_refused_with_one_line(shared_table) -> None:
    with pytest.raises(UnsupportedTableError) as err:
        load_table_config(LocalStorage(str(shared_table(LANCE))))
    assert str(err.value) == (
        ".hoodie/hoodie.properties: base file format LANCE is not supported (hoodied reads PARQUET)"
    )
