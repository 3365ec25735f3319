"""The runtime fixes, one module per registry entry, each with ``apply()``: deleted with it."""
