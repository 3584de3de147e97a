// headroomd_rank: one rank of a data-parallel headroomd job (JobSpec.ranks > 1). headroomd
// starts N of them with mpirun (server/job_manager.cc, RunRanks); each trains the job's plan
// on its share of every global batch, as `headroom train --ranks N` does
// (docs/distributed.md), and reports through the job's directory (server/rank_job.h):
//
//   headroomd_rank --dir=DIR --job=ID --budget-bytes=N --planned-peak-bytes=N
//                  --checkpoint-every=N [--collective-timeout=S]
//
// Every rank appends a line to DIR/rank-R.log after each step (the step's loss over the
// global batch, its arena peak, its resident memory); rank 0 alone writes DIR/checkpoint.pb
// every --checkpoint-every steps and after the last; every rank restores DIR/resume.pb
// before its first step where the daemon left one. A rank that fails appends an `error`
// line and exits 1 (mpirun then ends the others). A rank dies with its parent (mpirun's
// launcher), and mpirun with headroomd's job thread, so no rank outlives a killed daemon.
#include <sys/prctl.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "dist/data_parallel.h"
#include "dist/gradient_buckets.h"
#include "dist/launch.h"
#include "dist/mpi_collectives.h"
#include "dist/sync_batch_norm.h"
#include "executor/backends.h"
#include "executor/synthetic_data.h"
#include "executor/trainer.h"
#include "graph/model_source.h"
#include "profiler/process_memory.h"
#include "runner/trainer_options.h"
#include "server/rank_job.h"
#include "util/file_io.h"
#include "util/status_macros.h"

namespace headroom::server {
namespace {

struct WorkerFlags {
  std::string dir;
  std::string job;
  uint64_t budget_bytes = 0;
  uint64_t planned_peak_bytes = 0;
  uint64_t checkpoint_every = 10;
  double collective_timeout = 20;
};

absl::StatusOr<WorkerFlags> ParseFlags(int argc, char** argv) {
  std::map<std::string, std::string> given;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const size_t eq = arg.find('=');
    if (arg.rfind("--", 0) != 0 || eq == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("argument '", arg, "': want --name=value"));
    }
    given[arg.substr(2, eq - 2)] = arg.substr(eq + 1);
  }
  WorkerFlags f;
  auto take = [&](const char* name, auto* value) -> absl::Status {
    auto it = given.find(name);
    if (it == given.end()) return absl::OkStatus();
    bool ok = true;
    if constexpr (std::is_same_v<std::decay_t<decltype(*value)>, std::string>) {
      *value = it->second;
    } else if constexpr (std::is_same_v<std::decay_t<decltype(*value)>, double>) {
      ok = absl::SimpleAtod(it->second, value);
    } else {
      ok = absl::SimpleAtoi(it->second, value);
    }
    given.erase(it);
    if (!ok) return absl::InvalidArgumentError(absl::StrCat("--", name, ": not a number"));
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(take("dir", &f.dir));
  RETURN_IF_ERROR(take("job", &f.job));
  RETURN_IF_ERROR(take("budget-bytes", &f.budget_bytes));
  RETURN_IF_ERROR(take("planned-peak-bytes", &f.planned_peak_bytes));
  RETURN_IF_ERROR(take("checkpoint-every", &f.checkpoint_every));
  RETURN_IF_ERROR(take("collective-timeout", &f.collective_timeout));
  if (!given.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("unknown flag --", given.begin()->first));
  }
  if (f.dir.empty() || f.job.empty()) return absl::InvalidArgumentError("--dir and --job needed");
  return f;
}

// Appends lines to this rank's log, flushed at once: the daemon reads them as they come.
class RankLog {
 public:
  explicit RankLog(const std::string& path) : out_(path, std::ios::app) {}
  void Write(const RankLine& line) { out_ << FormatRankLine(line) << std::flush; }

 private:
  std::ofstream out_;
};

absl::Status Train(const WorkerFlags& f, const dist::RankEnvironment& env, RankLog& log) {
  // 1. The job as the daemon planned it.
  ASSIGN_OR_RETURN(const std::string bytes,
                   ReadFileContents(RankJobFile(f.dir, "spec.pb"), "job spec"));
  proto::JobSpec spec;
  if (!spec.ParseFromString(bytes)) {
    return absl::DataLossError(absl::StrCat(RankJobFile(f.dir, "spec.pb"), " does not parse"));
  }
  if (spec.ranks() != static_cast<uint32_t>(env.size)) {
    return absl::FailedPreconditionError(
        absl::StrCat("the job has ", spec.ranks(), " ranks, but mpirun started ", env.size));
  }
  ASSIGN_OR_RETURN(graph::ResolvedModel model, graph::ResolveModelWithValues(spec.model()));
  ASSIGN_OR_RETURN(graph::Graph g, graph::Graph::FromProto(model.graph));
  const std::string backend_name = spec.train().backend().empty() ? "cpu" : spec.train().backend();
  ASSIGN_OR_RETURN(std::unique_ptr<executor::Backend> backend, executor::MakeBackend(backend_name));
  ASSIGN_OR_RETURN(executor::TrainerOptions options,
                   runner::TrainerOptionsOf(spec.plan(), spec.train().seed(), backend_name));
  options.budget_bytes = f.budget_bytes;
  // 2. The ranks: MPI's collectives, the gradients averaged in buckets while the backward
  //    runs, and the synthetic task at the global batch, which the ranks split.
  dist::MpiOptions mpi;
  mpi.timeout_seconds = f.collective_timeout;
  ASSIGN_OR_RETURN(std::unique_ptr<dist::Collectives> collectives, dist::CreateMpiCollectives(mpi));
  // The plan's bucket size and batch-norm choice (spec.plan.data_parallel), as planned at
  // submit: the plan checked below lays out the same buckets.
  const proto::DataParallelOptions& dp = spec.plan().data_parallel();
  dist::GradientBuckets buckets(collectives.get(), backend.get(), {dp.bucket_bytes()});
  options.gradients = &buckets;
  std::unique_ptr<dist::SyncBatchNorm> batch_norm;
  if (dp.sync_batch_norm()) {
    batch_norm = std::make_unique<dist::SyncBatchNorm>(collectives.get());
    options.batch_norm_sync = batch_norm.get();
  }
  proto::ModelSource global_source = spec.model();
  global_source.mutable_zoo()->set_batch(spec.model().zoo().batch() * spec.ranks());
  ASSIGN_OR_RETURN(proto::GraphDef global_def, graph::ResolveModel(global_source));
  ASSIGN_OR_RETURN(graph::Graph global_graph, graph::Graph::FromProto(global_def));
  ASSIGN_OR_RETURN(executor::SyntheticTask task,
                   executor::SyntheticTask::Create(global_graph, options.seed));
  ASSIGN_OR_RETURN(std::unique_ptr<executor::Trainer> trainer,
                   executor::Trainer::Create(g, backend.get(), options));
  if (trainer->plan().peak_bytes != f.planned_peak_bytes) {
    return absl::InternalError(absl::StrCat("the plan's peak is ", trainer->plan().peak_bytes,
                                            " bytes in the rank, ", f.planned_peak_bytes,
                                            " at submit: a bug"));
  }
  // 3. Lock-step from the start: the same collectives, rank 0's state everywhere; then the
  //    daemon's checkpoint restored on every rank.
  std::vector<dist::CollectiveSpec> sequence = buckets.Sequence();
  if (batch_norm != nullptr) sequence = dist::MergeByPosition(sequence, batch_norm->Sequence());
  sequence.push_back({"allreduce of the step's loss", 1});
  RETURN_IF_ERROR(dist::CheckSequencesAgree(sequence, *collectives));
  RETURN_IF_ERROR(dist::BroadcastState(*trainer, *collectives));
  double loss = 0;
  if (absl::StatusOr<proto::Checkpoint> resume =
          ReadCheckpointFile(RankJobFile(f.dir, "resume.pb"));
      resume.ok()) {
    RETURN_IF_ERROR(
        trainer->RestoreState(static_cast<int64_t>(resume->step()), StateViews(*resume)));
    loss = resume->loss();
  } else if (!absl::IsNotFound(resume.status())) {
    return resume.status();
  }
  RETURN_IF_ERROR(dist::CheckParametersAgree(*trainer, *collectives, trainer->steps_run()));
  // 4. The steps: a line after each; rank 0 checkpoints every interval and after the last.
  const std::string checkpoint = RankJobFile(f.dir, "checkpoint.pb");
  auto write_checkpoint = [&]() -> absl::Status {
    if (env.rank != 0) return absl::OkStatus();
    RETURN_IF_ERROR(WriteCheckpointFile(*trainer, f.job, loss, checkpoint));
    RankLine line;
    line.kind = RankLine::Kind::kCheckpoint;
    line.progress.set_step(static_cast<uint64_t>(trainer->steps_run()));
    line.progress.set_loss(loss);
    log.Write(line);
    return absl::OkStatus();
  };
  const uint64_t total = spec.train().steps();
  while (static_cast<uint64_t>(trainer->steps_run()) < total) {
    ASSIGN_OR_RETURN(
        std::vector<executor::HostTensor> shard,
        dist::RankShard(task.Batch(trainer->steps_run()), trainer->forward(), env.rank, env.size));
    ASSIGN_OR_RETURN(executor::StepResult r, trainer->StepOn(shard));
    // The step's loss over the global batch: the ranks' losses averaged.
    float global_loss = static_cast<float>(r.loss);
    ASSIGN_OR_RETURN(
        dist::CollectiveHandle h,
        collectives->AllreduceAsync(&global_loss, 1, dist::ReduceOp::kAverage,
                                    absl::StrCat("allreduce of step ", r.step, "'s loss")));
    RETURN_IF_ERROR(collectives->Wait(h));
    loss = global_loss;
    RankLine line;
    line.progress.set_step(static_cast<uint64_t>(trainer->steps_run()));
    line.progress.set_loss(loss);
    line.progress.set_arena_peak_bytes(r.arena_high_water_bytes);
    line.step_seconds = r.seconds;
    if (absl::StatusOr<profiler::ProcessMemory> m = profiler::SampleProcessMemory(); m.ok()) {
      line.progress.set_resident_bytes(m->resident_bytes);
    }
    if (absl::StatusOr<uint64_t> peak = profiler::PeakResidentBytes(); peak.ok()) {
      line.progress.set_resident_peak_bytes(*peak);
    }
    log.Write(line);
    const uint64_t done = static_cast<uint64_t>(trainer->steps_run());
    if (done < total && f.checkpoint_every > 0 && done % f.checkpoint_every == 0) {
      RETURN_IF_ERROR(write_checkpoint());
    }
  }
  RETURN_IF_ERROR(dist::CheckParametersAgree(*trainer, *collectives, trainer->steps_run()));
  return write_checkpoint();
}

}  // namespace
}  // namespace headroom::server

int main(int argc, char** argv) {
  using namespace headroom;
  // Dies with its parent (mpirun's launcher): a rank never outlives its job's daemon.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  absl::StatusOr<server::WorkerFlags> flags = server::ParseFlags(argc, argv);
  if (!flags.ok()) {
    std::cerr << "headroomd_rank: " << flags.status().message() << "\n";
    return 2;
  }
  absl::StatusOr<std::optional<dist::RankEnvironment>> env = dist::RankFromEnvironment();
  if (!env.ok() || !env->has_value()) {
    std::cerr << "headroomd_rank: "
              << (env.ok() ? "not started by mpirun (no OMPI_COMM_WORLD_RANK)"
                           : std::string(env.status().message()))
              << "\n";
    return 2;
  }
  server::RankLog log(server::RankLogPath(flags->dir, (*env)->rank));
  const absl::Status status = server::Train(*flags, **env, log);
  if (!status.ok()) {
    server::RankLine line;
    line.kind = server::RankLine::Kind::kError;
    line.error = status.ToString();
    log.Write(line);
    std::cerr << "headroomd_rank " << (*env)->rank << " of " << (*env)->size << ": "
              << status.ToString() << "\n";
    // Without MPI_Finalize: mpirun ends the other ranks.
    std::_Exit(1);
  }
  return 0;
}
