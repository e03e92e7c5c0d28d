"""Base files carry the codec and bloom filter Hudi would write: the table's config, else the default."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hoodied.hoodie.basefile import (
    HUDI_DEFAULTS,
    KEY_BLOOM,
    KEY_BLOOM_TYPE,
    BaseFileSettings,
    read_footer,
    with_meta_columns,
    write_base_file,
)
from hoodied.hoodie.bloom import BloomFilter, BloomFilterType, bit_size
from hoodied.hoodie.errors import UnsupportedTableError
from hoodied.hoodie.properties import TableConfig, load_table_config
from hoodied.hoodie.storage import LocalStorage


def config(version: int, **props: str) -> TableConfig:
    return TableConfig.from_props({"hoodie.table.name": "t", "hoodie.table.version": str(version), **props})


def write(tmp_path: Path, settings: BaseFileSettings) -> tuple[pq.FileMetaData, BloomFilter, str | None]:
    keys = pa.array([f"key-{i:05d}" for i in range(200)])
    data = with_meta_columns(
        pa.table({"id": keys}), record_keys=keys, partition_path="p", file_name="f.parquet",
        commit_time="20261126000000000",
    )
    storage = LocalStorage(str(tmp_path))
    write_base_file(storage, "p/f.parquet", data, avro_schema="{}", settings=settings)
    footer = read_footer(storage, "p/f.parquet")
    type_code = footer.get(KEY_BLOOM_TYPE)  # Hudi reads a filter without one as SIMPLE
    bloom = BloomFilter.deserialize(footer[KEY_BLOOM], type_code or "SIMPLE")
    assert bloom.might_contain_many(keys).all()
    return pq.ParquetFile(tmp_path / "p" / "f.parquet").metadata, bloom, type_code


def codecs(md: pq.FileMetaData) -> set[str]:
    return {md.row_group(0).column(i).compression for i in range(md.num_columns)}


@pytest.mark.parametrize("version", [6, 8, 9])
def test_version_default_is_hudis(version: int, tmp_path: Path) -> None:
    """0.14/0.15, 1.0 and 1.1 write gzip with a DYNAMIC_V0 filter of 60000 entries at fpp 1e-9."""
    settings = BaseFileSettings.for_table(config(version))
    assert settings == HUDI_DEFAULTS
    md, bloom, type_code = write(tmp_path, settings)
    assert codecs(md) == {"GZIP"}
    assert type_code == "DYNAMIC_V0"
    assert (bloom.nr, bloom.vector_size) == (60_000, bit_size(60_000, 1e-9))


def test_table_config_wins(tmp_path: Path) -> None:
    settings = BaseFileSettings.for_table(
        config(
            9,
            **{
                "hoodie.parquet.compression.codec": "SNAPPY",
                "hoodie.bloom.index.filter.type": "SIMPLE",
                "hoodie.index.bloom.num_entries": "1000",
                "hoodie.index.bloom.fpp": "0.0001",
            },
        )
    )
    assert (settings.codec, settings.bloom_type) == ("snappy", BloomFilterType.SIMPLE)
    md, bloom, type_code = write(tmp_path, settings)
    assert codecs(md) == {"SNAPPY"}
    assert type_code is None  # as Hudi writes a SIMPLE filter
    assert bloom.vector_size == bit_size(1000, 0.0001)


def test_dynamic_filter_grows_to_the_configured_bound(tmp_path: Path) -> None:
    settings = BaseFileSettings.for_table(
        config(
            6,
            **{
                "hoodie.parquet.compression.codec": "zstd",
                "hoodie.index.bloom.num_entries": "50",
                "hoodie.bloom.index.filter.dynamic.max.entries": "150",
            },
        )
    )
    md, bloom, _ = write(tmp_path, settings)  # 200 keys: rows of 50 up to 150, then round-robin
    assert codecs(md) == {"ZSTD"}
    assert len(bloom.rows) == 3


def test_block_size_is_the_tables_own_or_hudis_default() -> None:
    assert BaseFileSettings.for_table(config(9)).block_size == 120 * 1024 * 1024
    own = config(9, **{"hoodie.parquet.block.size": "1048576"})
    assert BaseFileSettings.for_table(own).block_size == 1048576


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("hoodie.parquet.compression.codec", "lzo", "hoodie.parquet.compression.codec='lzo'"),
        ("hoodie.bloom.index.filter.type", "BLOCKED", "hoodie.bloom.index.filter.type='BLOCKED'"),
        ("hoodie.index.bloom.num_entries", "many", "hoodie.index.bloom.num_entries='many'"),
        ("hoodie.index.bloom.fpp", "2", "hoodie.index.bloom.fpp=2.0"),
        ("hoodie.parquet.block.size", "0", "hoodie.parquet.block.size='0'"),
    ],
)
def test_settings_hoodied_cannot_write_are_refused(key: str, value: str, match: str) -> None:
    with pytest.raises(UnsupportedTableError, match=match):
        BaseFileSettings.for_table(config(9, **{key: value}))


@pytest.mark.parametrize(
    "fid", ["cow/v6_nonpartitioned", "cow/v8_nonpartitioned", "cow/v9_txns_nonpart_meta"]
)
def test_fixture_tables_get_the_codec_their_files_have(fid: str, shared_table) -> None:
    """What Hudi itself wrote into each version's fixture is what hoodied picks for it."""
    table = shared_table(fid)
    settings = BaseFileSettings.for_table(load_table_config(LocalStorage(str(table))))
    path = next(p for p in sorted(table.rglob("*.parquet")) if ".hoodie" not in p.parts)
    md = pq.ParquetFile(path).metadata
    assert codecs(md) == {settings.codec.upper()}
    footer = {k.decode(): v.decode() for k, v in (md.metadata or {}).items()}
    assert footer[KEY_BLOOM_TYPE] == settings.bloom_type.value
    bloom = BloomFilter.deserialize(footer[KEY_BLOOM], footer[KEY_BLOOM_TYPE])
    assert (bloom.nr, bloom.vector_size) == (settings.bloom_entries, bit_size(settings.bloom_entries, 1e-9))
