"""Code generators: loop IR to LLVM (CPU) and to VTA program images."""

from __future__ import annotations

from .llvm import CodeGenLLVM, CodegenOptions, generate

__all__ = ["CodeGenLLVM", "CodegenOptions", "generate"]
