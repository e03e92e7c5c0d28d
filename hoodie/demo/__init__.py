"""A small table writer for the demo and the tests: not on any service path."""
