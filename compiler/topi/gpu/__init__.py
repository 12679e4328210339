"""GPU schedules for the compute definitions the graph strategies build (CUDA and OpenCL)."""

from __future__ import annotations

from .schedule import GPUScheduleConfig, schedule_auto

__all__ = ["GPUScheduleConfig", "schedule_auto"]
