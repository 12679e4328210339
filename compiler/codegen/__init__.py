"""Code generators: loop IR to LLVM (CPU) and to VTA program images."""
