#include "executor/host_update.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "executor/optimizer_math.h"

namespace headroom::executor {
namespace {

// Updates of fewer elements run on the calling thread, as the CPU backend's kernels do.
constexpr int64_t kParallelMin = 1 << 15;

absl::Status CheckHostUpdate(const UpdateArgs& args, size_t num_state) {
  const int64_t n = args.param.num_elements();
  auto check = [&](const char* what, const TensorView& t) -> absl::Status {
    if (t.dtype != proto::DTYPE_FLOAT32 || t.data == nullptr || t.num_elements() != n) {
      return absl::InvalidArgumentError(absl::StrCat(
          "host ", args.op, ": ", what, " needs ", n, " float32 elements with data, has ",
          t.num_elements(), " of dtype ", t.dtype, t.data == nullptr ? " and no data" : ""));
    }
    return absl::OkStatus();
  };
  if (absl::Status s = check("param", args.param); !s.ok()) return s;
  if (absl::Status s = check("grad", args.grad); !s.ok()) return s;
  if (args.state.size() != num_state) {
    return absl::InvalidArgumentError(absl::StrCat("host ", args.op, ": got ", args.state.size(),
                                                   " state tensors, needs ", num_state));
  }
  for (const TensorView& t : args.state) {
    if (absl::Status s = check("state", t); !s.ok()) return s;
  }
  if (args.step < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("host ", args.op, ": step is ", args.step, ", needs >= 1"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RunHostUpdate(const UpdateArgs& args) {
  const int64_t n = args.param.num_elements();
  float* p = args.param.f32();
  const float* grad = args.grad.f32();
  if (args.op == "SgdMomentumUpdate") {
    if (absl::Status s = CheckHostUpdate(args, 1); !s.ok()) return s;
    const SgdMomentumMath math(args.params, args.step);
    float* buf = args.state[0].f32();
#pragma omp parallel for if (n >= kParallelMin) schedule(static)
    for (int64_t i = 0; i < n; ++i) math(i, p, grad, buf);
    return absl::OkStatus();
  }
  if (args.op == "AdamUpdate") {
    if (absl::Status s = CheckHostUpdate(args, 2); !s.ok()) return s;
    const AdamMath math(args.params, args.step);
    float* m = args.state[0].f32();
    float* v = args.state[1].f32();
#pragma omp parallel for if (n >= kParallelMin) schedule(static)
    for (int64_t i = 0; i < n; ++i) math(i, p, grad, m, v);
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("host update: no optimizer step '", args.op,
                                                 "' (SgdMomentumUpdate, AdamUpdate)"));
}

HostUpdateQueue::HostUpdateQueue() : worker_([this] { Work(); }) {}

HostUpdateQueue::~HostUpdateQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

int64_t HostUpdateQueue::Submit(UpdateArgs args, std::unique_ptr<Event> ready) {
  int64_t ticket;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ticket = submitted_++;
    queue_.emplace_back(std::move(args), std::move(ready));
  }
  cv_.notify_all();
  return ticket;
}

absl::Status HostUpdateQueue::Wait(int64_t ticket) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_ > ticket; });
  return error_;
}

double HostUpdateQueue::TakeBusySeconds() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(busy_seconds_, 0.0);
}

void HostUpdateQueue::Work() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // Stopped with nothing left.
    auto [args, ready] = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    absl::Status status = ready != nullptr ? ready->Wait() : absl::OkStatus();
    const auto start = std::chrono::steady_clock::now();
    if (status.ok()) status = RunHostUpdate(args);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    lock.lock();
    busy_seconds_ += seconds;
    if (!status.ok() && error_.ok()) error_ = std::move(status);
    ++done_;
    cv_.notify_all();
  }
}

}  // namespace headroom::executor
