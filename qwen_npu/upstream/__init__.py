"""Reading SGLang's and sgl-kernel-npu's installed source without importing it: ``source`` (find,
parse, locate, fingerprint), ``kernels`` (what a Triton kernel module does). Standard library only.
"""
