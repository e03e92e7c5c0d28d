"""The Apache Hudi peer: one Spark session with one released Hudi bundle, driven over its standard
streams by ``tests.helpers.hudi_peer``.

It runs in the Apache Hudi lane's own environment (a pyspark that Hudi's bundles support, the bundle
jar on ``spark.jars``), never in hoodied's: it imports neither hoodied nor the tests. Each request is
one JSON line on standard input, each answer one JSON line on standard output (``{"ok": ...}`` or
``{"error": ...}`` with the JVM's message); Spark's own log goes to standard error. One process keeps
its JVM for a whole test module, so the lane pays Spark's start-up once per Hudi release.

Requests:
- ``write``: a Hudi Spark datasource write (``upsert``, ``insert``, ``delete``...) of ``records`` with
  ``options`` (the writer's settings: table type, keys, lock provider, services off...).
- ``read``: a Hudi Spark datasource read with ``options`` (snapshot, read-optimized, incremental, time
  travel, data skipping), an optional SQL ``where``, answered as sorted rows of ``columns``.
- ``sql``: one Spark SQL statement (Hudi's procedures: ``call run_compaction(...)``...), answered as rows.
- ``register``: ``CREATE TABLE name USING hudi LOCATION path``, for the procedures that take a name.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.types import LongType, StringType, StructField, StructType

SCHEMA = StructType([
    StructField("id", StringType(), False),
    StructField("part", StringType(), False),
    StructField("ts", LongType(), False),
    StructField("v", LongType(), True),
    StructField("note", StringType(), True),
])


def _jsonable(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def _rows(df: Any, columns: list[str] | None) -> list[list[Any]]:
    if columns:
        df = df.select(*columns)
    rows = [[_jsonable(v) for v in row] for row in df.collect()]
    rows.sort(key=lambda r: [str(v) for v in r])
    return rows


def serve(spark: SparkSession, out: Any) -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        kind = request.pop("request")
        try:
            if kind == "stop":
                print(json.dumps({"ok": None}), file=out, flush=True)
                return
            answer = handle(spark, kind, request)
            print(json.dumps({"ok": answer}), file=out, flush=True)
        except Exception as exc:  # noqa: BLE001 - every failure goes back to the test as an answer
            traceback.print_exc(file=sys.stderr)
            message = str(exc).strip().splitlines()
            print(json.dumps({"error": message[0] if message else type(exc).__name__,
                              "detail": str(exc)[:4000]}), file=out, flush=True)


def handle(spark: SparkSession, kind: str, request: dict[str, Any]) -> Any:
    if kind == "write":
        df = spark.createDataFrame([tuple(r[f.name] for f in SCHEMA.fields) for r in request["records"]],
                                   SCHEMA)
        df.write.format("hudi").options(**request["options"]).mode("append").save(request["path"])
        return len(request["records"])
    if kind == "read":
        df = spark.read.format("hudi").options(**request.get("options", {})).load(request["path"])
        if request.get("where"):
            df = df.where(request["where"])
        return _rows(df, request.get("columns"))
    if kind == "sql":
        return _rows(spark.sql(request["sql"]), None)
    if kind == "register":
        spark.sql(f"DROP TABLE IF EXISTS {request['name']}")
        spark.sql(f"CREATE TABLE {request['name']} USING hudi LOCATION '{request['path']}'")
        return request["name"]
    raise ValueError(f"unknown request {kind!r}")


def main() -> None:
    # The JVM inherits file descriptor 1 and Hudi prints to it: the answers get a descriptor of their
    # own, and everything else that writes to standard output lands on standard error.
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    conf = json.loads(sys.argv[1])
    builder = SparkSession.builder.appName("hudi-peer")
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    print(json.dumps({"ready": spark.version}), file=out, flush=True)
    serve(spark, out)
    spark.stop()


if __name__ == "__main__":
    main()
