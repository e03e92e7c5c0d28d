"""Planners decide what table-service work a table needs and write the plans.

They depend on ``hoodie`` only. The first planners arrive with the clean, compaction,
log compaction and clustering services.
"""

__all__: list[str] = []
