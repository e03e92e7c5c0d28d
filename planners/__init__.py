"""Planners decide what table-service work a table needs and write the plans.

They depend on ``hoodie`` only. One module per service (``clean``, ``compaction``,
``log_compaction``, ``clustering``) holds its settings, trigger, planner and scheduler; those
are imported by their module path, each service's names side by side. The face holds the
rollback planning every service shares (Hudi's ``BaseHoodieTableServiceClient`` rollback of a
failed attempt).
"""

from hoodied.planners.rollback import (
    FailedAttempt,
    find_failed_attempts,
    is_table_service,
    pending_rollback_for,
    schedule_rollback,
)

__all__ = [
    "FailedAttempt",
    "find_failed_attempts",
    "is_table_service",
    "pending_rollback_for",
    "schedule_rollback",
]
