"""Host (CPU and DDR) measurements."""
