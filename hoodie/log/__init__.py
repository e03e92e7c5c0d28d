"""Hudi log files: the public face of the log format.

Framing, headers, reading and writing live in ``hoodie.log.frame``; block contents (Avro,
parquet, delete, command, HFile) in ``hoodie.log.blocks``; the Avro-to-Arrow mapping and
decoder in ``hoodie.avro.arrow``. Import from here.

Typical use::

    for block in read_log_blocks(storage, "city=sf/.abc-0_2025....log.1_0-1-1"):
        if block.block_type is BlockType.AVRO_DATA:
            table = avro_block_to_arrow(block)
        elif block.block_type is BlockType.DELETE:
            keys = delete_block_records(block)
        elif is_rollback_command(block):
            ...  # ignore the blocks of block.target_instant_time (table version 6)
"""

from hoodied.hoodie.avro.arrow import avro_schema_to_arrow
from hoodied.hoodie.log.blocks import (
    AVRO_DATA_BLOCK_VERSION,
    DELETE_BLOCK_VERSION,
    DeleteRecord,
    avro_block_records,
    avro_block_schema,
    avro_block_to_arrow,
    delete_block_records,
    encode_avro_data_block,
    encode_delete_block,
    encode_parquet_data_block,
    hfile_block_content,
    is_rollback_command,
    parquet_block_table,
)
from hoodied.hoodie.log.frame import (
    LOG_FORMAT_VERSION,
    MAGIC,
    BlockType,
    CommandType,
    HeaderKey,
    LogBlock,
    decode_record_positions,
    encode_block,
    encode_command_block,
    encode_record_positions,
    read_log_blocks,
    write_log_file,
)

__all__ = [
    "AVRO_DATA_BLOCK_VERSION",
    "DELETE_BLOCK_VERSION",
    "LOG_FORMAT_VERSION",
    "MAGIC",
    "BlockType",
    "CommandType",
    "DeleteRecord",
    "HeaderKey",
    "LogBlock",
    "avro_block_records",
    "avro_block_schema",
    "avro_block_to_arrow",
    "avro_schema_to_arrow",
    "decode_record_positions",
    "delete_block_records",
    "encode_avro_data_block",
    "encode_block",
    "encode_command_block",
    "encode_delete_block",
    "encode_parquet_data_block",
    "encode_record_positions",
    "hfile_block_content",
    "is_rollback_command",
    "parquet_block_table",
    "read_log_blocks",
    "write_log_file",
]
