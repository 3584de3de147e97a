// A data-parallel headroomd job (JobSpec.ranks > 1): what the daemon and its rank workers
// (server/rank_worker_main.cc, the `headroomd_rank` binary that mpirun starts) share. The
// daemon's job runner and the ranks talk through files in the job's directory
// (STATE/ranks/JOB/), never through a socket, so a daemon killed and started again finds
// what the ranks left:
//
//   spec.pb        the JobSpec, written by the daemon before it starts mpirun
//   resume.pb      the store's checkpoint of the job (a proto::Checkpoint), written by the
//                  daemon where it has one; every rank restores it before its first step
//   checkpoint.pb  rank 0's newest checkpoint (written whole to a temporary, then renamed)
//   rank-R.log     rank R's lines, appended and flushed after every step (RankLine)
//   mpirun.log     mpirun's own output (what it says when a rank dies)
//
// Also the process that runs them: StartLauncher() forks mpirun, StopLauncher() ends it and
// every rank.
//
// Stateless functions and a line reader; thread-compatible.
#ifndef HEADROOM_SERVER_RANK_JOB_H_
#define HEADROOM_SERVER_RANK_JOB_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "executor/trainer.h"
#include "proto/headroom.pb.h"

namespace headroom::server {

// The most ranks a job may ask for whatever --max-ranks says: far beyond one host's cores.
inline constexpr uint32_t kMaxRanksCeiling = 1024;

// Returns the ranks of `spec`: JobSpec.ranks, 1 where 0.
uint32_t RanksOf(const proto::JobSpec& spec);

// Returns OK when `spec`'s ranks are within `max_ranks` (headroomd's --max-ranks) and a job
// of several ranks is one they can train: a zoo model, the CPU backend `backend`, no
// dataset. InvalidArgument or Unimplemented naming spec.ranks; InvalidArgument naming
// spec.plan.data_parallel where its ranks are not 0 or spec.ranks, or where its
// bucket_bytes or sync_batch_norm is set for one rank (they shape the ranks' buckets and
// batch norms, headroomd_rank).
absl::Status CheckRanks(const proto::JobSpec& spec, uint32_t max_ranks, const std::string& backend);

// Returns the path of `name` (one of the files above) in job directory `dir`.
std::string RankJobFile(const std::string& dir, const std::string& name);
// Returns the path of rank `rank`'s log in `dir`: rank-R.log.
std::string RankLogPath(const std::string& dir, int rank);

// One line a rank appends to its log.
struct RankLine {
  enum class Kind { kStep, kCheckpoint, kError };
  Kind kind = Kind::kStep;
  // kStep: the step's progress (step is the steps done after it). kCheckpoint: rank 0
  // wrote checkpoint.pb after `step` steps.
  proto::RankProgress progress;
  double step_seconds = 0;
  // kError: why the rank stopped.
  std::string error;
};

// Returns `line` as one text line, newline included ("step 3 0.5 0.01 1024 2048 4096\n").
std::string FormatRankLine(const RankLine& line);

// Returns the line parsed (without its newline). InvalidArgument naming the line when it is
// not one FormatRankLine() writes.
absl::StatusOr<RankLine> ParseRankLine(int rank, const std::string& text);

// Reads the complete lines appended to a file since the last call (a line being written
// without its newline yet waits for the next call). A missing file has no lines yet.
class RankLogReader {
 public:
  explicit RankLogReader(std::string path) : path_(std::move(path)) {}
  // Returns the new complete lines, without their newlines.
  std::vector<std::string> NewLines();

 private:
  const std::string path_;
  uint64_t offset_ = 0;
};

// Returns the checkpoint's tensors as the trainer restores them, borrowed from `c`.
std::vector<executor::StateTensorView> StateViews(const proto::Checkpoint& c);

// Writes `trainer`'s state now as a serialized proto::Checkpoint of job `job_id` at `path`:
// into `path`.tmp, then renamed, so a reader sees the previous file or this one whole. The
// state is held once in host memory while it is written. Unavailable naming the file.
absl::Status WriteCheckpointFile(const executor::Trainer& trainer, const std::string& job_id,
                                 double loss, const std::string& path);

// Returns the checkpoint stored at `path`. NotFound when there is none; DataLoss naming the
// file when it does not parse.
absl::StatusOr<proto::Checkpoint> ReadCheckpointFile(const std::string& path);

// Returns why a job of `ranks` ranks in `dir` failed, naming the rank: the first rank's
// error line, else the rank mpirun reports ("mpirun noticed that process rank 1 ... exited
// on signal 9"), else mpirun's `exit` description; with the log's last lines.
std::string RankFailure(const std::string& dir, int ranks, const std::string& exit);

// Returns the pid of `argv` (argv[0] found on PATH unless a path) started in a process
// group of its own, its output and errors appended to `log_path`, with the environment
// and, when `as_root`, OMPI_ALLOW_RUN_AS_ROOT=1 and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
// (mpirun refuses root otherwise). It is SIGKILLed when the calling thread ends (a killed
// daemon leaves no launcher behind). NotFound naming argv[0] when it is not on PATH.
absl::StatusOr<int> StartLauncher(const std::vector<std::string>& argv, const std::string& log_path,
                                  bool as_root);

// Returns once process `pid` (a StartLauncher() group leader) and its group are gone:
// SIGTERM to the group (mpirun passes it to every rank), then SIGKILL after `grace_seconds`.
void StopLauncher(int pid, double grace_seconds);

}  // namespace headroom::server

#endif  // HEADROOM_SERVER_RANK_JOB_H_
