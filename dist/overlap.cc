#include "dist/overlap.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "util/median.h"
#include "util/status_macros.h"

namespace headroom::dist {
namespace {

constexpr int kTimesPerBucket = 4;
// The gathered floats at most (the steps kept shrink to fit, down to one).
constexpr uint64_t kMaxGatheredFloats = uint64_t{4} << 20;

// Returns the length of the union of `intervals` (start, end), ends before starts ignored.
double UnionLength(std::vector<std::pair<double, double>> intervals) {
  std::sort(intervals.begin(), intervals.end());
  double total = 0;
  double start = 0, end = 0;
  bool open = false;
  for (const auto& [s, e] : intervals) {
    if (e <= s) continue;
    if (open && s <= end) {
      end = std::max(end, e);
      continue;
    }
    if (open) total += end - start;
    start = s;
    end = e;
    open = true;
  }
  if (open) total += end - start;
  return total;
}

// Returns a rank's waits in one step from its `buckets`' times and `last_issue` by bucket;
// adds each bucket's exposed communication times `weight` to `exposed_by_bucket`.
StepOverlap RankStep(const std::vector<BucketTimes>& buckets, const std::vector<double>& last_issue,
                     double weight, std::vector<double>& exposed_by_bucket) {
  StepOverlap o;
  std::vector<std::pair<double, double>> in_flight;
  for (size_t k = 0; k < buckets.size(); ++k) {
    const BucketTimes& t = buckets[k];
    const double waited = std::max(0.0, t.wait_end - t.wait_start);
    const double imbalance =
        std::clamp(std::min(t.wait_end, last_issue[k]) - t.wait_start, 0.0, waited);
    o.waited_seconds += waited;
    o.imbalance_seconds += imbalance;
    o.exposed_seconds += waited - imbalance;
    exposed_by_bucket[k] += weight * (waited - imbalance);
    in_flight.push_back({last_issue[k], t.completed});
  }
  o.communication_seconds = UnionLength(std::move(in_flight));
  return o;
}

}  // namespace

double OverlapReport::hidden_share() const {
  if (median.communication_seconds <= 0) return 1;
  return std::max(0.0, 1 - median.exposed_seconds / median.communication_seconds);
}

std::string OverlapReport::DebugString() const {
  // The buckets that exposed the most, up to three.
  std::vector<int> worst;
  for (size_t k = 0; k < exposed_by_bucket.size(); ++k) {
    if (exposed_by_bucket[k] > 0) worst.push_back(static_cast<int>(k));
  }
  std::sort(worst.begin(), worst.end(),
            [&](int a, int b) { return exposed_by_bucket[a] > exposed_by_bucket[b]; });
  if (worst.size() > 3) worst.resize(3);
  std::string most = absl::StrJoin(worst, ", ", [&](std::string* out, int k) {
    absl::StrAppendFormat(out, "bucket %d %.4f s", k, exposed_by_bucket[k]);
  });
  return absl::StrFormat(
      "%d rank(s), %d bucket(s), %d step(s); medians per step: waited %.4f s, of it imbalance "
      "%.4f s and exposed communication %.4f s%s; communication in flight %.4f s; hidden "
      "%.1f%%",
      ranks, buckets, steps.size(), median.waited_seconds, median.imbalance_seconds,
      median.exposed_seconds, most.empty() ? "" : absl::StrCat(" (most: ", most, ")"),
      median.communication_seconds, 100 * hidden_share());
}

absl::StatusOr<OverlapReport> AnalyseOverlap(absl::Span<const RankTimeline> ranks) {
  if (ranks.empty() || ranks[0].steps.empty() || ranks[0].steps[0].empty()) {
    return absl::InvalidArgumentError("allreduce overlap: no rank recorded a bucket's times");
  }
  const size_t steps = ranks[0].steps.size();
  const size_t buckets = ranks[0].steps[0].size();
  for (size_t r = 0; r < ranks.size(); ++r) {
    bool same = ranks[r].steps.size() == steps;
    for (size_t s = 0; same && s < steps; ++s) same = ranks[r].steps[s].size() == buckets;
    if (!same) {
      return absl::InvalidArgumentError(absl::StrCat(
          "allreduce overlap: rank ", r, "'s timeline differs in steps or buckets from rank 0's (",
          steps, " steps of ", buckets, " buckets)"));
    }
  }
  OverlapReport report;
  report.ranks = static_cast<int>(ranks.size());
  report.buckets = static_cast<int>(buckets);
  std::vector<std::vector<double>> by_bucket_and_step;
  for (size_t s = 0; s < steps; ++s) {
    std::vector<double> last_issue(buckets, 0);
    for (size_t k = 0; k < buckets; ++k) {
      last_issue[k] = ranks[0].steps[s][k].issued;
      for (const RankTimeline& r : ranks) {
        last_issue[k] = std::max(last_issue[k], r.steps[s][k].issued);
      }
    }
    StepOverlap mean;
    std::vector<double>& exposed = by_bucket_and_step.emplace_back(buckets, 0.0);
    for (const RankTimeline& r : ranks) {
      const StepOverlap o = RankStep(r.steps[s], last_issue, 1.0 / ranks.size(), exposed);
      mean.waited_seconds += o.waited_seconds / ranks.size();
      mean.imbalance_seconds += o.imbalance_seconds / ranks.size();
      mean.exposed_seconds += o.exposed_seconds / ranks.size();
      mean.communication_seconds += o.communication_seconds / ranks.size();
    }
    report.steps.push_back(mean);
  }
  auto median_of = [&](double StepOverlap::*field) {
    std::vector<double> v;
    for (const StepOverlap& o : report.steps) v.push_back(o.*field);
    return Median(std::move(v));
  };
  report.median = {
      median_of(&StepOverlap::waited_seconds), median_of(&StepOverlap::imbalance_seconds),
      median_of(&StepOverlap::exposed_seconds), median_of(&StepOverlap::communication_seconds)};
  for (size_t k = 0; k < buckets; ++k) {
    std::vector<double> v;
    for (const std::vector<double>& step : by_bucket_and_step) v.push_back(step[k]);
    report.exposed_by_bucket.push_back(Median(std::move(v)));
  }
  return report;
}

absl::StatusOr<std::vector<RankTimeline>> GatherTimelines(const RankTimeline& mine,
                                                          Collectives& collectives) {
  const uint64_t buckets = mine.steps.empty() ? 0 : mine.steps[0].size();
  for (const std::vector<BucketTimes>& step : mine.steps) {
    if (step.size() != buckets) {
      return absl::InvalidArgumentError(
          "allreduce overlap: this rank's steps differ in their number of buckets");
    }
  }
  const uint64_t ranks = static_cast<uint64_t>(collectives.size());
  const uint64_t floats_per_step = std::max<uint64_t>(1, ranks * buckets * kTimesPerBucket * 2);
  const uint64_t kept = std::min<uint64_t>(
      mine.steps.size(), std::max<uint64_t>(1, kMaxGatheredFloats / floats_per_step));
  // Compare the shapes first: the allreduce below must be the same size on every rank.
  ASSIGN_OR_RETURN(std::vector<uint64_t> shapes,
                   collectives.AllgatherU64((kept << 32) | buckets,
                                            "allgather of the allreduce timelines' shapes"));
  std::vector<int> differ;
  for (size_t r = 0; r < shapes.size(); ++r) {
    if (shapes[r] != shapes[0]) differ.push_back(static_cast<int>(r));
  }
  if (!differ.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("allreduce overlap: rank(s) ", absl::StrJoin(differ, ", "),
                     " recorded other step or bucket counts than rank 0 (", shapes[0] >> 32,
                     " steps of ", shapes[0] & 0xffffffffu, " buckets)"));
  }
  if (kept == 0 || buckets == 0) return std::vector<RankTimeline>(ranks);
  const uint64_t per_rank = kept * buckets * kTimesPerBucket * 2;
  std::vector<float> all(per_rank * ranks, 0.0f);
  const size_t first = mine.steps.size() - kept;
  float* out = all.data() + per_rank * collectives.rank();
  for (size_t s = first; s < mine.steps.size(); ++s) {
    for (const BucketTimes& t : mine.steps[s]) {
      for (double x : {t.issued, t.completed, t.wait_start, t.wait_end}) {
        const float hi = static_cast<float>(x);
        *out++ = hi;
        *out++ = static_cast<float>(x - static_cast<double>(hi));
      }
    }
  }
  ASSIGN_OR_RETURN(CollectiveHandle h,
                   collectives.AllreduceAsync(all.data(), all.size(), ReduceOp::kSum,
                                              "allreduce of the allreduce timelines"));
  RETURN_IF_ERROR(collectives.Wait(h));
  std::vector<RankTimeline> timelines(ranks);
  const float* in = all.data();
  auto next = [&in] {
    const double x = static_cast<double>(in[0]) + static_cast<double>(in[1]);
    in += 2;
    return x;
  };
  for (RankTimeline& r : timelines) {
    r.steps.assign(kept, std::vector<BucketTimes>(buckets));
    for (std::vector<BucketTimes>& step : r.steps) {
      for (BucketTimes& t : step) {
        t.issued = next();
        t.completed = next();
        t.wait_start = next();
        t.wait_end = next();
      }
    }
  }
  return timelines;
}

}  // namespace headroom::dist
