"""Executors run table-service plans (on PySpark for the data-rewriting services) and commit them.

They depend on ``hoodie`` only. The face holds the executors that run in the driving process
alone (clean, rollback, archival): importing ``hoodied.executors`` must not import pyspark, so the Spark
executors (``compaction``, ``log_compaction``, ``clustering``, ``indexing``, with ``engine`` and
``attempt``) are imported by their module path, by the process that runs a Spark job.
"""

from hoodied.executors.archival import ArchivalResult, execute_archival
from hoodied.executors.clean import CleanResult, execute_clean
from hoodied.executors.rollback import RollbackResult, execute_rollback

__all__ = [
    "ArchivalResult",
    "CleanResult",
    "RollbackResult",
    "execute_archival",
    "execute_clean",
    "execute_rollback",
]
