"""Hudi's alternative key names: the registry's rule (the key's own name wins, then its alternatives
in order, as ``HoodieConfig.getRawValue`` reads them) and ``hoodie.properties`` written with the older
names Hudi still reads (``hoodie.table.ro.file.format``, ``hoodie.table.rt.file.format``)."""

from __future__ import annotations

import pytest

from hoodied.hoodie.basefile import DEFAULT_BLOCK_SIZE, WRITE_KEYS
from hoodied.hoodie.bloom import DEFAULT_FPP, DEFAULT_MAX_ENTRIES, DEFAULT_NUM_ENTRIES
from hoodied.hoodie.config_keys import HUDI_KEYS, ConfigKey, by_key
from hoodied.hoodie.errors import UnsupportedTableError
from hoodied.hoodie.metadata.index_build import FileGroupSizing
from hoodied.hoodie.properties import KEYS, load_table_config
from hoodied.hoodie.storage import LocalStorage
from tests.hoodie.test_properties import rewrite

RETAINED = HUDI_KEYS.CLEANER_COMMITS_RETAINED


def test_the_keys_own_name_wins_then_its_alternatives_in_order() -> None:
    key = ConfigKey("hoodie.a", "0", alternatives=("hoodie.b", "hoodie.c"))
    assert key.get({}) == "0"
    assert key.get({"hoodie.c": "3"}) == "3"
    assert key.get({"hoodie.c": "3", "hoodie.b": "2"}) == "2"
    assert key.get({"hoodie.c": "3", "hoodie.b": "2", "hoodie.a": "1"}) == "1"


def test_by_key_names_each_key_once_and_keeps_other_names() -> None:
    options = {"hoodie.cleaner.commits.retained": "3", "hoodie.keep.min.commits": "4", "hoodie.other": "x"}
    assert by_key(options, [RETAINED, HUDI_KEYS.KEEP_MIN_COMMITS]) == {
        "hoodie.clean.commits.retained": "3", "hoodie.keep.min.commits": "4", "hoodie.other": "x",
    }
    both = {"hoodie.cleaner.commits.retained": "3", "hoodie.clean.commits.retained": "5"}
    assert by_key(both, [RETAINED]) == {"hoodie.clean.commits.retained": "5"}


def test_every_name_belongs_to_one_key() -> None:
    entries = [v for v in vars(HUDI_KEYS).values() if isinstance(v, ConfigKey)]
    entries += [v for v in vars(KEYS).values() if isinstance(v, ConfigKey)]
    names = [name for entry in entries for name in entry.names]
    assert len(names) == len(set(names))


def test_base_file_format_under_its_older_name(hudi_table) -> None:
    table = hudi_table("cow/v8_nonpartitioned")
    rewrite(table, hoodie__table__base__file__format=None, hoodie__table__ro__file__format="ORC")
    with pytest.raises(UnsupportedTableError, match="base file format ORC is not supported"):
        load_table_config(LocalStorage(str(table)))
    # both names: the key's own name wins, as in Hudi
    rewrite(table, hoodie__table__base__file__format="PARQUET")
    assert load_table_config(LocalStorage(str(table))).base_file_format == "PARQUET"


def test_log_file_format_under_its_older_name(hudi_table) -> None:
    table = hudi_table("cow/v8_nonpartitioned")
    rewrite(table, hoodie__table__log__file__format=None, hoodie__table__rt__file__format="LANCE_LOG")
    assert load_table_config(LocalStorage(str(table))).log_file_format == "LANCE_LOG"
    rewrite(table, hoodie__table__log__file__format="HOODIE_LOG")
    assert load_table_config(LocalStorage(str(table))).log_file_format == "HOODIE_LOG"


def test_record_index_sizing_under_both_of_its_names() -> None:
    """Hudi 1.1 names the record index's sizing hoodie.metadata.global.record.level.index.*, 0.14-1.0
    hoodie.metadata.record.index.*: a table's hoodie.properties may hold either, or both."""
    older = "hoodie.metadata.record.index.max.filegroup.count"
    newer = "hoodie.metadata.global.record.level.index.max.filegroup.count"
    assert FileGroupSizing.from_options({}).max_count == 10_000
    assert FileGroupSizing.from_options({older: "40"}).max_count == 40
    assert FileGroupSizing.from_options({newer: "50"}).max_count == 50
    assert FileGroupSizing.from_options({older: "40", newer: "50"}).max_count == 50


def test_base_file_keys_are_registry_entries_with_the_writers_defaults() -> None:
    assert WRITE_KEYS.BLOCK_SIZE is HUDI_KEYS.PARQUET_BLOCK_SIZE
    assert WRITE_KEYS.BLOCK_SIZE.default == str(DEFAULT_BLOCK_SIZE)
    assert WRITE_KEYS.BLOOM_ENTRIES.default == str(DEFAULT_NUM_ENTRIES)
    assert WRITE_KEYS.BLOOM_MAX_ENTRIES.default == str(DEFAULT_MAX_ENTRIES)
    assert float(WRITE_KEYS.BLOOM_FPP.default or "") == DEFAULT_FPP
