"""The daemon: the loop, its jobs, and what it serves over HTTP."""
