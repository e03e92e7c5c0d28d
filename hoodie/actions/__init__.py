"""Spark-free rules a planner and its executor share, per table service (Hudi's ``table.action``)."""
