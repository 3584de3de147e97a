#include "data/idx_file.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace headroom::data {
namespace {

constexpr int kMaxDims = 4;
constexpr uint64_t kMaxElements = uint64_t{1} << 31;

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

// Reads exactly `n` bytes into `dst`; InvalidArgument naming `what` if the file ends first.
absl::Status ReadExactly(gzFile f, const std::string& path, const char* what, void* dst,
                         uint64_t n) {
  auto* out = static_cast<uint8_t*>(dst);
  while (n > 0) {
    const unsigned chunk = static_cast<unsigned>(std::min<uint64_t>(n, 1u << 30));
    const int got = gzread(f, out, chunk);
    if (got < 0) {
      int code = 0;
      const char* message = gzerror(f, &code);
      return absl::InvalidArgumentError(
          absl::StrCat("IDX file '", path, "': cannot read ", what, ": ", message));
    }
    if (got == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("IDX file '", path, "': ends inside ", what, " (", n, " bytes missing)"));
    }
    out += got;
    n -= static_cast<uint64_t>(got);
  }
  return absl::OkStatus();
}

// Reverses the bytes of each 4-byte float: IDX's big-endian to this machine's little-endian
// and back.
void SwapFloats(std::vector<uint8_t>& bytes) {
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "a little-endian host");
  for (size_t i = 0; i + 4 <= bytes.size(); i += 4) {
    std::swap(bytes[i], bytes[i + 3]);
    std::swap(bytes[i + 1], bytes[i + 2]);
  }
}

}  // namespace

int64_t IdxArray::num_elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

int64_t IdxArray::item_elements() const {
  int64_t n = 1;
  for (size_t i = 1; i < dims.size(); ++i) n *= dims[i];
  return n;
}

namespace {

// Opens the IDX file at `path` and reads its magic number and dimensions into `array` (no
// elements); `f` is left at the first element.
absl::Status ReadHeader(const std::string& path, GzFile& f, IdxArray& array) {
  f.reset(gzopen(path.c_str(), "rb"));
  if (f == nullptr) {
    const int err = errno;
    if (err == ENOENT) return absl::NotFoundError(absl::StrCat("IDX file '", path, "': not found"));
    return absl::InvalidArgumentError(
        absl::StrCat("IDX file '", path, "': cannot open: ", std::strerror(err)));
  }
  uint8_t magic[4];
  if (absl::Status s = ReadExactly(f.get(), path, "the magic number", magic, 4); !s.ok()) return s;
  if (magic[0] != 0 || magic[1] != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("IDX file '", path, "': not an IDX file (its first two bytes are not zero)"));
  }
  if (magic[2] != kIdxUnsignedByte && magic[2] != kIdxFloat) {
    return absl::InvalidArgumentError(
        absl::StrCat("IDX file '", path, "': element type 0x", absl::Hex(magic[2], absl::kZeroPad2),
                     " is not supported (0x08, unsigned byte, or 0x0d, float)"));
  }
  const int rank = magic[3];
  if (rank < 1 || rank > kMaxDims) {
    return absl::InvalidArgumentError(
        absl::StrCat("IDX file '", path, "': ", rank, " dimensions; needs 1 to ", kMaxDims));
  }
  array = IdxArray{};
  array.type = magic[2];
  uint64_t elements = 1;
  for (int d = 0; d < rank; ++d) {
    uint8_t be[4];
    if (absl::Status s = ReadExactly(f.get(), path, "the dimensions", be, 4); !s.ok()) return s;
    const uint64_t dim = (uint64_t{be[0]} << 24) | (uint64_t{be[1]} << 16) |
                         (uint64_t{be[2]} << 8) | uint64_t{be[3]};
    elements *= dim;
    if (dim == 0 || elements > kMaxElements) {
      return absl::InvalidArgumentError(absl::StrCat(
          "IDX file '", path, "': dimension ", d, " is ", dim,
          dim == 0 ? " (empty)"
                   : absl::StrCat(", past the limit of ", kMaxElements, " elements in all")));
    }
    array.dims.push_back(static_cast<int64_t>(dim));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<IdxArray> ReadIdxHeader(const std::string& path) {
  GzFile f;
  IdxArray array;
  if (absl::Status s = ReadHeader(path, f, array); !s.ok()) return s;
  return array;
}

absl::StatusOr<IdxArray> ReadIdxFile(const std::string& path) {
  GzFile f;
  IdxArray array;
  if (absl::Status s = ReadHeader(path, f, array); !s.ok()) return s;
  const uint64_t elements = static_cast<uint64_t>(array.num_elements());
  const uint64_t bytes = elements * array.element_bytes();
  array.bytes.resize(bytes);
  if (absl::Status s = ReadExactly(
          f.get(), path,
          absl::StrCat("the elements of [", absl::StrJoin(array.dims, ","), "]").c_str(),
          array.bytes.data(), bytes);
      !s.ok()) {
    return s;
  }
  if (array.type == kIdxFloat) SwapFloats(array.bytes);
  uint8_t extra;
  if (gzread(f.get(), &extra, 1) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("IDX file '", path, "': bytes follow the ",
                                                   elements, " elements its dimensions hold"));
  }
  return array;
}

std::string EncodeIdx(const IdxArray& array) {
  std::string out = {0, 0, static_cast<char>(array.type), static_cast<char>(array.dims.size())};
  for (int64_t d : array.dims) {
    const auto u = static_cast<uint32_t>(d);
    out += {static_cast<char>(u >> 24), static_cast<char>(u >> 16), static_cast<char>(u >> 8),
            static_cast<char>(u)};
  }
  std::vector<uint8_t> elements = array.bytes;
  if (array.type == kIdxFloat) SwapFloats(elements);
  out.append(elements.begin(), elements.end());
  return out;
}

}  // namespace headroom::data
