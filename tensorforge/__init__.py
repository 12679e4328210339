"""TensorForge: a deep-learning compiler and VTA-like accelerator co-design kit."""

__version__ = "0.1.0"
