"""Compilation targets parsed from strings such as "llvm -mcpu=native" or "vta -config=pynq"."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

# Known target kinds and the options each accepts; any other option is an error. Who reads
# them: llvm -> codegen/llvm_jit.py and graph/compile.py (mtriple, mcpu, mattr); cuda and
# opencl -> codegen/gpu.py (Limits.of: max_threads, max_shared; gpu_payload: arch);
# vta -> graph/compile_vta.py (vta_options: config, device, mode, vthreads; weight_scales:
# weights; depthwise_placement: depthwise).
OPTIONS: dict[str, tuple[str, ...]] = {
    "llvm": ("mattr", "mcpu", "mtriple"),
    "cuda": ("arch", "max_shared", "max_threads"),
    "opencl": ("max_shared", "max_threads"),
    "vta": ("config", "depthwise", "device", "mode", "vthreads", "weights"),
}
KINDS = tuple(OPTIONS)
EXAMPLE = "'llvm', 'llvm -mcpu=native', 'cuda -arch=sm_80' or 'vta -config=pynq'"

_ARCH = re.compile(r"(?:sm|compute)_\d{2,3}[af]?")


def _positive_int(value: str) -> str | None:
    if not value.isdecimal() or int(value) < 1:
        return "a positive integer"
    return None


# Cheap checks of option values: a description of what the value must be, or None if it is
# fine. Options not listed take any non-empty value (their readers check them: vta_options
# names a bad -device, -mode or -vthreads; LLVM a bad -mtriple).
_CHECKS: dict[str, Callable[[str], str | None]] = {
    "max_threads": _positive_int,
    "max_shared": _positive_int,
    "arch": lambda v: None if _ARCH.fullmatch(v) else "a CUDA arch such as sm_80 or compute_80",
}


@dataclass(frozen=True)
class Target:
    """A compilation target: a kind plus `-key=value` options and bare `-flag`s.

    Attributes:
        kind: "llvm", "cuda", "opencl" or "vta".
        options: every `-key=value` option as (key, value) pairs, in order (flags map to "").

    Example:
        >>> t = Target.parse("llvm -mtriple=armv7a-linux-gnueabihf -mcpu=cortex-a9")
        >>> (t.kind, t.triple, t.mcpu, t.is_host)
        ('llvm', 'armv7a-linux-gnueabihf', 'cortex-a9', False)
        >>> str(Target.parse("vta -config=pynq -device=sim"))
        'vta -config=pynq -device=sim'
    """

    kind: str
    options: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "options", tuple((str(k), str(v)) for k, v in self.options))
        if self.kind not in KINDS:
            raise ValueError(f"target kind must be one of {', '.join(KINDS)}, not {self.kind!r}")
        accepted = OPTIONS[self.kind]
        for key, value in self.options:
            word = f"-{key}={value}" if value else f"-{key}"
            if key not in accepted:
                raise ValueError(
                    f"{word}: unknown option {key!r} for {self.kind} targets; options are "
                    f"{', '.join(accepted)}"
                )
            if not value:
                raise ValueError(
                    f"{word}: option {key!r} of {self.kind} targets needs a value: -{key}=VALUE"
                )
            problem = _CHECKS.get(key, lambda v: None)(value)
            if problem:
                raise ValueError(
                    f"{word}: option {key!r} of {self.kind} targets must be {problem}, "
                    f"not {value!r}"
                )

    @staticmethod
    def parse(text: str | Target) -> Target:
        """Parse a target string; a Target is returned unchanged.

        Raises:
            ValueError: for an empty string, an unknown kind, an option without a leading `-`,
                an option the kind does not accept (the accepted ones are listed), an option
                without a value, or a value that is not of its option's form (`max_threads` a
                positive integer, `arch` like sm_80).
        """
        if isinstance(text, Target):
            return text
        if not isinstance(text, str):
            raise ValueError(f"target must be a string such as {EXAMPLE}, not {text!r}")
        words = text.split()
        if not words:
            raise ValueError(f"target must be a non-empty string such as {EXAMPLE}, not {text!r}")
        kind, options = words[0], {}  # a repeated key keeps its last value
        if kind not in KINDS:
            raise ValueError(
                f"target kind must be one of {', '.join(KINDS)}, not {kind!r} (in {text!r})"
            )
        for word in words[1:]:
            if not word.startswith("-") or word.strip("-") == "":
                raise ValueError(f"target option must look like -key=value, not {word!r}")
            key, _, value = word.lstrip("-").partition("=")
            options[key] = value
        try:
            return Target(kind, tuple(options.items()))
        except ValueError as exc:
            raise ValueError(f"{exc} (in {text!r})") from None

    def get(self, key: str, default: str = "") -> str:
        """The value of option `key` (without its dash), or `default`."""
        return dict(self.options).get(key, default)

    @property
    def triple(self) -> str:
        """The LLVM target triple ("" means the host)."""
        return self.get("mtriple")

    @property
    def mcpu(self) -> str:
        """The CPU name ("" or "native" mean the host CPU when compiling for the host)."""
        return self.get("mcpu")

    @property
    def mattr(self) -> str:
        return self.get("mattr")

    @property
    def is_host(self) -> bool:
        """Whether code for this target runs on this machine (an llvm target without a triple)."""
        return self.kind == "llvm" and not self.triple

    def __str__(self) -> str:
        opts = [f"-{k}={v}" if v else f"-{k}" for k, v in self.options]
        return " ".join([self.kind, *opts])


def host() -> Target:
    """The default target: LLVM for this machine's CPU and its features."""
    return Target("llvm", (("mcpu", "native"),))
