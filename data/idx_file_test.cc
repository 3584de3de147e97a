#include "data/idx_file.h"

#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace headroom::data {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
}

std::string WritePlain(const std::string& name, const std::string& bytes) {
  const std::string path = TempPath(name);
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

std::string WriteGzip(const std::string& name, const std::string& bytes) {
  const std::string path = TempPath(name);
  gzFile f = gzopen(path.c_str(), "wb");
  EXPECT_NE(f, nullptr);
  EXPECT_EQ(gzwrite(f, bytes.data(), bytes.size()), static_cast<int>(bytes.size()));
  gzclose(f);
  return path;
}

IdxArray Sample() {
  IdxArray a;
  a.dims = {3, 2, 2};
  for (int i = 0; i < 12; ++i) a.bytes.push_back(static_cast<uint8_t>(i * 20));
  return a;
}

TEST(IdxFileTest, ReadsWhatItEncodedPlainAndCompressed) {
  const IdxArray a = Sample();
  for (const std::string& path :
       {WritePlain("plain.idx", EncodeIdx(a)), WriteGzip("packed.idx.gz", EncodeIdx(a))}) {
    absl::StatusOr<IdxArray> read = ReadIdxFile(path);
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(read->dims, a.dims) << path;
    EXPECT_EQ(read->bytes, a.bytes) << path;
    EXPECT_EQ(read->item_elements(), 4);
  }
}

TEST(IdxFileTest, AHeaderIsTheTypeAndDimensionsAlone) {
  const std::string encoded = EncodeIdx(Sample());
  // Compressed, and with elements missing: the header does not read them.
  for (const std::string& path :
       {WriteGzip("header.idx.gz", encoded),
        WritePlain("header_short.idx", encoded.substr(0, encoded.size() - 3))}) {
    absl::StatusOr<IdxArray> header = ReadIdxHeader(path);
    ASSERT_TRUE(header.ok()) << header.status();
    EXPECT_EQ(header->type, Sample().type);
    EXPECT_EQ(header->dims, Sample().dims);
    EXPECT_TRUE(header->bytes.empty());
  }
  EXPECT_THAT(ReadIdxFile(WritePlain("header_short.idx", encoded.substr(0, encoded.size() - 3)))
                  .status()
                  .message(),
              HasSubstr("ends inside"));
  EXPECT_EQ(ReadIdxHeader(TempPath("no_such.idx")).status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(
      ReadIdxHeader(WritePlain("not_idx", std::string("\x01\x00\x08\x01", 4))).status().message(),
      HasSubstr("not an IDX file"));
}

// The header byte by byte, as the MNIST page gives it: magic 0x00000803, then big-endian dims.
TEST(IdxFileTest, DimensionsAreBigEndian) {
  std::string bytes = {0, 0, 8, 1, 0, 0, 1, 2};  // 1 dim of 258
  bytes.append(258, '\x07');
  absl::StatusOr<IdxArray> read = ReadIdxFile(WritePlain("big_endian.idx", bytes));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->dims, std::vector<int64_t>{258});
}

TEST(IdxFileTest, EveryBadFileIsAnErrorNamingIt) {
  const std::string good = EncodeIdx(Sample());
  struct Case {
    std::string name, bytes, message;
  };
  const Case cases[] = {
      {"empty.idx", "", "ends inside the magic number"},
      {"magic.idx", std::string("\x01\x00\x08\x03", 4) + good.substr(4), "not an IDX file"},
      {"int.idx", std::string("\x00\x00\x0c\x03", 4) + good.substr(4), "element type 0x0c"},
      {"rank.idx", std::string("\x00\x00\x08\x07", 4) + good.substr(4), "7 dimensions"},
      {"zero.idx", std::string("\x00\x00\x08\x01\x00\x00\x00\x00", 8), "(empty)"},
      {"short.idx", good.substr(0, good.size() - 1), "1 bytes missing"},
      {"long.idx", good + "x", "bytes follow the 12 elements"},
      {"huge.idx", std::string("\x00\x00\x08\x02\xff\xff\xff\xff\xff\xff\xff\xff", 12),
       "past the limit"},
  };
  for (const Case& c : cases) {
    const std::string path = WritePlain(c.name, c.bytes);
    absl::StatusOr<IdxArray> read = ReadIdxFile(path);
    EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_THAT(read.status().message(), HasSubstr(path)) << c.name;
    EXPECT_THAT(read.status().message(), HasSubstr(c.message)) << c.name;
  }
}

// Floats are big-endian in the file: 1.0f is 3f 80 00 00, -2.5f is c0 20 00 00.
TEST(IdxFileTest, FloatsAreBigEndianInTheFile) {
  const std::string bytes = std::string("\x00\x00\x0d\x01\x00\x00\x00\x02", 8) +
                            std::string("\x3f\x80\x00\x00\xc0\x20\x00\x00", 8);
  absl::StatusOr<IdxArray> read = ReadIdxFile(WritePlain("floats.idx", bytes));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->type, kIdxFloat);
  ASSERT_EQ(read->bytes.size(), 8u);
  const float* v = reinterpret_cast<const float*>(read->bytes.data());
  EXPECT_EQ(v[0], 1.0f);
  EXPECT_EQ(v[1], -2.5f);
  EXPECT_EQ(EncodeIdx(*read), bytes);
}

TEST(IdxFileTest, AMissingFileIsNotFound) {
  absl::StatusOr<IdxArray> read = ReadIdxFile(TempPath("no-such-file.idx"));
  EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound) << read.status();
}

}  // namespace
}  // namespace headroom::data
