"""The metadata table (``.hoodie/metadata``): reading it and writing its commits.

The face: the reader (``MetadataTable``; Hudi's ``HoodieBackedTableMetadata``), the writer of
a data commit's MDT delta commit (``write_commit_to_metadata_table``, ``MetadataWriter``;
``HoodieBackedTableMetadataWriter``), and the MDT side of a data rollback
(``rollback_mdt_deltacommit``, ``check_data_rollback``, ``rollback_mdt_for_data_rollback``).
Record encodings, index builds and upkeep are imported by their module path.
"""

from hoodied.hoodie.metadata.commit import write_commit_to_metadata_table
from hoodied.hoodie.metadata.reader import METADATA_FOLDER, MetadataTable, metadata_table_in_use
from hoodied.hoodie.metadata.rollback import (
    check_data_rollback,
    rollback_mdt_deltacommit,
    rollback_mdt_for_data_rollback,
)
from hoodied.hoodie.metadata.writer import MetadataWriter

__all__ = [
    "METADATA_FOLDER",
    "MetadataTable",
    "MetadataWriter",
    "check_data_rollback",
    "metadata_table_in_use",
    "rollback_mdt_deltacommit",
    "rollback_mdt_for_data_rollback",
    "write_commit_to_metadata_table",
]
