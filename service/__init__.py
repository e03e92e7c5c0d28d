"""The hoodied daemon and its command line, over the format (``hoodie``), ``planners`` and ``executors``.

- ``config``, ``locks``, ``logs``: the daemon's settings, the table locks (file or Redis), logging;
- ``operations``: the use cases the CLI and the daemon share (execute pending instants, roll back a
  failed attempt: the one owner of rollback-then-retry);
- ``spark_jobs``: the Spark table services, run by module name so pyspark loads only for a job;
- ``daemon``: the loop, its jobs, what it serves over HTTP;
- ``cli``: the ``hoodied`` command (``cli.main:main``).

Each layer imports only the ones listed above it (an import-linter contract keeps it so). The face is
the settings, which every entry point reads.
"""

from hoodied.service.config import ConfigError, DaemonConfig, Policy, load_config

__all__ = ["ConfigError", "DaemonConfig", "Policy", "load_config"]
