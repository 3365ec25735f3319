"""Stand-in for ``sgl_kernel_npu.mamba``."""
