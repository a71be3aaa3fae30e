"""Storage engines: every SQL statement of the hot path."""
