#include "dist/mpi_collectives.h"

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace headroom::dist {

namespace {

using Clock = std::chrono::steady_clock;

std::string MpiError(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, length);
}

// One collective, from the training thread's call to its completion.
struct Op {
  enum class Kind { kAllreduce, kBroadcast, kAllgather };
  Kind kind = Kind::kAllreduce;
  int64_t id = 0;
  std::string what;
  void* data = nullptr;
  size_t count = 0;  // floats (allreduce) or bytes (broadcast)
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  uint64_t send_value = 0;         // allgather
  std::vector<uint64_t> gathered;  // allgather's result, by rank
  // Set by the communication thread.
  MPI_Request request = MPI_REQUEST_NULL;
  Clock::time_point issued;
  bool done = false;
  double completed_seconds = 0;  // SteadySeconds() when MPI_Test saw it done
  absl::Status status;
};

class MpiCollectives : public Collectives {
 public:
  explicit MpiCollectives(const MpiOptions& options) : options_(options) {}

  ~MpiCollectives() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    // A thread stuck inside MPI would never join: leave it to the process's exit.
    if (stuck_.load()) {
      thread_.detach();
    } else if (thread_.joinable()) {
      thread_.join();
    }
  }

  // Starts the thread and waits for MPI's initialisation.
  absl::Status Start() {
    std::promise<absl::Status> started;
    std::future<absl::Status> result = started.get_future();
    thread_ = std::thread([this, &started] { Loop(&started); });
    return result.get();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "mpi"; }

  absl::StatusOr<CollectiveHandle> AllreduceAsync(float* data, size_t count, ReduceOp op,
                                                  const std::string& what) override {
    if (count > static_cast<size_t>(INT_MAX)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": ", count, " floats; MPI takes at most ", INT_MAX));
    }
    auto o = std::make_shared<Op>();
    o->kind = Op::Kind::kAllreduce;
    o->data = data;
    o->count = count;
    o->op = op;
    o->what = what;
    return CollectiveHandle{Enqueue(std::move(o))};
  }

  absl::Status Wait(CollectiveHandle handle) override { return WaitCompleted(handle).status(); }

  absl::StatusOr<double> WaitCompleted(CollectiveHandle handle) override {
    std::shared_ptr<Op> o;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = ops_.find(handle.id);
      if (it == ops_.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("mpi: collective handle ", handle.id, " is not in flight"));
      }
      o = it->second;
    }
    absl::Status status = Await(*o);
    std::lock_guard<std::mutex> lock(mu_);
    ops_.erase(handle.id);
    if (!status.ok()) return status;
    return o->completed_seconds;
  }

  absl::Status Broadcast(void* data, size_t bytes, int root, const std::string& what) override {
    if (bytes > static_cast<size_t>(INT_MAX)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": ", bytes, " bytes; MPI takes at most ", INT_MAX));
    }
    if (root < 0 || root >= size_) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": root rank ", root, " outside [0, ", size_, ")"));
    }
    auto o = std::make_shared<Op>();
    o->kind = Op::Kind::kBroadcast;
    o->data = data;
    o->count = bytes;
    o->root = root;
    o->what = what;
    return Wait(CollectiveHandle{Enqueue(std::move(o))});
  }

  absl::StatusOr<std::vector<uint64_t>> AllgatherU64(uint64_t value,
                                                     const std::string& what) override {
    auto o = std::make_shared<Op>();
    o->kind = Op::Kind::kAllgather;
    o->send_value = value;
    o->gathered.assign(size_, 0);
    o->what = what;
    std::shared_ptr<Op> keep = o;
    absl::Status status = Wait(CollectiveHandle{Enqueue(std::move(o))});
    if (!status.ok()) return status;
    return keep->gathered;
  }

 private:
  int64_t Enqueue(std::shared_ptr<Op> o) {
    std::lock_guard<std::mutex> lock(mu_);
    o->id = next_id_++;
    ops_[o->id] = o;
    queue_.push_back(o);
    wake_.notify_all();
    return o->id;
  }

  // Waits for `o` on the training thread; the communication thread enforces the deadline,
  // and this wait a second one a little later in case that thread is stuck inside MPI.
  absl::Status Await(Op& o) {
    std::unique_lock<std::mutex> lock(mu_);
    const auto backstop = std::chrono::duration<double>(options_.timeout_seconds + 5);
    if (!done_.wait_for(lock, backstop, [&] { return o.done; })) {
      stuck_.store(true);
      return absl::DeadlineExceededError(absl::StrFormat(
          "mpi rank %d: %s did not complete within %.0f s and the communication thread is "
          "stuck in MPI: a peer rank died or issued a different collective",
          rank_, o.what, options_.timeout_seconds + 5));
    }
    return o.status;
  }

  // The communication thread.
  void Loop(std::promise<absl::Status>* started) {
    int provided = 0;
    int code = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    if (code != MPI_SUCCESS) {
      started->set_value(absl::FailedPreconditionError(
          absl::StrCat("mpi: MPI_Init_thread failed: ", MpiError(code))));
      return;
    }
    if (provided < MPI_THREAD_FUNNELED) {
      started->set_value(absl::FailedPreconditionError(absl::StrCat(
          "mpi: the library provides thread level ", provided,
          "; the communication thread needs MPI_THREAD_FUNNELED (", MPI_THREAD_FUNNELED, ")")));
      MPI_Finalize();
      return;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    started->set_value(absl::OkStatus());

    std::vector<std::shared_ptr<Op>> in_flight;
    for (;;) {
      std::deque<std::shared_ptr<Op>> fresh;
      {
        std::unique_lock<std::mutex> lock(mu_);
        if (in_flight.empty() && queue_.empty()) {
          wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        }
        if (stop_ && queue_.empty() && in_flight.empty()) break;
        fresh.swap(queue_);
      }
      for (std::shared_ptr<Op>& o : fresh) {
        if (!failed_.ok()) {
          Finish(*o, absl::FailedPreconditionError(absl::StrCat("mpi rank ", rank_, ": ", o->what,
                                                                " not issued after an earlier ",
                                                                "failure: ", failed_.message())));
          continue;
        }
        code = Issue(*o);
        if (code != MPI_SUCCESS) {
          failed_ = absl::InternalError(
              absl::StrCat("mpi rank ", rank_, ": issuing ", o->what, ": ", MpiError(code)));
          Finish(*o, failed_);
          continue;
        }
        in_flight.push_back(std::move(o));
      }
      // Poll every request; fail those past their deadline.
      const Clock::time_point now = Clock::now();
      for (size_t i = 0; i < in_flight.size();) {
        Op& o = *in_flight[i];
        int flag = 0;
        code = MPI_Test(&o.request, &flag, MPI_STATUS_IGNORE);
        absl::Status status;
        if (code != MPI_SUCCESS) {
          status = absl::InternalError(
              absl::StrCat("mpi rank ", rank_, ": ", o.what, ": ", MpiError(code)));
        } else if (!flag && std::chrono::duration<double>(now - o.issued).count() >
                                options_.timeout_seconds) {
          status = absl::DeadlineExceededError(absl::StrFormat(
              "mpi rank %d of %d: %s did not complete within %.1f s: a peer rank died or "
              "issued a different collective",
              rank_, size_, o.what, options_.timeout_seconds));
        } else if (!flag) {
          ++i;
          continue;
        }
        if (!status.ok()) {
          failed_ = status;
        } else if (o.kind == Op::Kind::kAllreduce && o.op == ReduceOp::kAverage) {
          float* data = static_cast<float*>(o.data);
          const float scale = 1.0f / static_cast<float>(size_);
          for (size_t k = 0; k < o.count; ++k) data[k] *= scale;
        }
        Finish(o, status);
        in_flight.erase(in_flight.begin() + i);
      }
      if (!in_flight.empty()) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    // A clean run finalises; after a failure a peer may be gone, and MPI_Finalize would
    // wait for it: the process exits without it and mpirun ends the job.
    if (failed_.ok()) MPI_Finalize();
  }

  int Issue(Op& o) {
    o.issued = Clock::now();
    switch (o.kind) {
      case Op::Kind::kAllreduce:
        return MPI_Iallreduce(MPI_IN_PLACE, o.data, static_cast<int>(o.count), MPI_FLOAT, MPI_SUM,
                              MPI_COMM_WORLD, &o.request);
      case Op::Kind::kBroadcast:
        return MPI_Ibcast(o.data, static_cast<int>(o.count), MPI_BYTE, o.root, MPI_COMM_WORLD,
                          &o.request);
      case Op::Kind::kAllgather:
        return MPI_Iallgather(&o.send_value, 1, MPI_UINT64_T, o.gathered.data(), 1, MPI_UINT64_T,
                              MPI_COMM_WORLD, &o.request);
    }
    return MPI_ERR_OTHER;
  }

  void Finish(Op& o, absl::Status status) {
    const double now = SteadySeconds();
    std::lock_guard<std::mutex> lock(mu_);
    o.completed_seconds = now;
    o.status = std::move(status);
    o.done = true;
    done_.notify_all();
  }

  const MpiOptions options_;
  int rank_ = 0;
  int size_ = 1;
  std::thread thread_;
  // Guards queue_, ops_, stop_ and every Op's done and status.
  std::mutex mu_;
  std::condition_variable wake_;  // the communication thread: work or stop
  std::condition_variable done_;  // the training thread: an op finished
  std::deque<std::shared_ptr<Op>> queue_;
  absl::flat_hash_map<int64_t, std::shared_ptr<Op>> ops_;
  int64_t next_id_ = 0;
  bool stop_ = false;
  // Set when the communication thread missed the backstop deadline (stuck in MPI).
  std::atomic<bool> stuck_{false};
  // The first failure (communication thread only).
  absl::Status failed_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Collectives>> CreateMpiCollectives(const MpiOptions& options) {
  if (!(options.timeout_seconds > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mpi: the collective timeout must be positive, not ", options.timeout_seconds, " s"));
  }
  auto c = std::make_unique<MpiCollectives>(options);
  absl::Status status = c->Start();
  if (!status.ok()) return status;
  return std::unique_ptr<Collectives>(std::move(c));
}

}  // namespace headroom::dist
