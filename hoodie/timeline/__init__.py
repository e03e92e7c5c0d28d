"""The timeline of a Hudi table: instants, the active and archived timelines, plans, commit metadata."""
