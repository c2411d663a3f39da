"""GPU measurements. Only `bwprof.gpu.runtime` imports CuPy, and only when asked."""
