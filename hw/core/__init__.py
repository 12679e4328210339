"""The accelerator in Amaranth: queues, the GEMM core and the tensor ALU (see docs/hardware.md)."""
