"""TensorForge: a deep-learning compiler and VTA-like accelerator co-design kit.

The layers are subpackages: ``tensorforge.hw`` (HWConfig, ISA, Amaranth design),
``tensorforge.sim`` (simulators), ``tensorforge.runtime`` (program images, devices) and
``tensorforge.compiler``. The names below are the public entry points.
"""

__version__ = "0.1.0"

from .api import compile  # noqa: E402
from .hw.config import HWConfig  # noqa: E402
from .runtime.device.vta import LoadedProgram, open_device  # noqa: E402
from .runtime.module import CalibrationRangeWarning, Module  # noqa: E402
from .runtime.program import ProgramBuilder, ProgramImage  # noqa: E402

#: read a module file written by `Module.save` (``tensorforge.load("m.tfm")``, as
#: ``onnx.load``/``torch.load`` read theirs; the same as `Module.load`)
load = Module.load

__all__ = [
    "CalibrationRangeWarning",
    "HWConfig",
    "LoadedProgram",
    "Module",
    "ProgramBuilder",
    "ProgramImage",
    "__version__",
    "compile",
    "load",
    "open_device",
]
