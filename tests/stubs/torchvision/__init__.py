"""Stand-in for torchvision in the CPU test environment (see tests/stubs/README.md).

Every submodule imports; every attribute resolves to a callable that raises when used. Only the
enum that SGLang and transformers read at import time is real.
"""

import enum
import importlib.abc
import importlib.machinery
import sys
import types

__version__ = "0.28.0"


class InterpolationMode(enum.Enum):
    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"


def _unavailable(qualname: str):  # type: ignore[no-untyped-def]
    def call(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise RuntimeError(f"{qualname} is not available: torchvision is a test stand-in here")

    return call


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        if name.startswith("__"):
            raise AttributeError(name)
        if name == "InterpolationMode":
            return InterpolationMode
        return _unavailable(f"{self.__name__}.{name}")


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):  # type: ignore[no-untyped-def]
        if fullname.startswith(__name__ + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):  # type: ignore[no-untyped-def]
        module = _StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):  # type: ignore[no-untyped-def]
        return None


sys.meta_path.append(_Finder())
sys.modules[__name__].__class__ = _StubModule
