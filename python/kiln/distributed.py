"""kiln.distributed: multi-rank compiles under mpirun.

    import kiln
    rank, size = kiln.distributed.init()
    kiln.config.enable_compiler_collectives = True
    kiln.config.enable_guard_collectives = True

init() joins the MPI world (MPI_Init_thread once, or adopts an MPI that
mpi4py already initialised); without mpirun it is a single rank and no MPI
call is made. Call it before compiling: compiles use the world group.
"""
from . import _C


def init():
    """(rank, world size) of this process."""
    rank, size, _ = _C.distributed_init()
    return rank, size
