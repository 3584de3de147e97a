#include "util/cli_flags.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace headroom {

absl::StatusOr<CliFlags> CliFlags::Parse(const std::vector<std::string>& args,
                                         const std::set<std::string>& booleans) {
  CliFlags flags;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (!absl::StartsWith(arg, "--") || arg.size() == 2) {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", arg,
                                                     "': flags look like --name value"));
    }
    std::string name = arg.substr(2);
    std::string value;
    const size_t eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    } else if (booleans.count(name)) {
      value = "true";
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat("flag --", name, " needs a value"));
    }
    if (flags.values_.count(name)) {
      return absl::InvalidArgumentError(absl::StrCat("flag --", name, " is given twice"));
    }
    flags.values_[name] = value;
  }
  return flags;
}

std::string CliFlags::TakeString(const std::string& name, const std::string& fallback) {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  std::string value = it->second;
  values_.erase(it);
  return value;
}

absl::StatusOr<int64_t> CliFlags::TakeInt(const std::string& name, int64_t fallback,
                                          int64_t min_value) {
  if (!Has(name)) return fallback;
  const std::string text = TakeString(name);
  int64_t value = 0;
  if (!absl::SimpleAtoi(text, &value) || value < min_value) {
    return absl::InvalidArgumentError(absl::StrCat("flag --", name, " is '", text,
                                                   "', needs an integer of at least ",
                                                   min_value));
  }
  return value;
}

bool CliFlags::TakeBool(const std::string& name) {
  if (!Has(name)) return false;
  const std::string text = TakeString(name);
  return text == "true" || text == "1" || text == "yes";
}

absl::Status CliFlags::CheckAllTaken(const std::string& command) const {
  if (values_.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("unknown flag --", values_.begin()->first,
                                                 " for 'headroom ", command,
                                                 "'; see 'headroom help'"));
}

}  // namespace headroom
