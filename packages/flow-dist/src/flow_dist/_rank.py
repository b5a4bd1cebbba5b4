"""What every rank of ``flow-launch`` runs: ``python -m flow_dist._rank script args...``.

It is ``python -m mpi4py script args...`` with MPI initialised first: mpi4py's runner turns an
uncaught exception into ``MPI_Abort`` (the whole job stops) only once MPI is imported, and flow
imports it lazily, at the first communication, so a script that fails before communicating
would otherwise leave the other ranks waiting.
"""

from mpi4py import MPI  # noqa: F401  (initialises MPI)
from mpi4py.run import main

if __name__ == "__main__":
    main()
