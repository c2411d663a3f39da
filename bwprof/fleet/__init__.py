"""Fleet runs: one bwprof per MPI rank, one merged run folder on rank 0."""
