"""Whether an MPI launcher (mpirun/mpiexec of Open MPI or MPICH, or Slurm's srun) started this
process, and as which rank: read from the environment the launcher sets, before MPI is loaded.

Standard library only: ``caffecli/__init__`` calls ``share_cpus`` before numpy loads its BLAS.
"""
import collections
import os

World = collections.namedtuple("World", "launcher rank size local_rank local_size")

# launcher: (rank, size, local rank, local size) variables; earlier entries win (an mpirun
# inside a Slurm allocation also inherits the allocation's SLURM_* variables)
LAUNCHERS = {
    "Open MPI": ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                 "OMPI_COMM_WORLD_LOCAL_SIZE"),
    "MPICH": ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
    "MVAPICH": ("MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_LOCAL_RANK",
                "MV2_COMM_WORLD_LOCAL_SIZE"),
    "Slurm": ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", None),
}
BLAS_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def slurm_tasks_here(environ):
    """This node's task count from SLURM_STEP_TASKS_PER_NODE ("2(x3),1": 2 on each of the first
    three nodes, 1 on the fourth) and SLURM_NODEID."""
    counts = []
    for entry in environ.get("SLURM_STEP_TASKS_PER_NODE", "").split(","):
        count, _, repeat = entry.partition("(x")
        if count.strip().isdigit():
            counts.extend([int(count)] * int(repeat.rstrip(")") or 1))
    node = int(environ.get("SLURM_NODEID", "0") or 0)
    return counts[node] if node < len(counts) else None


def detect(environ=None):
    """The World this process is a rank of, or None when no launcher started more than one."""
    environ = os.environ if environ is None else environ
    for name, (rank, size, local_rank, local_size) in LAUNCHERS.items():
        if environ.get(rank, "").isdigit() and environ.get(size, "").isdigit():
            n = int(environ[size])
            if n < 2:
                return None
            here = int(environ[local_size]) if local_size and environ.get(local_size, "") \
                .isdigit() else slurm_tasks_here(environ) if name == "Slurm" else None
            mine = environ.get(local_rank, "")
            return World(name, int(environ[rank]), n, int(mine) if mine.isdigit() else 0,
                         here or n)
    return None


def share_cpus(environ=None):
    """Under a launcher, give each rank its share of the cores for BLAS/OpenMP threads (unless
    the user set a thread count): ranks that each start one BLAS thread per core fight over the
    cores, and OpenBLAS's spinning threads make that many times slower. Returns the count set."""
    environ = os.environ if environ is None else environ
    world = detect(environ)
    if world is None or any(v in environ for v in BLAS_THREAD_VARS):
        return None
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    threads = max(1, (cpus or 1) // world.local_size)
    environ["OMP_NUM_THREADS"] = str(threads)
    return threads
