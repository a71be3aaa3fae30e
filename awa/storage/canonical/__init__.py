"""Hot-path SQL of the canonical engine, one module per concern (enqueue, execution, maintenance)."""
