#pragma once
// The processes of one job: MPI ranks when remat is built with MPI and
// started by mpirun, otherwise one process. Only what remat needs: who am I,
// how many are we, messages of bytes to one rank, and every rank's values
// gathered on every rank. Every byte a rank sends
// or receives, and the time it waits in these calls, is counted. Sums over
// ranks are the caller's: it gathers the parts and adds them in a fixed
// order, so results never depend on the library's reduction tree.
#include <cstdint>
#include <string>
#include <vector>

namespace remat::comm {

// Starts MPI if it is there and this process was launched by mpirun (or
// another MPI launcher); a no-op otherwise. Finalises at the end of scope.
class Session {
 public:
  Session(int& argc, char**& argv);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
};

bool built_with_mpi();

// The groups of ranks collectives run over: the whole job; and, once
// set_layout split it, the ranks that hold the parts of one model (the
// model group: `tensor` x `second` consecutive ranks) and, inside it, the
// tensor group (`tensor` consecutive ranks: tensor parallelism's, the
// innermost, on neighbouring ranks) and the second group (the ranks at the
// same place of each tensor group, every `tensor`-th: context or expert
// parallelism's, one of them); and the data group (the ranks at the same
// place of each model group: data parallelism). Before that, or with sizes
// 1, every group but the data group (the whole job) is the rank alone.
enum class Group { world, tensor, context, expert, model, data };
// Every rank calls it, with the same sizes, whose product divides size() (a
// collective); `context` or `expert` is 1 (one second group at a time).
void set_layout(int tensor, int context = 1, int expert = 1);
// set_layout(t): one split (tensor parallelism's, or pipeline stages').
inline void set_tensor_group(int t) { set_layout(t); }
int rank(Group g);
int size(Group g);
// Whether calls may come from any thread (one at a time), not only main's.
bool any_thread();
int rank();
int size();
// Ranks of this job on this machine (to share its cores among them).
int local_size();
// "MPI (Open MPI ...), 2 ranks" or "one process".
std::string describe();

struct Stats {
  std::int64_t bytes_sent = 0, bytes_received = 0;
  double seconds = 0;  // spent inside communication calls
};
Stats stats();
void reset_stats();

// Point to point, for records sent to the rank that writes.
void send(int to, int tag, const std::vector<char>& bytes);
// Whether a message with `tag` from any rank is waiting.
bool waiting(int tag);
// The next message with `tag` from any rank (blocks); returns its sender.
int receive(int tag, std::vector<char>& bytes);
void barrier();

// Between pipeline stages: post() returns at once and keeps the bytes until
// they are delivered (two ranks posting to each other never wait on one
// another, as blocking sends of large messages would); receive_from()
// blocks for the message with `tag` from rank `from`; settle_posted() waits
// until every posted message is delivered.
void post(int to, int tag, std::vector<char> bytes);
void receive_from(int from, int tag, std::vector<char>& bytes);
void settle_posted();

// all := every rank's n values, rank 0's first (n * size() values).
// Over group g's ranks, in their order there.
void gather_all(const float* data, std::int64_t n, float* all, Group g = Group::world);
void gather_all(const double* data, std::int64_t n, double* all, Group g = Group::world);
// 16-bit values (bfloat16 and half, as their bits): moved as they are.
void gather_all(const std::uint16_t* data, std::int64_t n, std::uint16_t* all, Group g = Group::world);

// Every rank's values of group g added in rank order (the first rank's, then
// each next one's added), the same sums on every rank: the fixed order a
// sum over ranks must have to be bitwise one process's.
std::vector<float> sum_in_rank_order(const std::vector<float>& mine, Group g);
double sum_in_rank_order(double mine, Group g);

// Each rank's send holds size() parts of n values; part r goes to rank r,
// and recv's part r is what rank r sent this rank (a reduce-scatter's
// exchange: the caller adds the parts in rank order).
void all_to_all(const float* send, std::int64_t n, float* recv, Group g = Group::world);
void all_to_all(const double* send, std::int64_t n, double* recv, Group g = Group::world);
void all_to_all(const std::uint16_t* send, std::int64_t n, std::uint16_t* recv, Group g = Group::world);

// Parts of different sizes, in rows of `row_bytes` bytes: part r of `send`
// (send_rows[r] rows, the parts one after another in rank order) goes to
// rank r, and what rank r sends this rank lands in `recv` at part r
// (recv_rows[r] rows, the same order), as expert parallelism sends tokens to
// the ranks holding their experts. Every rank's counts must agree with its peers'.
void all_to_all_rows(const void* send, const std::vector<std::int64_t>& send_rows, void* recv,
                     const std::vector<std::int64_t>& recv_rows, std::size_t row_bytes, Group g = Group::world);

// Around group g's ring (context parallelism's keys and values): `bytes`
// bytes of `send` go to the next rank (rank + 1, the last to the first) and
// as many from the previous one land in `recv`, every rank at once. One
// rank alone: a copy.
void shift_ring(const void* send, void* recv, std::int64_t bytes, Group g);

// Called by a rank that failed: whether every rank fails too (each calls
// this within `seconds` of the others), as all do on an error in what was
// asked, which every rank checks alike. Then the job can end in order, with
// one message and its exit code; otherwise the others must be stopped.
bool every_rank_failed(double seconds);
// Terminates every rank (an error on one must not leave the others waiting).
[[noreturn]] void abort_all(int code);

}  // namespace remat::comm
