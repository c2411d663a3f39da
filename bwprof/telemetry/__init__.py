"""Hardware counters recorded alongside measurements; NVML is reached only through `nvml`."""

from bwprof.telemetry.nvml import Nvml, get_nvml

__all__ = ["Nvml", "get_nvml"]
