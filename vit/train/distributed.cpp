// The communicators of distributed.h: MPI's world when built with it and launched by mpirun or
// srun, one process otherwise.
#include "vit/train/distributed.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <thread>

#ifdef VITPE_WITH_MPI
// The C API only: Open MPI's and MPICH's deprecated C++ bindings would come with mpi.h and do
// not compile warning-free (CMake's MPI_CXX_SKIP_MPICXX says the same to the build).
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>
#endif

namespace vitpe {

namespace {

// The value of an environment variable as a whole number (-1 when unset or not a number).
long env_number(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return -1;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return *end == '\0' ? n : -1;
}

// Rank 0 of 1: every collective is the identity.
class SingleProcess final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void allreduce_sum(float*, int64_t) override {}
  void allreduce_sum(double*, int64_t) override {}
  void broadcast(float*, int64_t, int) override {}
  void broadcast(std::string&, int) override {}
  std::vector<std::string> gather(const std::string& mine, int) override { return {mine}; }
  void barrier() override {}
};

#ifdef VITPE_WITH_MPI

void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw std::runtime_error(std::string("MPI: ") + what + " failed: " + std::string(text, len));
}

// Waits for a nonblocking request, sleeping between tests (from 50 us up to 2 ms), so a waiting
// rank leaves its core to the ranks still computing.
void wait_sleeping(MPI_Request& request) {
  auto pause = std::chrono::microseconds(50);
  for (int done = 0;;) {
    check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done) return;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(2000));
  }
}

// MPI counts are int: long buffers go in pieces.
constexpr int64_t kChunk = INT_MAX / 2;

class MpiWorld final : public Communicator {
 public:
  MpiWorld() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided),
                "MPI_Init_thread");
      started_ = true;
    }
    // Errors come back as codes, which check_mpi turns into exceptions naming the call.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  bool started() const { return started_; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void allreduce_sum(float* data, int64_t n) override { allreduce(data, n, MPI_FLOAT); }
  void allreduce_sum(double* data, int64_t n) override { allreduce(data, n, MPI_DOUBLE); }

  void broadcast(float* data, int64_t n, int root) override {
    for (int64_t at = 0; at < n; at += kChunk) {
      const int count = static_cast<int>(std::min(kChunk, n - at));
      check_mpi(MPI_Bcast(data + at, count, MPI_FLOAT, root, MPI_COMM_WORLD), "MPI_Bcast");
    }
  }

  void broadcast(std::string& text, int root) override {
    int64_t length = static_cast<int64_t>(text.size());
    check_mpi(MPI_Bcast(&length, 1, MPI_INT64_T, root, MPI_COMM_WORLD), "MPI_Bcast");
    text.resize(static_cast<size_t>(length));
    for (int64_t at = 0; at < length; at += kChunk) {
      const int count = static_cast<int>(std::min(kChunk, length - at));
      check_mpi(MPI_Bcast(text.data() + at, count, MPI_CHAR, root, MPI_COMM_WORLD), "MPI_Bcast");
    }
  }

  std::vector<std::string> gather(const std::string& mine, int root) override {
    barrier();
    if (mine.size() > static_cast<size_t>(INT_MAX)) {
      throw std::runtime_error("MPI: a gathered message of " + std::to_string(mine.size()) +
                               " bytes is over MPI's 2 GiB count limit");
    }
    int length = static_cast<int>(mine.size());
    std::vector<int> lengths(rank_ == root ? size_ : 0), offsets(lengths.size());
    check_mpi(MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, root, MPI_COMM_WORLD),
              "MPI_Gather");
    int64_t total = 0;
    for (size_t r = 0; r < lengths.size(); ++r) {
      offsets[r] = static_cast<int>(total);
      total += lengths[r];
    }
    if (total > INT_MAX) {
      throw std::runtime_error("MPI: the gathered messages total " + std::to_string(total) +
                               " bytes, over MPI's 2 GiB count limit");
    }
    std::string all(static_cast<size_t>(total), '\0');
    check_mpi(MPI_Gatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(),
                          MPI_CHAR, root, MPI_COMM_WORLD),
              "MPI_Gatherv");
    std::vector<std::string> out;
    for (size_t r = 0; r < lengths.size(); ++r) out.push_back(all.substr(offsets[r], lengths[r]));
    return out;
  }

  void barrier() override {
    MPI_Request request;
    check_mpi(MPI_Ibarrier(MPI_COMM_WORLD, &request), "MPI_Ibarrier");
    wait_sleeping(request);
  }

 private:
  void allreduce(void* data, int64_t n, MPI_Datatype type) {
    const int64_t bytes = type == MPI_FLOAT ? 4 : 8;
    for (int64_t at = 0; at < n; at += kChunk) {
      const int count = static_cast<int>(std::min(kChunk, n - at));
      check_mpi(MPI_Allreduce(MPI_IN_PLACE, static_cast<char*>(data) + at * bytes, count, type,
                              MPI_SUM, MPI_COMM_WORLD),
                "MPI_Allreduce");
    }
  }

  int rank_ = 0, size_ = 1;
  bool started_ = false;
};

MpiWorld* mpi_world_if_made(MpiWorld* made = nullptr) {
  static MpiWorld* world = nullptr;
  if (made) world = made;
  return world;
}

#endif  // VITPE_WITH_MPI

}  // namespace

bool launched_by_mpi() {
  if (env_number("OMPI_COMM_WORLD_SIZE") > 1 || env_number("PMI_SIZE") > 1) return true;
  // PMIx (Open MPI 5, srun --mpi=pmix) names the rank; the size comes from MPI itself.
  return env_number("PMIX_RANK") >= 0 && env_number("OMPI_COMM_WORLD_SIZE") != 1;
}

bool built_with_mpi() {
#ifdef VITPE_WITH_MPI
  return true;
#else
  return false;
#endif
}

std::string mpi_library_version() {
#ifdef VITPE_WITH_MPI
  char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(text, &len);
  std::string s(text, static_cast<size_t>(len));
  const size_t comma = s.find(',');  // "Open MPI v4.1.4, package: ..." -> "Open MPI v4.1.4"
  if (comma != std::string::npos) s.resize(comma);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\0')) s.pop_back();
  return s;
#else
  return "none (built with VITPE_MPI=OFF or without an MPI found)";
#endif
}

Communicator& self() {
  static SingleProcess one;
  return one;
}

Communicator& world() {
  if (!launched_by_mpi()) return self();
#ifdef VITPE_WITH_MPI
  static MpiWorld* world = mpi_world_if_made(new MpiWorld());  // lives until the process ends
  return *world;
#else
  throw std::runtime_error(
      "this vitpe was built without MPI (VITPE_MPI=OFF, or no MPI was found when it was "
      "configured: scripts/setup installs libopenmpi-dev), but an MPI launcher started it as one "
      "of " +
      std::to_string(std::max(env_number("OMPI_COMM_WORLD_SIZE"), env_number("PMI_SIZE"))) +
      " processes; each would do all of the work. Rebuild with MPI, or run it without mpirun");
#endif
}

void finish_distributed() {
#ifdef VITPE_WITH_MPI
  MpiWorld* w = mpi_world_if_made();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (w && w->started() && !finalized) MPI_Finalize();
#endif
}

void abort_distributed(int code) {
#ifdef VITPE_WITH_MPI
  MpiWorld* w = mpi_world_if_made();
  if (w && w->size() > 1) MPI_Abort(MPI_COMM_WORLD, code);
#else
  (void)code;
#endif
}

int threads_for_this_rank() {
  if (!launched_by_mpi()) return 0;
  cpu_set_t mine;
  CPU_ZERO(&mine);
  if (sched_getaffinity(0, sizeof mine, &mine) != 0) return 0;
  const int cpus = std::max(1, CPU_COUNT(&mine));
  int sharing = 1;  // ranks of this node allowed on exactly these CPUs, this one included
#ifdef VITPE_WITH_MPI
  world();
  MPI_Comm node;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) ==
      MPI_SUCCESS) {
    int n = 1;
    MPI_Comm_size(node, &n);
    std::vector<cpu_set_t> all(static_cast<size_t>(n));
    if (MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, node) ==
        MPI_SUCCESS) {
      sharing = static_cast<int>(std::count_if(
          all.begin(), all.end(), [&](const cpu_set_t& s) { return CPU_EQUAL(&s, &mine); }));
    }
    MPI_Comm_free(&node);
  }
#endif
  return std::max(1, cpus / std::max(1, sharing));
}

std::string rank_prefix() {
  if (!launched_by_mpi()) return "";
  const Communicator& w = world();
  return "rank " + std::to_string(w.rank()) + "/" + std::to_string(w.size()) + ": ";
}

}  // namespace vitpe
