// Several vitpe processes of one launch (`mpirun -np N vitpe ...`, `srun vitpe ...`) working
// together through MPI: the sweeps of `vitpe compare` spread their runs over the ranks, and
// `vitpe train` splits each batch over them (data-parallel). MPI is optional (CMake
// VITPE_MPI=AUTO|ON|OFF): without it, or when the process was not started by an MPI launcher,
// world() is a single process (rank 0 of 1) and everything runs as it does alone.
//
// MPI is an implementation detail of libvitpe: this header does not include <mpi.h>, and only
// the main thread calls MPI (MPI_THREAD_FUNNELED).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vitpe {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Sums n values over the ranks, in place, on every rank.
  virtual void allreduce_sum(float* data, int64_t n) = 0;
  virtual void allreduce_sum(double* data, int64_t n) = 0;
  // Root's values replace every other rank's (the same n on every rank).
  virtual void broadcast(float* data, int64_t n, int root) = 0;
  // Root's string replaces every other rank's (of any length).
  virtual void broadcast(std::string& text, int root) = 0;
  // Every rank's string, in rank order, at `root`; an empty vector on the other ranks. Waits
  // like barrier() first, so a root that finished early sleeps instead of spinning.
  virtual std::vector<std::string> gather(const std::string& mine, int root) = 0;
  // Waits until every rank has arrived, sleeping between polls: a rank that finished its share
  // early does not take a core from the ranks still computing (MPI's own barrier spins).
  virtual void barrier() = 0;
};

// True when an MPI launcher started this process as one of several (it set OMPI_COMM_WORLD_SIZE,
// PMI_SIZE or PMIX_RANK with a size above 1, or SLURM's PMI).
bool launched_by_mpi();

// Whether this libvitpe was built with MPI (VITPE_MPI), and which MPI ("Open MPI v4.1.4").
bool built_with_mpi();
std::string mpi_library_version();

// The processes of this launch: MPI's world (MPI initialised on the first call) when launched by
// an MPI launcher, else a single process. Launched by one but built without MPI: throws, since N
// copies of one command would each do all of the work.
Communicator& world();

// A communicator of one process (rank 0 of 1), whatever the launch: for work one rank does alone.
Communicator& self();

// Ends MPI when world() started it (call once, before a normal exit); nothing otherwise.
void finish_distributed();

// After an error on this rank: stops every process of the launch (MPI_Abort with `code`), since
// the others would wait for it for ever; returns at once when this is the only process.
void abort_distributed(int code);

// The compute threads for this rank: the CPUs it may run on (its affinity, as mpirun's binding
// set it), divided among the ranks of its node allowed on exactly the same CPUs (so two unbound
// ranks on a 2-core node get one thread each). 0 when not distributed (keep the default).
int threads_for_this_rank();

// "rank R/N: " under a launch of several processes, "" otherwise: a prefix for messages.
std::string rank_prefix();

}  // namespace vitpe
