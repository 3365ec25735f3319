"""Facts about the Ascend hardware the engine runs on, apart from any checkpoint. Stdlib only."""
