// One headroomd per state directory: an exclusive lock on `state_dir/headroomd.lock`.
//
// Acquire() creates the directory (with its parents), opens the lock file, takes an
// exclusive flock(2) without waiting, and writes this process's pid into the file; the lock
// is held until the StateLock is destroyed or the process ends (the kernel releases it even
// after a SIGKILL, so a stale file never blocks a restart). Take it before opening the store.
//
// Limits: flock is advisory and per open file description; it does not work across hosts on
// NFS. Ownership: owns the lock file's descriptor (close-on-exec, so children do not hold
// it). Thread-safety: not needed; the daemon takes it once in main's thread.
#ifndef HEADROOM_SERVER_STATE_LOCK_H_
#define HEADROOM_SERVER_STATE_LOCK_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace headroom::server {

class StateLock {
 public:
  // The lock file's name under the state directory.
  static constexpr absl::string_view kFileName = "headroomd.lock";

  // Returns the lock of `state_dir`. FailedPrecondition naming the lock file and the pid
  // written in it when another process holds it; other errors name the path and errno.
  static absl::StatusOr<std::unique_ptr<StateLock>> Acquire(const std::string& state_dir);
  // Releases the lock (the file stays, with the last holder's pid).
  ~StateLock();

  StateLock(const StateLock&) = delete;
  StateLock& operator=(const StateLock&) = delete;

  // Returns the lock file's path.
  const std::string& path() const { return path_; }

 private:
  StateLock(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}

  const std::string path_;
  const int fd_;
};

}  // namespace headroom::server

#endif  // HEADROOM_SERVER_STATE_LOCK_H_
