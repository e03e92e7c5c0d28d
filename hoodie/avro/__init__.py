"""Avro as Hudi writes it: object containers, schemas, and the Arrow <-> Avro bridges."""
