#include "util/byte_size.h"

#include <cctype>
#include <cmath>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace headroom {

absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", text, "' is not a byte size (", why, "); write e.g. 6GiB, 512MiB, 1.5GB or 4096"));
  };
  const absl::string_view trimmed = absl::StripAsciiWhitespace(text);
  size_t split = 0;
  while (split < trimmed.size() &&
         (std::isdigit(static_cast<unsigned char>(trimmed[split])) || trimmed[split] == '.')) {
    ++split;
  }
  if (split == 0) return bad(trimmed.empty() ? "empty" : "no number");
  double number = 0;
  if (!absl::SimpleAtod(trimmed.substr(0, split), &number) || !std::isfinite(number)) {
    return bad("bad number");
  }
  const std::string unit =
      absl::AsciiStrToLower(absl::StripAsciiWhitespace(trimmed.substr(split)));
  double scale = 0;
  if (unit.empty() || unit == "b") {
    scale = 1;
  } else {
    const std::string prefixes = "kmgt";
    const size_t p = prefixes.find(unit[0]);
    const std::string rest = unit.substr(1);
    if (p == std::string::npos || !(rest.empty() || rest == "b" || rest == "ib")) {
      return bad(absl::StrCat("unknown unit '", unit, "'"));
    }
    scale = std::pow(rest == "b" ? 1000.0 : 1024.0, static_cast<double>(p + 1));
  }
  const double bytes = std::round(number * scale);
  if (bytes >= 18446744073709551616.0) return bad("more than 2^64 - 1 bytes");
  return static_cast<uint64_t>(bytes);
}

}  // namespace headroom
