// search/mpi_pool.h without MPI (the default build): `loop --mpi` says how to build it.
#include "search/mpi_pool.h"

namespace megasched::search {

bool mpi_built() { return false; }

std::unique_ptr<TrialPool> start_mpi_loop(const MpiLoopOptions&, std::string* error,
                                          std::optional<int>* served, bool* usage) {
  served->reset();
  *usage = true;
  *error =
      "--mpi: this megasched was built without MPI; install OpenMPI (apt-get install "
      "libopenmpi-dev openmpi-bin), configure with cmake -DMEGASCHED_MPI=ON, and run it under "
      "mpirun -np N";
  return nullptr;
}

void finish_mpi_loop(TrialPool*, int) {}

}  // namespace megasched::search
