"""Where a rank stands on its node, read from the launcher's variables before MPI starts
(`bwprof list` in an MPI launch: issue 36)."""

from bwprof.fleet.comm import launch_size, local_from_environment


def test_each_launcher_says_the_ranks_on_the_node():
    assert local_from_environment({"OMPI_COMM_WORLD_LOCAL_RANK": "1",
                                   "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}) == (1, 2)
    assert local_from_environment({"MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "4"}) == (0, 4)
    assert local_from_environment({"PMIX_LOCAL_RANK": "3", "PMIX_LOCAL_SIZE": "4"}) == (3, 4)
    # srun: its node's entry of the tasks per node ("2(x3),1": three nodes of 2, one of 1)
    slurm = {"SLURM_LOCALID": "0", "SLURM_STEP_TASKS_PER_NODE": "2(x3),1"}
    assert local_from_environment({**slurm, "SLURM_NODEID": "2"}) == (0, 2)
    assert local_from_environment({**slurm, "SLURM_NODEID": "3"}) == (0, 1)
    assert local_from_environment({**slurm, "SLURM_NODEID": "4"}) is None
    assert local_from_environment({}) is None
    assert local_from_environment({"OMPI_COMM_WORLD_LOCAL_RANK": "2",
                                   "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}) is None  # not a place


def test_the_launch_size_is_that_of_launched_by_mpi():
    assert launch_size({"OMPI_COMM_WORLD_SIZE": "8"}) == 8
    assert launch_size({"OMPI_COMM_WORLD_SIZE": "1"}) is None
    assert launch_size({"SLURM_NTASKS": "4", "SLURM_PROCID": "0"}) is None  # the batch script
    assert launch_size({"SLURM_STEP_NUM_TASKS": "4", "SLURM_PROCID": "1"}) == 4
