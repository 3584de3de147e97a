#include "dist/data_parallel.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "util/status_macros.h"

namespace headroom::dist {
namespace {

constexpr uint64_t kFnvOffset = 14695981039346656037ull;
constexpr uint64_t kFnvPrime = 1099511628211ull;

uint64_t Fnv1a(uint64_t hash, const uint8_t* data, size_t bytes) {
  for (size_t i = 0; i < bytes; ++i) hash = (hash ^ data[i]) * kFnvPrime;
  return hash;
}

// Returns the ranks whose value differs from rank 0's.
std::vector<int> RanksDiffering(const std::vector<uint64_t>& values) {
  std::vector<int> ranks;
  for (size_t r = 1; r < values.size(); ++r) {
    if (values[r] != values[0]) ranks.push_back(static_cast<int>(r));
  }
  return ranks;
}

}  // namespace

namespace {

// Returns a 64-bit FNV-1a hash of the persistent tensors (only parameters when
// `parameters_only`), in order, read one at a time through one buffer of the largest.
absl::StatusOr<uint64_t> StateHash(const executor::Trainer& trainer, bool parameters_only) {
  const std::vector<executor::StateTensorInfo>& infos = trainer.StateTensors();
  uint64_t largest = 0;
  for (const executor::StateTensorInfo& info : infos) largest = std::max(largest, info.bytes);
  std::vector<uint8_t> buffer(largest);
  uint64_t hash = kFnvOffset;
  for (size_t i = 0; i < infos.size(); ++i) {
    if (parameters_only) {
      const graph::TensorId id = trainer.forward().FindTensor(infos[i].name);
      if (id < 0 || trainer.forward().tensor(id).role != proto::ROLE_PARAMETER) continue;
    }
    const absl::Span<uint8_t> value(buffer.data(), infos[i].bytes);
    RETURN_IF_ERROR(trainer.ReadStateTensor(i, value));
    hash = Fnv1a(hash, value.data(), value.size());
  }
  return hash;
}

}  // namespace

absl::Status BroadcastState(executor::Trainer& trainer, Collectives& collectives) {
  // Ranks that start alike (the same seed and model) already hold rank 0's state: compare
  // hashes first, so the state crosses the wire, and is held whole in host memory, only
  // where some rank differs.
  ASSIGN_OR_RETURN(const uint64_t mine, StateHash(trainer, /*parameters_only=*/false));
  int64_t steps_run = trainer.steps_run();
  ASSIGN_OR_RETURN(const std::vector<uint64_t> hashes,
                   collectives.AllgatherU64(mine ^ static_cast<uint64_t>(steps_run),
                                            "hash of the state before the broadcast"));
  if (RanksDiffering(hashes).empty()) return absl::OkStatus();
  const std::vector<executor::StateTensorInfo>& infos = trainer.StateTensors();
  std::vector<std::vector<uint8_t>> values(infos.size());
  std::vector<executor::StateTensorView> views;
  for (size_t i = 0; i < infos.size(); ++i) {
    values[i].resize(infos[i].bytes);
    if (collectives.rank() == 0) {
      RETURN_IF_ERROR(trainer.ReadStateTensor(i, absl::MakeSpan(values[i])));
    }
    RETURN_IF_ERROR(collectives.Broadcast(values[i].data(), values[i].size(), 0,
                                          absl::StrCat("broadcast of '", infos[i].name, "'")));
    views.push_back({infos[i].name, infos[i].shape, infos[i].dtype, values[i]});
  }
  RETURN_IF_ERROR(
      collectives.Broadcast(&steps_run, sizeof(steps_run), 0, "broadcast of the steps run"));
  return trainer.RestoreState(steps_run, views);
}

absl::StatusOr<uint64_t> ParameterChecksum(const executor::Trainer& trainer) {
  return StateHash(trainer, /*parameters_only=*/true);
}

absl::Status CheckParametersAgree(const executor::Trainer& trainer, Collectives& collectives,
                                  int64_t steps_run) {
  ASSIGN_OR_RETURN(const uint64_t mine, ParameterChecksum(trainer));
  ASSIGN_OR_RETURN(const std::vector<uint64_t> all,
                   collectives.AllgatherU64(
                       mine, absl::StrCat("parameter checksum after ", steps_run, " steps")));
  const std::vector<int> differ = RanksDiffering(all);
  if (differ.empty()) return absl::OkStatus();
  std::vector<std::string> values;
  for (size_t r = 0; r < all.size(); ++r) values.push_back(absl::StrCat("rank ", r, " ", all[r]));
  return absl::FailedPreconditionError(
      absl::StrCat("the ranks' parameters diverged after ", steps_run, " steps: rank(s) ",
                   absl::StrJoin(differ, ", "),
                   " differ from rank 0 (checksums: ", absl::StrJoin(values, ", "), ")"));
}

uint64_t SequenceHash(absl::Span<const CollectiveSpec> sequence) {
  uint64_t hash = kFnvOffset;
  const uint64_t n = sequence.size();
  hash = Fnv1a(hash, reinterpret_cast<const uint8_t*>(&n), sizeof(n));
  for (const CollectiveSpec& c : sequence) {
    hash = Fnv1a(hash, reinterpret_cast<const uint8_t*>(&c.count), sizeof(c.count));
  }
  return hash;
}

absl::Status CheckSequencesAgree(absl::Span<const CollectiveSpec> sequence,
                                 Collectives& collectives) {
  ASSIGN_OR_RETURN(const std::vector<uint64_t> hashes,
                   collectives.AllgatherU64(SequenceHash(sequence), "collective sequence hash"));
  const std::vector<int> differ = RanksDiffering(hashes);
  if (differ.empty()) return absl::OkStatus();
  // Find the first collective that differs: every rank takes part in every round.
  ASSIGN_OR_RETURN(const std::vector<uint64_t> lengths,
                   collectives.AllgatherU64(sequence.size(), "collective sequence length"));
  const uint64_t longest = *std::max_element(lengths.begin(), lengths.end());
  std::string first = "none (the sequences differ only in length)";
  for (uint64_t k = 0; k < longest; ++k) {
    // 0 for "no such collective", else its size plus one.
    const uint64_t mine = k < sequence.size() ? sequence[k].count + 1 : 0;
    ASSIGN_OR_RETURN(const std::vector<uint64_t> sizes,
                     collectives.AllgatherU64(mine, absl::StrCat("collective ", k, " size")));
    if (RanksDiffering(sizes).empty()) continue;
    std::vector<std::string> each;
    for (size_t r = 0; r < sizes.size(); ++r) {
      each.push_back(sizes[r] == 0 ? absl::StrCat("none on rank ", r)
                                   : absl::StrCat(sizes[r] - 1, " floats on rank ", r));
    }
    first = absl::StrCat("collective #", k, " (here on rank ", collectives.rank(), ": ",
                         k < sequence.size() ? sequence[k].what : "none",
                         "): ", absl::StrJoin(each, ", "));
    break;
  }
  std::vector<std::string> counts;
  for (size_t r = 0; r < lengths.size(); ++r) {
    counts.push_back(absl::StrCat(lengths[r], " on rank ", r));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "the ranks would issue different collectives each step (a different model, batch, plan, "
      "bucket size or --sync-batchnorm?): rank(s) ",
      absl::StrJoin(differ, ", "), " differ from rank 0; collectives per step: ",
      absl::StrJoin(counts, ", "), "; the first difference: ", first));
}

absl::StatusOr<std::vector<executor::HostTensor>> RankShard(
    const std::vector<executor::HostTensor>& global, const graph::Graph& forward, int rank,
    int ranks) {
  if (ranks < 1 || rank < 0 || rank >= ranks) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " is outside [0, ", ranks, ")"));
  }
  std::vector<executor::HostTensor> shard;
  for (const executor::HostTensor& t : global) {
    const graph::TensorId id = forward.FindTensor(t.name);
    if (id < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("batch tensor '", t.name, "' is not a tensor of the model"));
    }
    const graph::Shape& mine = forward.tensor(id).shape;
    if (t.shape == mine) {  // the same for every sample: every rank reads it whole
      shard.push_back(t);
      continue;
    }
    graph::Shape split = t.shape;
    if (!split.empty() && split[0] % ranks == 0) split[0] /= ranks;
    if (split != mine) {
      return absl::InvalidArgumentError(
          absl::StrCat("batch tensor '", t.name, "' is ", graph::ShapeString(t.shape),
                       " at the global batch and ", graph::ShapeString(mine), " at a rank's: not ",
                       ranks, " rank(s) split along dim 0"));
    }
    executor::HostTensor part = executor::MakeHostTensor(t.name, split, t.dtype);
    const size_t bytes = part.bytes.size();
    std::copy(t.bytes.begin() + rank * bytes, t.bytes.begin() + (rank + 1) * bytes,
              part.bytes.begin());
    shard.push_back(std::move(part));
  }
  return shard;
}

}  // namespace headroom::dist
