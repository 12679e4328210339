"""Operator library: compute definitions plus per-target schedules (x86, gpu)."""
