#include "util/file_io.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace headroom {

absl::StatusOr<std::string> ReadFileContents(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", what, " '", path, "'"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

absl::Status WriteFileContents(const std::string& path, const std::string& contents,
                               const std::string& what) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
  out.close();
  if (!out) return absl::UnavailableError(absl::StrCat("cannot write ", what, " '", path, "'"));
  return absl::OkStatus();
}

}  // namespace headroom
