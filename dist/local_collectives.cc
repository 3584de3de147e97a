#include "dist/local_collectives.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace headroom::dist {
namespace {

struct Reduce {
  float* data;
  size_t count;
};

class LocalCollectives : public Collectives {
 public:
  LocalCollectives(LocalGroup* group, int rank) : group_(group), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  std::string name() const override { return "local"; }

  absl::StatusOr<CollectiveHandle> AllreduceAsync(float* data, size_t count, ReduceOp op,
                                                  const std::string& what) override {
    calls_.push_back({"allreduce", what, count});
    Reduce mine{data, count};
    const int n = size();
    group_->Exchange(rank_, &mine, [&](std::vector<void*>& slots) {
      std::vector<float> sum(count, 0.0f);
      for (void* s : slots) {
        const Reduce& r = *static_cast<Reduce*>(s);
        for (size_t i = 0; i < count; ++i) sum[i] += r.data[i];
      }
      if (op == ReduceOp::kAverage) {
        for (float& v : sum) v *= 1.0f / static_cast<float>(n);
      }
      for (void* s : slots) std::memcpy(static_cast<Reduce*>(s)->data, sum.data(), count * 4);
    });
    return CollectiveHandle{next_id_++};
  }

  absl::Status Wait(CollectiveHandle handle) override {
    if (handle.id < 0 || handle.id >= next_id_) {
      return absl::InvalidArgumentError(absl::StrCat("local: no collective ", handle.id));
    }
    return absl::OkStatus();
  }

  absl::Status Broadcast(void* data, size_t bytes, int root, const std::string& what) override {
    calls_.push_back({"broadcast", what, bytes});
    group_->Exchange(rank_, data, [&](std::vector<void*>& slots) {
      for (size_t r = 0; r < slots.size(); ++r) {
        if (static_cast<int>(r) != root) std::memcpy(slots[r], slots[root], bytes);
      }
    });
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<uint64_t>> AllgatherU64(uint64_t value,
                                                     const std::string& what) override {
    calls_.push_back({"allgather", what, 1});
    std::vector<uint64_t> all;
    struct Slot {
      uint64_t value;
      std::vector<uint64_t>* out;
    } mine{value, &all};
    group_->Exchange(rank_, &mine, [&](std::vector<void*>& slots) {
      std::vector<uint64_t> values;
      for (void* s : slots) values.push_back(static_cast<Slot*>(s)->value);
      for (void* s : slots) *static_cast<Slot*>(s)->out = values;
    });
    return all;
  }

  std::vector<LocalCall> calls_;

 private:
  LocalGroup* const group_;
  const int rank_;
  int64_t next_id_ = 0;
};

}  // namespace

LocalGroup::LocalGroup(int size) : size_(size), slots_(size, nullptr) {}

std::unique_ptr<Collectives> LocalGroup::Rank(int rank) {
  return std::make_unique<LocalCollectives>(this, rank);
}

const std::vector<LocalCall>& LocalCalls(const Collectives& collectives) {
  return static_cast<const LocalCollectives&>(collectives).calls_;
}

}  // namespace headroom::dist
