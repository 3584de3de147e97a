#include "util/file_io.h"

#include <sys/stat.h>

#include <fstream>

#include "absl/strings/str_cat.h"

namespace headroom {

absl::StatusOr<std::string> ReadFileContents(const std::string& path, const std::string& what) {
  // A directory opens as a stream whose size is -1, which std::string takes as a length
  // near 2^64 (std::length_error); refuse anything but a regular file before reading.
  struct stat info;
  if (stat(path.c_str(), &info) != 0) {
    return absl::NotFoundError(absl::StrCat("cannot open ", what, " '", path, "'"));
  }
  if (!S_ISREG(info.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " '", path, "' is ", S_ISDIR(info.st_mode) ? "a directory" : "not a regular file",
        ", not a file"));
  }
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", what, " '", path, "'"));
  // One read of the known size: a stringstream's growing copies take 2.5 times as long.
  std::string contents(static_cast<size_t>(in.tellg()), '\0');
  in.seekg(0);
  in.read(contents.data(), static_cast<std::streamsize>(contents.size()));
  if (!in) return absl::UnavailableError(absl::StrCat("cannot read ", what, " '", path, "'"));
  return contents;
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
