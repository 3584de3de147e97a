// headroomd on a full disk, for real: its state directory is a 32 MiB tmpfs, mounted in a
// mount namespace of this test's own (so it goes away with the test), and filled to the last
// byte between two daemons.
//
//  1. A job trains on an empty disk and is stopped by SIGTERM with its checkpoint (step S).
//  2. The disk is filled. headroomd starts anyway (SQLite cannot write the shared-memory
//     index a WAL reader needs, so the store falls back to its exclusive lock) and serves
//     ListJobs and GetJob; the job resumes from step S and keeps training, its checkpoints
//     failing; a new job is refused with RESOURCE_EXHAUSTED naming the state directory.
//  3. Space is freed; the next daemon resumes the job from step S again: no failed
//     checkpoint touched the last good one. New jobs are accepted again.
//
// Needs root (mount(2)); skipped otherwise. CI runs as root.
#include <errno.h>
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/headroom.grpc.pb.h"
#include "server/daemon_process.h"

namespace headroom {
namespace {

using server::DaemonProcess;
using ::testing::HasSubstr;

constexpr uint64_t kMiB = 1024 * 1024;

std::string TmpDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

// An MLP whose checkpoint (parameters and momentum) is about 4.3 MiB: larger than anything
// else the daemon writes, so that on a full disk its checkpoints fail first. About 10 ms a
// step.
proto::JobSpec MlpJob(const std::string& name) {
  proto::JobSpec spec;
  spec.set_name(name);
  proto::ZooModel* zoo = spec.mutable_model()->mutable_zoo();
  zoo->set_name("mlp");
  zoo->set_batch(512);
  (*zoo->mutable_options())["depth"] = 8;
  (*zoo->mutable_options())["width"] = 256;
  (*zoo->mutable_options())["input"] = 64;
  spec.mutable_plan()->set_host_memory(proto::HOST_MEMORY_SEPARATE);
  spec.mutable_train()->set_steps(1000000);
  spec.mutable_train()->set_seed(7);
  spec.mutable_train()->set_checkpoint_interval_steps(5);
  return spec;
}

std::unique_ptr<DaemonProcess> StartDaemon(const std::string& state) {
  static int started = 0;
  server::DaemonOptions options;
  options.binary = absl::StrCat(std::getenv("TEST_SRCDIR"), "/headroom/server/headroomd");
  options.state_dir = state;
  options.log_path = absl::StrCat(TmpDir(), "/headroomd-", ++started, ".log");
  options.flags = {"--device-memory", "64MiB", "--fixed-cost", "0"};
  options.env = {"OMP_NUM_THREADS=1"};
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon = DaemonProcess::Start(options);
  EXPECT_TRUE(daemon.ok()) << daemon.status();
  return daemon.ok() ? *std::move(daemon) : nullptr;
}

void Stop(std::unique_ptr<DaemonProcess>& daemon) {
  const absl::StatusOr<int> exit_code = daemon->Terminate();
  EXPECT_TRUE(exit_code.ok()) << exit_code.status();
  EXPECT_EQ(exit_code.value_or(-1), 0) << daemon->LogTail();
}

grpc::Status TrySubmit(proto::Headroom::Stub& stub, const proto::JobSpec& spec,
                       proto::SubmitJobResponse* response) {
  proto::SubmitJobRequest request;
  *request.mutable_spec() = spec;
  grpc::ClientContext context;
  return stub.SubmitJob(&context, request, response);
}

// Returns job `job_id` by GetJob; fails the test on an error.
proto::JobInfo GetJob(proto::Headroom::Stub& stub, const std::string& job_id) {
  proto::GetJobRequest request;
  request.set_job_id(job_id);
  proto::JobInfo info;
  grpc::ClientContext context;
  const grpc::Status s = stub.GetJob(&context, request, &info);
  EXPECT_TRUE(s.ok()) << s.error_code() << ": " << s.error_message();
  return info;
}

// Returns the job once `until` holds for it (polled every 50 ms, for up to two minutes).
proto::JobInfo WaitFor(proto::Headroom::Stub& stub, const std::string& job_id,
                       const std::function<bool(const proto::JobInfo&)>& until) {
  proto::JobInfo info;
  for (int i = 0; i < 2400; ++i) {
    info = GetJob(stub, job_id);
    if (until(info)) return info;
    usleep(50 * 1000);
  }
  ADD_FAILURE() << "job " << job_id << " never got there: " << info.DebugString();
  return info;
}

// Fills the filesystem of `dir` to its last byte with the file `dir`/filler.
void Fill(const std::string& dir) {
  const std::string path = dir + "/filler";
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0) << path << ": " << strerror(errno);
  std::vector<char> block(1 << 20, 'x');
  for (size_t size = block.size(); size >= 512; size /= 2) {
    while (write(fd, block.data(), size) == static_cast<ssize_t>(size)) {
    }
  }
  EXPECT_EQ(errno, ENOSPC);
  close(fd);
}

TEST(FullDiskE2ETest, NewJobsAreRefusedTheLastCheckpointIsKeptAndTheDaemonStartsWhileFull) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to mount a tmpfs";
  // A mount namespace of this process (and its daemons): the tmpfs goes with it.
  ASSERT_EQ(unshare(CLONE_NEWNS), 0) << "unshare: " << strerror(errno);
  ASSERT_EQ(mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr), 0) << strerror(errno);
  const std::string state = TmpDir() + "/full-disk-state";
  std::filesystem::create_directories(state);
  ASSERT_EQ(mount("tmpfs", state.c_str(), "tmpfs", 0, "size=32m"), 0)
      << "mount tmpfs: " << strerror(errno);

  // 1. Room: the job trains and is stopped with its checkpoint.
  std::unique_ptr<DaemonProcess> daemon = StartDaemon(state);
  ASSERT_NE(daemon, nullptr);
  auto stub = daemon->NewStub();
  proto::SubmitJobResponse submitted;
  grpc::Status s = TrySubmit(*stub, MlpJob("long"), &submitted);
  ASSERT_TRUE(s.ok()) << s.error_message();
  const std::string job = submitted.job_id();
  WaitFor(*stub, job, [](const proto::JobInfo& j) { return j.step() >= 12; });
  stub.reset();
  Stop(daemon);

  // 2. Full: it starts, serves, refuses new jobs, and the job trains on past failing
  //    checkpoints.
  Fill(state);
  daemon = StartDaemon(state);
  ASSERT_NE(daemon, nullptr) << "headroomd does not start on a full disk";
  stub = daemon->NewStub();
  proto::ListJobsResponse listed;
  {
    grpc::ClientContext context;
    s = stub->ListJobs(&context, proto::ListJobsRequest(), &listed);
    ASSERT_TRUE(s.ok()) << s.error_code() << ": " << s.error_message();
  }
  ASSERT_EQ(listed.jobs_size(), 1);
  EXPECT_EQ(listed.jobs(0).job_id(), job);
  const proto::JobInfo resumed =
      WaitFor(*stub, job, [](const proto::JobInfo& j) { return j.resumed_from_step() > 0; });
  const uint64_t last_good = resumed.resumed_from_step();
  std::printf("on the full disk the job resumed from step %llu\n",
              static_cast<unsigned long long>(last_good));
  const proto::JobInfo later = WaitFor(*stub, job, [&](const proto::JobInfo& j) {
    return j.step() >= last_good + 12 || j.state() != proto::JOB_STATE_RUNNING;
  });
  EXPECT_EQ(later.state(), proto::JOB_STATE_RUNNING) << later.error();
  s = TrySubmit(*stub, MlpJob("refused"), &submitted);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_THAT(s.error_message(),
              HasSubstr("the disk holding the state directory '" + state + "' is full"));
  std::printf("Submit on the full disk: %s\n", s.error_message().c_str());
  stub.reset();
  Stop(daemon);
  EXPECT_THAT(daemon->LogTail(100000), HasSubstr("is not stored"));

  // 3. Room again: the job resumes from the same checkpoint, and jobs are accepted.
  ASSERT_EQ(unlink((state + "/filler").c_str()), 0);
  daemon = StartDaemon(state);
  ASSERT_NE(daemon, nullptr);
  stub = daemon->NewStub();
  const proto::JobInfo again =
      WaitFor(*stub, job, [](const proto::JobInfo& j) { return j.resumed_from_step() > 0; });
  EXPECT_EQ(again.resumed_from_step(), last_good)
      << "a checkpoint that failed on the full disk replaced the last good one";
  s = TrySubmit(*stub, MlpJob("accepted"), &submitted);
  EXPECT_TRUE(s.ok()) << s.error_message();
  stub.reset();
  Stop(daemon);
}

}  // namespace
}  // namespace headroom
