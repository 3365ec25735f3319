"""Triton kernels a fix binds in place of an upstream one (torch, triton: imported lazily)."""
