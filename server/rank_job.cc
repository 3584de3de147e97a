#include "server/rank_job.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "util/file_io.h"
#include "util/status_macros.h"

namespace headroom::server {

uint32_t RanksOf(const proto::JobSpec& spec) { return std::max<uint32_t>(1, spec.ranks()); }

absl::Status CheckRanks(const proto::JobSpec& spec, uint32_t max_ranks,
                        const std::string& backend) {
  const uint32_t ranks = RanksOf(spec);
  if (ranks > max_ranks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "spec.ranks: ", ranks, " ranks, more than this daemon's --max-ranks ", max_ranks));
  }
  const proto::DataParallelOptions& dp = spec.plan().data_parallel();
  if (ranks == 1) {
    if (dp.ranks() <= 1 && (dp.bucket_bytes() > 0 || dp.sync_batch_norm())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "spec.plan.data_parallel.", dp.sync_batch_norm() ? "sync_batch_norm" : "bucket_bytes",
          ": applies to a job of several ranks, and spec.ranks is ", spec.ranks()));
    }
    return absl::OkStatus();
  }
  if (dp.ranks() != 0 && dp.ranks() != ranks) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.plan.data_parallel.ranks: ", dp.ranks(), ", but spec.ranks is ", ranks,
                     " (leave it 0: the daemon plans each rank with spec.ranks)"));
  }
  if (!spec.data().dataset().empty()) {
    return absl::UnimplementedError(
        "spec.ranks: a job of several ranks trains the synthetic task; with spec.data it is not "
        "done yet");
  }
  if (!spec.model().has_zoo()) {
    return absl::InvalidArgumentError(
        "spec.ranks: a job of several ranks needs a zoo model (the ranks split the batches of the "
        "model at ranks x batch)");
  }
  if (backend != "cpu") {
    return absl::UnimplementedError(absl::StrCat(
        "spec.ranks: a job of several ranks runs on the cpu backend only, not '", backend, "'"));
  }
  return absl::OkStatus();
}

std::string RankJobFile(const std::string& dir, const std::string& name) {
  return absl::StrCat(dir, "/", name);
}

std::string RankLogPath(const std::string& dir, int rank) {
  return absl::StrCat(dir, "/rank-", rank, ".log");
}

std::string FormatRankLine(const RankLine& line) {
  const proto::RankProgress& p = line.progress;
  switch (line.kind) {
    case RankLine::Kind::kStep:
      return absl::StrFormat("step %d %.17g %.9g %d %d %d\n", p.step(), p.loss(), line.step_seconds,
                             p.arena_peak_bytes(), p.resident_bytes(), p.resident_peak_bytes());
    case RankLine::Kind::kCheckpoint:
      return absl::StrFormat("checkpoint %d %.17g\n", p.step(), p.loss());
    case RankLine::Kind::kError: {
      std::string error = line.error;
      for (char& c : error) {
        if (c == '\n') c = ' ';
      }
      return absl::StrCat("error ", error, "\n");
    }
  }
  return "";
}

absl::StatusOr<RankLine> ParseRankLine(int rank, const std::string& text) {
  RankLine line;
  line.progress.set_rank(static_cast<uint32_t>(rank));
  auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, "'s log: line '", text.substr(0, 200), "' does not parse"));
  };
  if (text.rfind("error ", 0) == 0) {
    line.kind = RankLine::Kind::kError;
    line.error = text.substr(6);
    return line;
  }
  const std::vector<std::string> words = absl::StrSplit(text, ' ');
  uint64_t step = 0;
  double loss = 0;
  if (words.size() < 3 || !absl::SimpleAtoi(words[1], &step) ||
      !absl::SimpleAtod(words[2], &loss)) {
    return bad();
  }
  line.progress.set_step(step);
  line.progress.set_loss(loss);
  if (words[0] == "checkpoint" && words.size() == 3) {
    line.kind = RankLine::Kind::kCheckpoint;
    return line;
  }
  uint64_t arena = 0, resident = 0, resident_peak = 0;
  if (words[0] != "step" || words.size() != 7 || !absl::SimpleAtod(words[3], &line.step_seconds) ||
      !absl::SimpleAtoi(words[4], &arena) || !absl::SimpleAtoi(words[5], &resident) ||
      !absl::SimpleAtoi(words[6], &resident_peak)) {
    return bad();
  }
  line.progress.set_arena_peak_bytes(arena);
  line.progress.set_resident_bytes(resident);
  line.progress.set_resident_peak_bytes(resident_peak);
  return line;
}

std::vector<std::string> RankLogReader::NewLines() {
  std::vector<std::string> lines;
  std::ifstream in(path_, std::ios::binary);
  if (!in) return lines;
  in.seekg(static_cast<std::streamoff>(offset_));
  std::string line;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // no newline yet: the rank is still writing it
    offset_ += line.size() + 1;
    lines.push_back(line);
  }
  return lines;
}

std::vector<executor::StateTensorView> StateViews(const proto::Checkpoint& c) {
  std::vector<executor::StateTensorView> views;
  views.reserve(c.tensors_size());
  for (const proto::TensorValue& v : c.tensors()) {
    views.push_back(
        {v.name(), absl::MakeConstSpan(v.shape().data(), v.shape().size()), v.dtype(),
         absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(v.data().data()), v.data().size())});
  }
  return views;
}

absl::Status WriteCheckpointFile(const executor::Trainer& trainer, const std::string& job_id,
                                 double loss, const std::string& path) {
  proto::Checkpoint c;
  c.set_job_id(job_id);
  c.set_step(static_cast<uint64_t>(trainer.steps_run()));
  c.set_loss(loss);
  const std::vector<executor::StateTensorInfo>& state = trainer.StateTensors();
  for (size_t i = 0; i < state.size(); ++i) {
    const executor::StateTensorInfo& t = state[i];
    proto::TensorValue* v = c.add_tensors();
    v->set_name(t.name);
    for (int64_t d : t.shape) v->add_shape(d);
    v->set_dtype(t.dtype);
    std::string* data = v->mutable_data();
    data->resize(t.bytes);
    RETURN_IF_ERROR(trainer.ReadStateTensor(
        i, absl::MakeSpan(reinterpret_cast<uint8_t*>(data->data()), data->size())));
  }
  const std::string tmp = path + ".tmp";
  RETURN_IF_ERROR(WriteFileContents(tmp, c.SerializeAsString(), "checkpoint"));
  std::error_code error;
  std::filesystem::rename(tmp, path, error);
  if (error) {
    return absl::UnavailableError(
        absl::StrCat("checkpoint '", path, "': renaming '", tmp, "': ", error.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<proto::Checkpoint> ReadCheckpointFile(const std::string& path) {
  std::error_code error;
  if (!std::filesystem::exists(path, error)) {
    return absl::NotFoundError(absl::StrCat("no checkpoint '", path, "'"));
  }
  ASSIGN_OR_RETURN(const std::string bytes, ReadFileContents(path, "checkpoint"));
  proto::Checkpoint c;
  if (!c.ParseFromString(bytes)) {
    return absl::DataLossError(
        absl::StrCat("checkpoint '", path, "' (", bytes.size(), " bytes) does not parse"));
  }
  return c;
}

namespace {

// Returns the last `n` lines of `text`, joined by " | ".
std::string LastLines(const std::string& text, size_t n) {
  std::vector<std::string> lines = absl::StrSplit(text, '\n', absl::SkipWhitespace());
  if (lines.size() > n) lines.erase(lines.begin(), lines.end() - n);
  return absl::StrJoin(lines, " | ");
}

}  // namespace

std::string RankFailure(const std::string& dir, int ranks, const std::string& exit) {
  const absl::StatusOr<std::string> log =
      ReadFileContents(RankJobFile(dir, "mpirun.log"), "mpirun's log");
  const std::string text = log.ok() ? *log : "";
  // A rank killed by a signal, as OpenMPI says it: "mpirun noticed that process rank 1 with
  // PID 123 on node x exited on signal 9 (Killed)." The others' errors then are about it.
  const size_t at = text.find("process rank ");
  if (at != std::string::npos) {
    int rank = -1;
    const size_t start = at + 13;
    const size_t end = text.find(' ', start);
    if (absl::SimpleAtoi(text.substr(start, end - start), &rank)) {
      const size_t line_end = text.find('\n', at);
      return absl::StrCat(
          "rank ", rank, " of ", ranks, " died (mpirun ", exit, "): ",
          text.substr(at, line_end == std::string::npos ? std::string::npos : line_end - at));
    }
  }
  // A rank that stopped on an error of its own.
  for (int r = 0; r < ranks; ++r) {
    RankLogReader reader(RankLogPath(dir, r));
    for (const std::string& line_text : reader.NewLines()) {
      absl::StatusOr<RankLine> line = ParseRankLine(r, line_text);
      if (line.ok() && line->kind == RankLine::Kind::kError) {
        return absl::StrCat("rank ", r, " of ", ranks, " failed: ", line->error);
      }
    }
  }
  return absl::StrCat("the ranks' mpirun ", exit, ": ", LastLines(text, 5));
}

namespace {

// Returns `program` where PATH finds it (as is when it holds a '/').
absl::StatusOr<std::string> FindOnPath(const std::string& program) {
  if (program.find('/') != std::string::npos) return program;
  const char* path = std::getenv("PATH");
  for (const absl::string_view dir : absl::StrSplit(path != nullptr ? path : "", ':')) {
    const std::string candidate = absl::StrCat(dir.empty() ? "." : dir, "/", program);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return absl::NotFoundError(
      absl::StrCat("'", program, "' is not on PATH (is openmpi-bin installed?)"));
}

}  // namespace

absl::StatusOr<int> StartLauncher(const std::vector<std::string>& argv, const std::string& log_path,
                                  bool as_root) {
  if (argv.empty()) return absl::InvalidArgumentError("no command to start");
  ASSIGN_OR_RETURN(const std::string program, FindOnPath(argv[0]));
  // Everything the child needs is made before fork: after it, only async-signal-safe calls.
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.push_back(*e);
  if (as_root) {
    env.push_back("OMPI_ALLOW_RUN_AS_ROOT=1");
    env.push_back("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1");
  }
  std::vector<char*> args, envp;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot open '", log_path, "': ", std::strerror(errno)));
  }
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    const int null = open("/dev/null", O_RDONLY);
    if (null >= 0) dup2(null, 0);
    dup2(log, 1);
    dup2(log, 2);
    execve(program.c_str(), args.data(), envp.data());
    _exit(127);
  }
  const int fork_errno = errno;
  close(log);
  if (pid < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot start '", program, "': fork: ", std::strerror(fork_errno)));
  }
  setpgid(pid, pid);  // also here, so that the group exists before StopLauncher can signal it
  return static_cast<int>(pid);
}

void StopLauncher(int pid, double grace_seconds) {
  kill(-pid, SIGTERM);
  kill(pid, SIGTERM);
  for (double waited = 0; waited < grace_seconds; waited += 0.05) {
    if (waitpid(pid, nullptr, WNOHANG) == pid) {
      kill(-pid, SIGKILL);  // any rank left in the group
      return;
    }
    usleep(50000);
  }
  kill(-pid, SIGKILL);
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

}  // namespace headroom::server
