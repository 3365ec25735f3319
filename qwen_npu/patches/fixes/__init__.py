"""The runtime fixes, one module per registry entry (``registry.PATCHES``), each with ``apply()``.

The framework beside them (``core``, ``hook``, ``state``, ``registry``) is what every fix uses;
these modules are what a maintainer deletes when SGLang fixes the bug upstream.
"""
