#include "comm/comm.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <list>
#include <stdexcept>
#include <thread>

#include "core/error.hpp"

#ifdef REMAT_HAVE_MPI
#define OMPI_SKIP_MPICXX 1  // the C API only: the deprecated C++ bindings need a library we do not link
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace remat::comm {
namespace {

#ifdef REMAT_HAVE_MPI
constexpr int kRingTag = 4095;  // shift_ring's messages: below the pipeline's edge tags (4096 on)
#endif

struct State {
  bool started = false;  // MPI_Init called by us
  bool threads = false;  // MPI may be called from any thread, one at a time
  int rank = 0, size = 1, local = 1;
  Stats stats;
#ifdef REMAT_HAVE_MPI
  // A communicator of its own for agreeing on a failure: a rank that failed
  // may meet the others there while they are amid collectives of the world's.
  MPI_Comm failures = MPI_COMM_NULL;
  // set_layout's groups (MPI_COMM_NULL: the rank alone, or the world's).
  MPI_Comm tensor = MPI_COMM_NULL, second = MPI_COMM_NULL, model = MPI_COMM_NULL, data = MPI_COMM_NULL;
#endif
  int tensor_size = 1, context_size = 1, expert_size = 1;
  int model_size() const { return tensor_size * context_size * expert_size; }
#ifdef REMAT_HAVE_MPI
  // post()'s messages not known to be delivered, each with its bytes.
  std::list<std::pair<MPI_Request, std::vector<char>>> posted;
#endif
};
State& state() {
  static State s;
  return s;
}

// Launchers set these for the processes they start.
bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(v)) return true;
  return false;
}

class Timed {
 public:
  Timed() : t0_(std::chrono::steady_clock::now()) {}
  ~Timed() { state().stats.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }

 private:
  std::chrono::steady_clock::time_point t0_;
};

#ifdef REMAT_HAVE_MPI
void check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) throw EnvironmentError(std::string("MPI: ") + what + " failed");
}

template <class T>
MPI_Datatype type_of();
template <>
MPI_Datatype type_of<float>() { return MPI_FLOAT; }
template <>
MPI_Datatype type_of<double>() { return MPI_DOUBLE; }
template <>
MPI_Datatype type_of<std::uint16_t>() { return MPI_UINT16_T; }
#endif

#ifdef REMAT_HAVE_MPI
MPI_Comm communicator(Group g) {
  const State& s = state();
  switch (g) {
    case Group::tensor: return s.tensor;
    case Group::context:
    case Group::expert: return s.second;
    case Group::model: return s.model;
    case Group::data: return s.data == MPI_COMM_NULL ? MPI_COMM_WORLD : s.data;
    default: return MPI_COMM_WORLD;
  }
}
#endif

template <class T>
void gather(const T* data, std::int64_t n, T* all, Group g) {
  State& s = state();
  const int ranks = size(g);
  if (ranks == 1) {
    std::copy(data, data + n, all);
    return;
  }
#ifdef REMAT_HAVE_MPI
  Timed timed;
  if (n > std::int64_t(1) << 30) throw std::logic_error("MPI: a gather of more than 2^30 values at once");
  check(MPI_Allgather(data, int(n), type_of<T>(), all, int(n), type_of<T>(), communicator(g)), "Allgather");
  // What each rank's part costs on the wire, counted once per other rank.
  s.stats.bytes_sent += std::int64_t(sizeof(T)) * n * (ranks - 1);
  s.stats.bytes_received += std::int64_t(sizeof(T)) * n * (ranks - 1);
#endif
}

template <class T>
void exchange(const T* send, std::int64_t n, T* recv, Group g) {
  State& s = state();
  const int ranks = size(g);
  if (ranks == 1) {
    std::copy(send, send + n, recv);
    return;
  }
#ifdef REMAT_HAVE_MPI
  Timed timed;
  if (n > std::int64_t(1) << 30) throw std::logic_error("MPI: an exchange of more than 2^30 values per rank");
  check(MPI_Alltoall(send, int(n), type_of<T>(), recv, int(n), type_of<T>(), communicator(g)), "Alltoall");
  // A rank's own part stays here; each other part crosses once each way.
  s.stats.bytes_sent += std::int64_t(sizeof(T)) * n * (ranks - 1);
  s.stats.bytes_received += std::int64_t(sizeof(T)) * n * (ranks - 1);
#endif
}

}  // namespace

Session::Session(int& argc, char**& argv) {
#ifdef REMAT_HAVE_MPI
  if (!launched_by_mpi()) return;
  int already = 0;
  MPI_Initialized(&already);
  if (!already) {
    // Rank 0 of a matrix receives runs on a thread of its own while its main
    // thread computes: MPI calls come from either, never at once.
    int provided = 0;
    check(MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided), "Init");
    state().started = true;
    state().threads = provided >= MPI_THREAD_SERIALIZED;
  }
  State& s = state();
  MPI_Comm_rank(MPI_COMM_WORLD, &s.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &s.size);
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, s.rank, MPI_INFO_NULL, &node);
  MPI_Comm_size(node, &s.local);
  MPI_Comm_free(&node);
  MPI_Comm_dup(MPI_COMM_WORLD, &s.failures);
#else
  (void)argc;
  (void)argv;
#endif
}

Session::~Session() {
#ifdef REMAT_HAVE_MPI
  for (MPI_Comm* c : {&state().tensor, &state().second, &state().model, &state().data})
    if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
  if (state().failures != MPI_COMM_NULL) MPI_Comm_free(&state().failures);
  if (state().started) MPI_Finalize();
#endif
}

bool built_with_mpi() {
#ifdef REMAT_HAVE_MPI
  return true;
#else
  return false;
#endif
}

void set_layout(int tensor, int context, int expert) {
  State& s = state();
  const int model = tensor * context * expert;
  if (tensor < 1 || context < 1 || expert < 1 || (context > 1 && expert > 1) || s.size % model != 0)
    throw std::logic_error("comm: a layout of tensor " + std::to_string(tensor) + ", context " +
                           std::to_string(context) + ", expert " + std::to_string(expert) + " in a job of " +
                           std::to_string(s.size));
  if (tensor == s.tensor_size && context == s.context_size && expert == s.expert_size) return;
#ifdef REMAT_HAVE_MPI
  for (MPI_Comm* c : {&s.tensor, &s.second, &s.model, &s.data})
    if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
  // Each group a split of the world, its ranks in the world's order.
  const auto split = [&s](int colour, MPI_Comm* c) {
    check(MPI_Comm_split(MPI_COMM_WORLD, colour, s.rank, c), "Comm_split");
  };
  const int copy = s.rank / model;  // which model group: the data group's place
  if (tensor > 1) split(s.rank / tensor, &s.tensor);
  if (model > tensor) split(copy * tensor + s.rank % tensor, &s.second);
  if (model > 1) {
    split(copy, &s.model);
    split(s.rank % model, &s.data);
  }
#endif
  s.tensor_size = tensor;
  s.context_size = context;
  s.expert_size = expert;
}

int rank(Group g) {
  const State& s = state();
  switch (g) {
    case Group::tensor: return s.rank % s.tensor_size;
    case Group::context:
    case Group::expert: return size(g) == 1 ? 0 : s.rank % s.model_size() / s.tensor_size;
    case Group::model: return s.rank % s.model_size();
    case Group::data: return s.rank / s.model_size();
    default: return s.rank;
  }
}

int size(Group g) {
  const State& s = state();
  switch (g) {
    case Group::tensor: return s.tensor_size;
    case Group::context: return s.context_size;
    case Group::expert: return s.expert_size;
    case Group::model: return s.model_size();
    case Group::data: return s.size / s.model_size();
    default: return s.size;
  }
}

bool any_thread() { return state().threads; }
int rank() { return state().rank; }
int size() { return state().size; }
int local_size() { return state().local; }

std::string describe() {
  if (state().size == 1) return "one process";
  return "MPI, " + std::to_string(state().size) + " ranks";
}

Stats stats() { return state().stats; }
void reset_stats() { state().stats = {}; }

void send(int to, int tag, const std::vector<char>& bytes) {
#ifdef REMAT_HAVE_MPI
  Timed timed;
  if (bytes.size() > std::size_t(1) << 30) throw std::logic_error("MPI: a message of more than 1 GiB");
  check(MPI_Send(bytes.data(), int(bytes.size()), MPI_BYTE, to, tag, MPI_COMM_WORLD), "Send");
  state().stats.bytes_sent += std::int64_t(bytes.size());
#else
  (void)to, (void)tag, (void)bytes;
  throw std::logic_error("comm::send without MPI");
#endif
}

bool waiting(int tag) {
#ifdef REMAT_HAVE_MPI
  if (state().size == 1) return false;
  int flag = 0;
  check(MPI_Iprobe(MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE), "Iprobe");
  return flag != 0;
#else
  (void)tag;
  return false;
#endif
}

#ifdef REMAT_HAVE_MPI
namespace {
// The next message with `tag` from `from` (MPI_ANY_SOURCE: any rank), sized by a probe; returns its sender.
int receive_message(int from, int tag, std::vector<char>& bytes) {
  Timed timed;
  MPI_Status status;
  check(MPI_Probe(from, tag, MPI_COMM_WORLD, &status), "Probe");
  int count = 0;
  MPI_Get_count(&status, MPI_BYTE, &count);
  bytes.resize(std::size_t(count));
  check(MPI_Recv(bytes.data(), count, MPI_BYTE, status.MPI_SOURCE, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "Recv");
  state().stats.bytes_received += count;
  return status.MPI_SOURCE;
}
}  // namespace
#endif

int receive(int tag, std::vector<char>& bytes) {
#ifdef REMAT_HAVE_MPI
  return receive_message(MPI_ANY_SOURCE, tag, bytes);
#else
  (void)tag, (void)bytes;
  throw std::logic_error("comm::receive without MPI");
#endif
}

void post(int to, int tag, std::vector<char> bytes) {
#ifdef REMAT_HAVE_MPI
  Timed timed;
  if (bytes.size() > std::size_t(1) << 30) throw std::logic_error("MPI: a message of more than 1 GiB");
  auto& posted = state().posted;
  posted.emplace_back(MPI_REQUEST_NULL, std::move(bytes));
  auto& [request, kept] = posted.back();
  check(MPI_Isend(kept.data(), int(kept.size()), MPI_BYTE, to, tag, MPI_COMM_WORLD, &request), "Isend");
  state().stats.bytes_sent += std::int64_t(kept.size());
  for (auto it = posted.begin(); it != posted.end();) {  // let the delivered ones go
    int done = 0;
    check(MPI_Test(&it->first, &done, MPI_STATUS_IGNORE), "Test");
    it = done ? posted.erase(it) : std::next(it);
  }
#else
  (void)to, (void)tag, (void)bytes;
  throw std::logic_error("comm::post without MPI");
#endif
}

void receive_from(int from, int tag, std::vector<char>& bytes) {
#ifdef REMAT_HAVE_MPI
  receive_message(from, tag, bytes);
#else
  (void)from, (void)tag, (void)bytes;
  throw std::logic_error("comm::receive_from without MPI");
#endif
}

void settle_posted() {
#ifdef REMAT_HAVE_MPI
  Timed timed;
  for (auto& [request, bytes] : state().posted) check(MPI_Wait(&request, MPI_STATUS_IGNORE), "Wait");
  state().posted.clear();
#endif
}

void barrier() {
#ifdef REMAT_HAVE_MPI
  if (state().size == 1) return;
  Timed timed;
  check(MPI_Barrier(MPI_COMM_WORLD), "Barrier");
#endif
}

void gather_all(const float* data, std::int64_t n, float* all, Group g) { gather(data, n, all, g); }
void gather_all(const double* data, std::int64_t n, double* all, Group g) { gather(data, n, all, g); }
void gather_all(const std::uint16_t* data, std::int64_t n, std::uint16_t* all, Group g) { gather(data, n, all, g); }

std::vector<float> sum_in_rank_order(const std::vector<float>& mine, Group g) {
  const std::size_t n = mine.size(), N = std::size_t(size(g));
  std::vector<float> all(n * N);
  gather_all(mine.data(), std::int64_t(n), all.data(), g);
  std::vector<float> sum(all.begin(), all.begin() + std::ptrdiff_t(n));
  for (std::size_t r = 1; r < N; ++r)
    for (std::size_t j = 0; j < n; ++j) sum[j] += all[r * n + j];
  return sum;
}

double sum_in_rank_order(double mine, Group g) {
  std::vector<double> all(std::size_t(size(g)));
  gather_all(&mine, 1, all.data(), g);
  double sum = 0;
  for (double v : all) sum += v;
  return sum;
}

void all_to_all(const float* send, std::int64_t n, float* recv, Group g) { exchange(send, n, recv, g); }
void all_to_all(const double* send, std::int64_t n, double* recv, Group g) { exchange(send, n, recv, g); }
void all_to_all(const std::uint16_t* send, std::int64_t n, std::uint16_t* recv, Group g) {
  exchange(send, n, recv, g);
}

void all_to_all_rows(const void* send, const std::vector<std::int64_t>& send_rows, void* recv,
                     const std::vector<std::int64_t>& recv_rows, std::size_t row_bytes, Group g) {
  const int ranks = size(g), me = rank(g);
  if (int(send_rows.size()) != ranks || int(recv_rows.size()) != ranks)
    throw std::logic_error("all_to_all_rows: counts for " + std::to_string(send_rows.size()) + " ranks, not " +
                           std::to_string(ranks));
  if (ranks == 1) {
    std::copy_n(static_cast<const char*>(send), std::size_t(send_rows[0]) * row_bytes, static_cast<char*>(recv));
    return;
  }
#ifdef REMAT_HAVE_MPI
  Timed timed;
  State& s = state();
  const std::size_t n = static_cast<std::size_t>(ranks);
  std::vector<int> sc(n), rc(n), sd(n), rd(n);  // in rows: a row is one element of MPI's type
  std::int64_t sent = 0, received = 0;
  for (std::size_t r = 0; r < n; ++r) {
    if (sent + send_rows[r] > INT32_MAX || received + recv_rows[r] > INT32_MAX || row_bytes > INT32_MAX)
      throw std::logic_error("MPI: an exchange of more than 2^31 rows per rank");
    sc[r] = int(send_rows[r]), sd[r] = int(sent), rc[r] = int(recv_rows[r]), rd[r] = int(received);
    sent += send_rows[r], received += recv_rows[r];
  }
  MPI_Datatype row;
  check(MPI_Type_contiguous(int(row_bytes), MPI_BYTE, &row), "Type_contiguous");
  check(MPI_Type_commit(&row), "Type_commit");
  const int rc_all = MPI_Alltoallv(send, sc.data(), sd.data(), row, recv, rc.data(), rd.data(), row, communicator(g));
  MPI_Type_free(&row);
  check(rc_all, "Alltoallv");
  const auto bytes = [&](std::int64_t rows) { return rows * std::int64_t(row_bytes); };
  s.stats.bytes_sent += bytes(sent - send_rows[std::size_t(me)]);  // a rank's own part stays here
  s.stats.bytes_received += bytes(received - recv_rows[std::size_t(me)]);
#else
  (void)me;
#endif
}

void shift_ring(const void* send, void* recv, std::int64_t bytes, Group g) {
  const int ranks = size(g), me = rank(g);
  if (ranks == 1) {
    std::memcpy(recv, send, std::size_t(bytes));
    return;
  }
#ifdef REMAT_HAVE_MPI
  Timed timed;
  constexpr std::int64_t kPiece = std::int64_t(1) << 30;  // an MPI count is an int
  const auto* from = static_cast<const char*>(send);
  auto* to = static_cast<char*>(recv);
  for (std::int64_t at = 0; at < bytes; at += kPiece) {
    const int n = int(std::min(kPiece, bytes - at));
    check(MPI_Sendrecv(from + at, n, MPI_BYTE, (me + 1) % ranks, kRingTag, to + at, n, MPI_BYTE,
                       (me + ranks - 1) % ranks, kRingTag, communicator(g), MPI_STATUS_IGNORE),
          "Sendrecv");
  }
  state().stats.bytes_sent += bytes;
  state().stats.bytes_received += bytes;
#endif
}

bool every_rank_failed(double seconds) {
#ifdef REMAT_HAVE_MPI
  State& s = state();
  if (s.size == 1) return true;
  MPI_Request request;
  if (MPI_Ibarrier(s.failures, &request) != MPI_SUCCESS) return false;
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    int done = 0;
    if (MPI_Test(&request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return false;
    if (done) return true;
    if (std::chrono::steady_clock::now() > until) return false;  // the request dies with MPI_Abort
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
#else
  (void)seconds;
  return true;
#endif
}

void abort_all(int code) {
#ifdef REMAT_HAVE_MPI
  if (state().size > 1) MPI_Abort(MPI_COMM_WORLD, code);
#endif
  std::exit(code);
}

}  // namespace remat::comm
