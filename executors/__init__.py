"""Executors run table-service plans (on PySpark for the data-rewriting services) and commit them.

They depend on ``hoodie`` only.
"""

__all__: list[str] = []
