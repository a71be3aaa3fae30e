"""awa_ops: diagnostics, the database exporter and generated artefacts for operators."""
