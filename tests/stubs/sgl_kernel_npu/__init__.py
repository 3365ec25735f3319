"""CPU stand-in for sgl-kernel-npu (tests only; the real package ships as per-CANN release wheels).

Only what SGLang 0.5.23's Ascend hybrid linear-attention backend imports exists here. Each kernel is
a plain function with the real one's parameters that records its calls (see ``mamba``).
"""
