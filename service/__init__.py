"""The hoodied daemon and its command line: configuration, logging, locks, loop, metrics."""

__all__: list[str] = []
