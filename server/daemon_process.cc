#include "server/daemon_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "grpcpp/grpcpp.h"
#include "util/status_macros.h"

extern char** environ;

namespace headroom::server {
namespace {

// Returns the inherited environment with `extra` ("NAME=VALUE") added or replacing.
std::vector<std::string> Environment(const std::vector<std::string>& extra) {
  std::map<std::string, std::string> vars;
  auto add = [&vars](const std::string& entry) {
    const size_t eq = entry.find('=');
    vars[entry.substr(0, eq)] = entry;
  };
  for (char** e = environ; *e != nullptr; ++e) add(*e);
  for (const std::string& e : extra) add(e);
  std::vector<std::string> env;
  for (auto& [name, entry] : vars) env.push_back(std::move(entry));
  return env;
}

std::vector<char*> CStrings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DaemonProcess>> DaemonProcess::Spawn(DaemonOptions options) {
  if (options.binary.empty() || options.state_dir.empty() || options.log_path.empty()) {
    return absl::InvalidArgumentError("DaemonOptions: binary, state_dir and log_path are required");
  }
  const std::string ready = options.log_path + ".ready";
  std::remove(ready.c_str());
  std::vector<std::string> args = {options.binary,  "--listen",      options.listen,
                                   "--state",       options.state_dir, "--ready-file",
                                   ready,           "--metrics",
                                   options.metrics ? "127.0.0.1:0" : "off"};
  args.insert(args.end(), options.flags.begin(), options.flags.end());
  std::vector<std::string> env = Environment(options.env);
  std::vector<char*> argv = CStrings(args);
  std::vector<char*> envp = CStrings(env);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, options.log_path.c_str(),
                                   O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = -1;
  const int err = posix_spawn(&pid, options.binary.c_str(), &actions, nullptr, argv.data(),
                              envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (err != 0) {
    return absl::InternalError(absl::StrCat("cannot start ", options.binary, ": ",
                                            strerror(err)));
  }
  return std::unique_ptr<DaemonProcess>(new DaemonProcess(pid, std::move(options)));
}

bool DaemonProcess::ReadReadyFile() {
  std::ifstream in(options_.log_path + ".ready");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("grpc=", 0) == 0) address_ = line.substr(5);
    if (line.rfind("metrics=", 0) == 0) metrics_address_ = line.substr(8);
  }
  // The metrics line comes last: with it the file is whole.
  return !address_.empty() && !metrics_address_.empty();
}

absl::StatusOr<std::unique_ptr<DaemonProcess>> DaemonProcess::Start(DaemonOptions options) {
  // 1. Spawn it, its output appended to the log.
  ASSIGN_OR_RETURN(std::unique_ptr<DaemonProcess> daemon, Spawn(std::move(options)));

  // 2. Wait for the addresses it serves on.
  const absl::Time deadline = absl::Now() + daemon->options_.start_timeout;
  while (absl::Now() < deadline) {
    if (daemon->ReadReadyFile()) return daemon;
    if (!daemon->Running()) {
      return absl::InternalError(absl::StrCat(daemon->options_.binary,
                                              " exited before serving; its log ends:\n",
                                              daemon->LogTail()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  daemon->Kill();
  return absl::DeadlineExceededError(absl::StrCat(
      daemon->options_.binary, " did not serve within ",
      absl::FormatDuration(daemon->options_.start_timeout), "; its log ends:\n",
      daemon->LogTail()));
}

absl::StatusOr<DaemonExit> DaemonProcess::RunToExit(DaemonOptions options) {
  ASSIGN_OR_RETURN(std::unique_ptr<DaemonProcess> daemon, Spawn(std::move(options)));
  const absl::Time deadline = absl::Now() + daemon->options_.start_timeout;
  while (absl::Now() < deadline && !daemon->ReadReadyFile()) {
    if (!daemon->Running()) {
      const int status = daemon->wait_status_;
      return DaemonExit{WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status),
                        daemon->LogTail(std::string::npos)};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  daemon->Kill();
  return absl::DeadlineExceededError(absl::StrCat(
      daemon->options_.binary, " did not exit within ",
      absl::FormatDuration(daemon->options_.start_timeout),
      " (or served); killed. Its log ends:\n", daemon->LogTail()));
}

DaemonProcess::~DaemonProcess() {
  if (Running()) Kill();
}

std::unique_ptr<proto::Headroom::Stub> DaemonProcess::NewStub() const {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  // A channel of its own, not one shared through gRPC's subchannel pool.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return proto::Headroom::NewStub(
      grpc::CreateCustomChannel(address_, grpc::InsecureChannelCredentials(), args));
}

int DaemonProcess::Reap(absl::Duration timeout) {
  if (wait_status_ != -1) return wait_status_;
  const absl::Time deadline = absl::Now() + timeout;
  do {
    int status = 0;
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) return wait_status_ = status;
    if (r < 0) return wait_status_ = 0;  // not our child any more: nothing to wait for
    if (timeout > absl::ZeroDuration()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  } while (absl::Now() < deadline);
  return -1;
}

bool DaemonProcess::Running() { return Reap(absl::ZeroDuration()) == -1; }

absl::StatusOr<int> DaemonProcess::Terminate(absl::Duration timeout) {
  if (Running()) kill(pid_, SIGTERM);
  const int status = Reap(timeout);
  if (status == -1) {
    Kill();
    return absl::DeadlineExceededError(absl::StrCat(
        "headroomd (pid ", pid_, ") did not exit within ", absl::FormatDuration(timeout),
        " of SIGTERM; killed. Its log ends:\n", LogTail()));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void DaemonProcess::Kill() {
  if (Running()) kill(pid_, SIGKILL);
  Reap(absl::InfiniteDuration());
}

std::string DaemonProcess::LogTail(size_t max_bytes) const {
  std::ifstream in(options_.log_path);
  std::stringstream text;
  text << in.rdbuf();
  const std::string all = text.str();
  return all.size() <= max_bytes ? all : all.substr(all.size() - max_bytes);
}

}  // namespace headroom::server
