"""The Hudi table-format layer of hoodied: a pure library (no Spark, no Redis, no asyncio).

It reads (and, for the services, writes) Apache Hudi tables of table versions 6, 8 and 9
exactly as Apache Hudi lays them out: ``hoodie.properties``, the timeline, file groups and
file slices, log files, base files, HFiles and the metadata table.
"""

__all__: list[str] = []
