"""Helpers shared by the tests: fixture tables, real servers, crash drivers, reference readers."""
