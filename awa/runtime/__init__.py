"""The worker runtime: dispatch, execution, completion, heartbeats, maintenance."""
