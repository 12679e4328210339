"""Compilation targets parsed from strings such as "llvm -mcpu=native" or "vta -config=pynq"."""

from __future__ import annotations

from dataclasses import dataclass

# Known target kinds and the options each accepts (others are kept but not interpreted).
KINDS = ("llvm", "cuda", "opencl", "vta")


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

    @staticmethod
    def parse(text: str | Target) -> Target:
        """Parse a target string; a Target is returned unchanged.

        Raises:
            ValueError: for an empty string, an unknown kind, or an option without a leading `-`.
        """
        if isinstance(text, Target):
            return text
        words = str(text).split()
        if not words:
            raise ValueError(f"target must be a non-empty string such as 'llvm', not {text!r}")
        kind, options = words[0], {}  # a repeated key keeps its last value
        if kind not in KINDS:
            raise ValueError(
                f"target kind must be one of {', '.join(KINDS)}, not {kind!r} (in {text!r})"
            )
        for word in words[1:]:
            if not word.startswith("-") or word == "-":
                raise ValueError(f"target option must look like -key=value, not {word!r}")
            key, _, value = word.lstrip("-").partition("=")
            options[key] = value
        return Target(kind, tuple(options.items()))

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
