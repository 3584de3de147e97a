#include "dist/launch.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace headroom::dist {
namespace {

// Returns the variable's value as an int, nullopt when unset.
absl::StatusOr<std::optional<int>> IntVariable(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return std::optional<int>();
  int n = 0;
  if (!absl::SimpleAtoi(value, &n)) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment variable ", name, "='", value, "' is not a number"));
  }
  return std::optional<int>(n);
}

}  // namespace

absl::StatusOr<std::optional<RankEnvironment>> RankFromEnvironment() {
  absl::StatusOr<std::optional<int>> size = IntVariable("OMPI_COMM_WORLD_SIZE");
  if (!size.ok()) return size.status();
  absl::StatusOr<std::optional<int>> rank = IntVariable("OMPI_COMM_WORLD_RANK");
  if (!rank.ok()) return rank.status();
  if (!size->has_value()) return std::optional<RankEnvironment>();
  if (!rank->has_value() || **size < 1 || **rank < 0 || **rank >= **size) {
    return absl::InvalidArgumentError(
        absl::StrCat("OMPI_COMM_WORLD_SIZE is ", **size, " but OMPI_COMM_WORLD_RANK is ",
                     rank->has_value() ? std::to_string(**rank) : std::string("unset")));
  }
  return std::optional<RankEnvironment>(RankEnvironment{**rank, **size});
}

absl::StatusOr<std::vector<std::string>> MpirunCommand(const LaunchOptions& options,
                                                       const std::vector<std::string>& command) {
  if (options.ranks < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ranks must be at least 1, not ", options.ranks));
  }
  if (options.threads_per_rank < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("threads per rank must be at least 1, not ", options.threads_per_rank));
  }
  if (command.empty()) return absl::InvalidArgumentError("no command to run as ranks");
  std::vector<std::string> argv = {options.mpirun,    "-np",       std::to_string(options.ranks),
                                   "--oversubscribe", "--bind-to", "none"};
  if (options.as_root) argv.push_back("--allow-run-as-root");
  const char* threads = std::getenv("OMP_NUM_THREADS");
  argv.push_back("-x");
  argv.push_back(threads != nullptr ? "OMP_NUM_THREADS"
                                    : absl::StrCat("OMP_NUM_THREADS=", options.threads_per_rank));
  argv.insert(argv.end(), command.begin(), command.end());
  return argv;
}

absl::StatusOr<std::vector<std::string>> OwnCommandLine() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> argv;
  size_t start = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    if (all[i] != '\0') continue;
    argv.push_back(all.substr(start, i - start));
    start = i + 1;
  }
  if (argv.empty()) return absl::InternalError("/proc/self/cmdline is empty");
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) {
    return absl::InternalError(absl::StrCat("readlink /proc/self/exe: ", std::strerror(errno)));
  }
  argv[0] = std::string(exe, n);
  return argv;
}

absl::Status Exec(const std::vector<std::string>& argv, const LaunchOptions& options) {
  if (options.as_root) {
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  }
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  execvp(args[0], args.data());
  return absl::UnavailableError(absl::StrCat("cannot run '", argv[0], "': ", std::strerror(errno),
                                             " (is openmpi-bin installed?)"));
}

}  // namespace headroom::dist
