"""Spark-free rules a planner and its executor share (Hudi's ``org.apache.hudi.table.action``).

The face is the table-service vocabulary (``hoodie.actions.services``): which services exist
and which timeline action each is. The per-service rules (``clustering``, ``log_compaction``,
``write_schema``) are imported by their module path: they sit above the timeline and the
metadata table, and the timeline imports this face, so importing them here would be a cycle.
"""

from hoodied.hoodie.actions.services import TableService, is_table_service, service_of

__all__ = ["TableService", "is_table_service", "service_of"]
