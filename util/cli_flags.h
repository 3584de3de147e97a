// Command-line flags of one `headroom` subcommand: `--name value`, `--name=value`, and
// boolean `--name`.
#ifndef HEADROOM_UTIL_CLI_FLAGS_H_
#define HEADROOM_UTIL_CLI_FLAGS_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace headroom {

// Parsed flags. Parse() once, then read each flag the command knows with Take*(), which
// removes it; Remaining() lists what no one took, so unknown flags become errors.
// Not thread-safe.
class CliFlags {
 public:
  // Returns the flags of `args` (the words after the subcommand). Names in `booleans` take no
  // value; every other flag needs one. Positional words are an error.
  static absl::StatusOr<CliFlags> Parse(const std::vector<std::string>& args,
                                        const std::set<std::string>& booleans);

  // Returns and removes a string flag, or `fallback` when absent.
  std::string TakeString(const std::string& name, const std::string& fallback = "");
  // Returns and removes an integer flag (at least `min_value`), or `fallback` when absent.
  absl::StatusOr<int64_t> TakeInt(const std::string& name, int64_t fallback,
                                  int64_t min_value = 1);
  // Returns and removes a boolean flag: true when given.
  bool TakeBool(const std::string& name);
  // Returns whether a flag is present (without taking it).
  bool Has(const std::string& name) const { return values_.count(name) > 0; }

  // Returns the flags no one took, by name.
  const std::map<std::string, std::string>& Remaining() const { return values_; }
  // Returns InvalidArgument naming the first flag no one took, or OK.
  absl::Status CheckAllTaken(const std::string& command) const;

 private:
  std::map<std::string, std::string> values_;
};

}  // namespace headroom

#endif  // HEADROOM_UTIL_CLI_FLAGS_H_
