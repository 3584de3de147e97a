#include "server/state_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace headroom::server {
namespace {

// Returns the first line of the file open at `fd` (the holder's pid), or "unknown".
std::string HolderPid(int fd) {
  char buffer[32] = {};
  const ssize_t n = pread(fd, buffer, sizeof(buffer) - 1, 0);
  std::string pid = n > 0 ? std::string(buffer, n) : "";
  pid = std::string(absl::StripAsciiWhitespace(pid.substr(0, pid.find('\n'))));
  return pid.empty() ? "unknown" : pid;
}

}  // namespace

absl::StatusOr<std::unique_ptr<StateLock>> StateLock::Acquire(const std::string& state_dir) {
  std::error_code error;
  std::filesystem::create_directories(state_dir, error);
  if (error) {
    return absl::FailedPreconditionError(
        absl::StrCat("state directory '", state_dir, "': cannot create it: ", error.message()));
  }
  const std::string path = absl::StrCat(state_dir, "/", kFileName);
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("lock file '", path, "': cannot open it: ", strerror(errno)));
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int flock_errno = errno;
    const std::string holder = HolderPid(fd);
    close(fd);
    if (flock_errno == EWOULDBLOCK) {
      return absl::FailedPreconditionError(absl::StrCat(
          "another headroomd (pid ", holder, ") is using this --state directory: it holds '",
          path, "'; one daemon per state directory"));
    }
    return absl::FailedPreconditionError(
        absl::StrCat("lock file '", path, "': cannot lock it: ", strerror(flock_errno)));
  }
  // Written over the old pid, then cut to length: on a full disk the old pid's block is
  // reused, where truncating first would free it and leave no room for the new one.
  const std::string pid = absl::StrCat(getpid(), "\n");
  if (pwrite(fd, pid.data(), pid.size(), 0) != ssize_t(pid.size()) ||
      ftruncate(fd, static_cast<off_t>(pid.size())) != 0) {
    const std::string reason = strerror(errno);
    close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat("lock file '", path, "': cannot write the pid: ", reason));
  }
  return std::unique_ptr<StateLock>(new StateLock(path, fd));
}

StateLock::~StateLock() { close(fd_); }

}  // namespace headroom::server
