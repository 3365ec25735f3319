"""qwen-npu: serve ModelSlim-quantized Qwen3.5/3.6 with MTP on SGLang on Ascend 910 (the parts:
docs/architecture.md). ``__version__`` is the installed distribution's, read lazily so that the
engine's start-up hook does not pay for the metadata scan."""

from importlib import metadata


def __getattr__(name: str) -> str:
    if name != "__version__":
        raise AttributeError(f"module 'qwen_npu' has no attribute {name!r}")
    try:
        found = metadata.version("qwen-npu")
    except metadata.PackageNotFoundError:  # a checkout on sys.path, not installed
        found = "unknown"
    globals()["__version__"] = found
    return found
