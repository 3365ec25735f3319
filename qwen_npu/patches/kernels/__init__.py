"""Triton kernels the patches bind in place of an upstream one.

Why a package of their own: they import torch and triton, which exist only in the engine and test
environments, while ``qwen_npu.patches`` must import with the standard library alone (the .pth
hook runs in every Python process). A fix imports a kernel module here lazily, when it rebinds.
"""
