"""What every benchmark prints first: the machine it ran on (imported by the scripts here)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), or what the platform module knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe() -> str:
    """``AMD EPYC, 2 CPUs, load (0.4, 0.8, 0.9), Python 3.11.7``."""
    load = tuple(round(x, 2) for x in os.getloadavg())
    return f"{cpu_model()}, {os.cpu_count()} CPUs, load {load}, Python {platform.python_version()}"


def random_inputs(model: Any) -> dict[str, np.ndarray]:
    """Seeded standard-normal float32 arrays for every input of an ONNX model (static shapes)."""
    rng = np.random.default_rng(0)
    return {
        v.name: rng.standard_normal([d.dim_value for d in v.type.tensor_type.shape.dim]).astype(
            np.float32
        )
        for v in model.graph.input
    }


def timed_calls(fn: Callable[[], Any], repeat: int) -> list[float]:
    """The wall time of each of `repeat` calls of `fn`, in seconds."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def median_ms(fn: Callable[[], Any], repeat: int, warmup: int = 2) -> float:
    """The median wall time of `repeat` calls of `fn`, in ms, after `warmup` untimed calls."""
    for _ in range(warmup):
        fn()
    return float(np.median(timed_calls(fn, repeat)) * 1e3)


def worker_json(script: str, threads: int, *args: str) -> dict:
    """Runs `script --worker THREADS ARGS...` in a child process with every thread-count
    variable (OpenBLAS, OpenMP, MKL, TensorForge's pool) set to `threads`, and returns the JSON
    object its last line of output prints. Each thread count gets a fresh process because the
    libraries read those variables once."""
    env = dict(os.environ)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "TF_NUM_THREADS"):
        env[var] = str(threads)
    cmd = [sys.executable, script, "--worker", str(threads), *args]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"worker with {threads} thread(s) failed:\n{done.stderr}")
    return json.loads(done.stdout.splitlines()[-1])


def import_tvm() -> Any:
    """apache-tvm, when `import tvm` works or works from the folder named by `TVM_PYTHONPATH`
    (appended to sys.path, e.g. after `pip install --target DIR apache-tvm`); else None."""
    try:
        import tvm
    except ImportError:
        extra = os.environ.get("TVM_PYTHONPATH")
        if not extra:
            return None
        sys.path.append(extra)
        try:
            import tvm
        except ImportError:
            return None
    return tvm
