#include "executor/cpu/cpu_backend.h"

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "executor/cpu/cpu_kernels.h"

namespace headroom::executor::cpu {
namespace {

// Page-aligned so every planned offset keeps the plan's alignment.
constexpr uint64_t kBlockAlignment = 4096;

class HostBlock : public Buffer {
 public:
  HostBlock(void* data, uint64_t bytes) : data_(data), bytes_(bytes) {}
  ~HostBlock() override { std::free(data_); }
  void* data() const override { return data_; }
  uint64_t bytes() const override { return bytes_; }

 private:
  void* data_;
  uint64_t bytes_;
};

absl::StatusOr<std::unique_ptr<Buffer>> AllocateBlock(uint64_t bytes, const char* what) {
  const uint64_t rounded = (std::max<uint64_t>(bytes, 1) + kBlockAlignment - 1) /
                           kBlockAlignment * kBlockAlignment;
  void* data = std::aligned_alloc(kBlockAlignment, rounded);
  if (data == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("CPU backend: cannot allocate ", bytes, " bytes of ", what));
  }
  return std::unique_ptr<Buffer>(std::make_unique<HostBlock>(data, bytes));
}

// Completion of one copy; shared by the copy thread and the event handed out.
struct CopyState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  // When the copy thread ran it; written before `done`.
  Event::Interval ran;
};

class CopyEvent : public Event {
 public:
  explicit CopyEvent(std::shared_ptr<CopyState> state) : state_(std::move(state)) {}
  absl::Status Wait() override {
    std::unique_lock<std::mutex> lock(state_->mu);
    state_->cv.wait(lock, [&] { return state_->done; });
    return absl::OkStatus();
  }

  std::optional<Interval> interval() const override {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (!state_->done) return std::nullopt;
    return state_->ran;
  }

 private:
  std::shared_ptr<CopyState> state_;
};

// One copy stream: a thread running memcpys in issue order.
class CopyStream {
 public:
  CopyStream() : thread_([this] { Run(); }) {}
  ~CopyStream() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  std::shared_ptr<CopyState> Issue(void* dst, const void* src, uint64_t bytes) {
    auto state = std::make_shared<CopyState>();
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back({dst, src, bytes, state});
      ++pending_;
    }
    cv_.notify_all();
    return state;
  }

  // Blocks until every issued copy is done.
  void Drain() {
    std::unique_lock<std::mutex> lock(mu_);
    idle_cv_.wait(lock, [&] { return pending_ == 0; });
  }

 private:
  struct Copy {
    void* dst;
    const void* src;
    uint64_t bytes;
    std::shared_ptr<CopyState> state;
  };

  void Run() {
    for (;;) {
      Copy copy;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        copy = queue_.front();
        queue_.pop_front();
      }
      const auto begin = std::chrono::steady_clock::now();
      std::memcpy(copy.dst, copy.src, copy.bytes);
      const auto end = std::chrono::steady_clock::now();
      {
        std::lock_guard<std::mutex> lock(copy.state->mu);
        copy.state->ran = {begin, end};
        copy.state->done = true;
      }
      copy.state->cv.notify_all();
      {
        std::lock_guard<std::mutex> lock(mu_);
        --pending_;
      }
      idle_cv_.notify_all();
    }
  }

  std::mutex mu_;  // Guards queue_, pending_, stopping_.
  std::condition_variable cv_;
  std::condition_variable idle_cv_;
  std::deque<Copy> queue_;
  int pending_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

class CpuBackend : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  bool host_is_device_memory() const override { return true; }

  absl::StatusOr<std::unique_ptr<Buffer>> AllocateDevice(uint64_t bytes) override {
    return AllocateBlock(bytes, "arena");
  }
  absl::StatusOr<std::unique_ptr<Buffer>> AllocateHost(uint64_t bytes) override {
    return AllocateBlock(bytes, "host memory");
  }

  absl::StatusOr<std::unique_ptr<Event>> CopyAsync(CopyDirection direction, void* dst,
                                                   const void* src, uint64_t bytes) override {
    // Compute is synchronous, so everything issued before this call is already done.
    CopyStream& stream = direction == CopyDirection::kToHost ? to_host_ : to_device_;
    return std::unique_ptr<Event>(std::make_unique<CopyEvent>(stream.Issue(dst, src, bytes)));
  }
  absl::Status ComputeWaits(Event& event) override { return event.Wait(); }

  absl::Status Upload(void* device_dst, const void* host_src, uint64_t bytes) override {
    std::memcpy(device_dst, host_src, bytes);
    return absl::OkStatus();
  }
  absl::Status Download(void* host_dst, const void* device_src, uint64_t bytes) override {
    std::memcpy(host_dst, device_src, bytes);
    return absl::OkStatus();
  }
  absl::Status CopyOnDevice(void* dst, const void* src, uint64_t bytes) override {
    std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }

  absl::StatusOr<uint64_t> ScratchBytes(const ForwardArgs& args) override {
    return kernels_.ScratchBytes(args);
  }
  absl::StatusOr<uint64_t> ScratchBytes(const BackwardArgs& args) override {
    return kernels_.ScratchBytes(args);
  }

  absl::Status Forward(const ForwardArgs& args) override { return kernels_.Forward(args); }
  absl::Status Backward(const BackwardArgs& args) override { return kernels_.Backward(args); }
  absl::Status Update(const UpdateArgs& args) override { return kernels_.Update(args); }
  absl::Status Accumulate(const TensorView& out, const TensorView& a,
                          const TensorView& b) override {
    return kernels_.Accumulate(out, a, b);
  }
  absl::Status Fill(const TensorView& out, float value) override {
    if (out.dtype != proto::DTYPE_FLOAT32) {
      return absl::InvalidArgumentError("CPU backend: Fill takes float32 only");
    }
    float* p = out.f32();
    for (int64_t i = 0, n = out.num_elements(); i < n; ++i) p[i] = value;
    return absl::OkStatus();
  }

  absl::Status Synchronize() override {
    to_host_.Drain();
    to_device_.Drain();
    return absl::OkStatus();
  }

  uint64_t workspace_bytes() const override { return kernels_.unplanned_scratch_bytes(); }

 private:
  CpuKernels kernels_;
  CopyStream to_host_;
  CopyStream to_device_;
};

}  // namespace

std::unique_ptr<Backend> CreateCpuBackend() { return std::make_unique<CpuBackend>(); }

}  // namespace headroom::executor::cpu
