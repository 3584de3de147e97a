// A headroomd child process on free loopback ports, for end-to-end tests and benchmarks.
//
// Start() spawns the binary with `--listen 127.0.0.1:0 --ready-file ...` and the caller's
// flags, its stdout and stderr appended to a log file, and returns once the daemon has
// written the addresses it serves on. NewStub() opens a channel of its own to it; Terminate()
// (SIGTERM) or Kill() (SIGKILL) ends it and reaps it; the destructor kills one still running.
//
// Ownership: owns the child process. Thread-safety: NewStub() and the accessors may be called
// from any thread while it runs; Terminate(), Kill() and Running() from one thread.
#ifndef HEADROOM_SERVER_DAEMON_PROCESS_H_
#define HEADROOM_SERVER_DAEMON_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/headroom.grpc.pb.h"

namespace headroom::server {

struct DaemonOptions {
  // Path of the headroomd binary. Required.
  std::string binary;
  // Its --state directory. Required.
  std::string state_dir;
  // Where its stdout and stderr are appended; the ready file is written beside it. Required.
  std::string log_path;
  // Its --listen address. Default "127.0.0.1:0" (a free loopback port).
  std::string listen = "127.0.0.1:0";
  // More flags ("--device-memory", "64MiB"). Default none.
  std::vector<std::string> flags;
  // Serve Prometheus metrics on a free loopback port; otherwise `--metrics off`. Default
  // false.
  bool metrics = false;
  // Variables added to the inherited environment ("OMP_NUM_THREADS=1"). Default none.
  std::vector<std::string> env;
  // How long it may take to serve. Default 60 s.
  absl::Duration start_timeout = absl::Seconds(60);
};

// How a daemon that was expected not to serve ended.
struct DaemonExit {
  // Its exit status (128 + signal when a signal ended it).
  int exit_code = -1;
  // Its whole log.
  std::string log;
};

class DaemonProcess {
 public:
  // Returns the daemon once it serves. The error names the binary and quotes the end of its
  // log when it exits or does not serve within start_timeout (it is killed then).
  static absl::StatusOr<std::unique_ptr<DaemonProcess>> Start(DaemonOptions options);
  // Returns how a daemon that should refuse to start ended. DeadlineExceeded quoting its log,
  // after killing it, when it still runs after start_timeout or once it serves.
  static absl::StatusOr<DaemonExit> RunToExit(DaemonOptions options);
  ~DaemonProcess();

  DaemonProcess(const DaemonProcess&) = delete;
  DaemonProcess& operator=(const DaemonProcess&) = delete;

  // The gRPC address it serves on ("127.0.0.1:PORT").
  const std::string& address() const { return address_; }
  // The metrics address ("127.0.0.1:PORT"), or "off".
  const std::string& metrics_address() const { return metrics_address_; }
  pid_t pid() const { return pid_; }

  // Returns a stub on a new channel to the daemon, accepting answers of any size.
  std::unique_ptr<proto::Headroom::Stub> NewStub() const;

  // Returns true while the process has not exited (reaping it if it has).
  bool Running();
  // Sends SIGTERM and returns its exit status (128 + signal when a signal ended it).
  // DeadlineExceeded, after killing it, when it has not exited within `timeout`.
  absl::StatusOr<int> Terminate(absl::Duration timeout = absl::Seconds(30));
  // Sends SIGKILL and reaps it.
  void Kill();

  // Returns the last `max_bytes` of its log, for failure messages.
  std::string LogTail(size_t max_bytes = 4096) const;

 private:
  DaemonProcess(pid_t pid, DaemonOptions options) : pid_(pid), options_(std::move(options)) {}
  // Returns the child started with `options`, its output appended to the log, or the error.
  static absl::StatusOr<std::unique_ptr<DaemonProcess>> Spawn(DaemonOptions options);
  // Returns true once the ready file holds both addresses, which it sets.
  bool ReadReadyFile();
  // Waits up to `timeout` for the child to exit; returns its wait status, or -1.
  int Reap(absl::Duration timeout);

  pid_t pid_;
  const DaemonOptions options_;
  std::string address_;
  std::string metrics_address_;
  // The wait status once reaped, else -1.
  int wait_status_ = -1;
};

}  // namespace headroom::server

#endif  // HEADROOM_SERVER_DAEMON_PROCESS_H_
