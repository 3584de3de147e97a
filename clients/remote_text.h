// Text for people from headroomd's answers: plans, job progress, job and profile tables,
// memory timelines with a chart. Pure functions of the messages (the current time passed in);
// thread-safe. The remote commands (remote_commands.h) print them.
#ifndef HEADROOM_CLIENTS_REMOTE_TEXT_H_
#define HEADROOM_CLIENTS_REMOTE_TEXT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "google/protobuf/message.h"
#include "proto/headroom.pb.h"

namespace headroom::clients {

// Returns "[#######.............]" for step `done` of `total`.
std::string ProgressBar(int64_t done, int64_t total);

// Returns "QUEUED", "RUNNING", ... ("UNSPECIFIED" for the zero value).
std::string JobStateName(proto::JobState state);

// Returns `message` as JSON with the .proto file's field names and every field, zeros
// included; on one line unless `pretty`.
std::string ProtoJson(const google::protobuf::Message& message, bool pretty = false);

// Returns the plan: predicted peak against the budget, step time and overhead, recompute
// and offload, the arena, each section, bytes by role and the frontier when it has one.
std::string PlanText(const proto::PlanResponse& plan);

// Returns the plan in a few lines (peak, slowdown, what is recomputed and offloaded) and its
// sections, for `submit`.
std::string PlanBrief(const proto::PlanResponse& plan);

// Returns one progress line: bar, step/total, loss, step time, memory by role (the largest
// three), measured peak and state.
std::string ProgressLine(const proto::JobProgress& progress);

// Returns a dataset job's "epoch 2/5  val acc 91.20% loss 0.2481 (epoch 2)  input wait
// 0.01%" (the evaluation once one ran; an early stop's reason after).
std::string FitText(const proto::FitProgress& fit);

// Returns a table of `jobs` (ages measured at `now_unix_seconds`), or "no jobs\n".
std::string JobsTable(const std::vector<proto::JobInfo>& jobs, double now_unix_seconds);

// Returns the peak (bytes, step, node, op), its bytes by role and the `rows` largest tensors
// live at it.
std::string PeakText(const proto::MemoryTimeline& timeline, int rows);

// Returns a chart of device bytes over time, `width` columns by `height` rows of '#', each
// column the highest sample in its stretch of time; "no samples\n" without any.
// REQUIRES: width >= 2, height >= 1.
std::string DeviceBytesChart(const proto::MemoryTimeline& timeline, int width, int height);

// Returns one line on the process's memory against the plan ("peak 672.0 MiB = baseline
// 230.1 MiB + arena 429.6 MiB + host pool 0 B + unplanned 12.3 MiB (bound 32.0 MiB)"), or
// why it was not measured.
std::string ProcessMemoryLine(const proto::ProcessMemory& process);

// Returns a profile's summary: measured against predicted peak and step time, offload and
// copy rates, CUPTI's physical memory, PeakText (with the process's memory) and the `rows`
// slowest nodes.
std::string ProfileText(const proto::ProfileResponse& profile, int rows);

// Returns a table of stored profiles (ages at `now_unix_seconds`), or "no profiles\n".
std::string ProfilesTable(const proto::ListProfilesResponse& profiles, double now_unix_seconds);

}  // namespace headroom::clients

#endif  // HEADROOM_CLIENTS_REMOTE_TEXT_H_
