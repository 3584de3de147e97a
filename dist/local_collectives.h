// Collectives among threads of one process, for tests: LocalGroup(N) hands out N ranks,
// each used by its own thread, which meet at every collective (a generation-counted
// barrier). AllreduceAsync() does its work at once (every rank's buffer summed, or averaged,
// in rank order, so the result is the same bytes on every rank) and Wait() returns at
// once; calls are recorded (calls()) so a test can see when each was issued.
//
// Limits: every rank must issue the same collectives (a mismatched one deadlocks, as MPI
// may); buffers must stay valid until every rank has reached the call. Thread-safe across
// the group's ranks; each rank is used by one thread.
#ifndef HEADROOM_DIST_LOCAL_COLLECTIVES_H_
#define HEADROOM_DIST_LOCAL_COLLECTIVES_H_

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dist/collectives.h"

namespace headroom::dist {

class LocalGroup {
 public:
  explicit LocalGroup(int size);

  // Returns rank `rank`'s collectives (borrowing the group, which must outlive them).
  std::unique_ptr<Collectives> Rank(int rank);

  int size() const { return size_; }

  // Each rank's pointer at the current collective; ranks meet in Exchange().
  // Returns once every rank has posted: `post(slots)` runs on the last one to arrive, with
  // every rank's pointer, before any returns.
  template <typename F>
  void Exchange(int rank, void* mine, F&& post);

 private:
  const int size_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<void*> slots_;
  int arrived_ = 0;
  int64_t generation_ = 0;
  int leaving_ = 0;
};

// One call as a rank issued it.
struct LocalCall {
  std::string kind;  // "allreduce", "broadcast", "allgather"
  std::string what;
  size_t count = 0;
};

// The recorded calls of `collectives` (from LocalGroup::Rank).
const std::vector<LocalCall>& LocalCalls(const Collectives& collectives);

template <typename F>
void LocalGroup::Exchange(int rank, void* mine, F&& post) {
  std::unique_lock<std::mutex> lock(mu_);
  // Wait for the previous collective's ranks to leave.
  cv_.wait(lock, [&] { return leaving_ == 0; });
  slots_[rank] = mine;
  const int64_t generation = generation_;
  if (++arrived_ == size_) {
    post(slots_);
    arrived_ = 0;
    leaving_ = size_;
    ++generation_;
    cv_.notify_all();
  } else {
    cv_.wait(lock, [&] { return generation_ != generation; });
  }
  if (--leaving_ == 0) cv_.notify_all();
}

}  // namespace headroom::dist

#endif  // HEADROOM_DIST_LOCAL_COLLECTIVES_H_
