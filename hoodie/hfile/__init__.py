"""HFile, the base-file format of the metadata table: a reader and a writer."""
