#include "util/file_io.h"

#include <cstdlib>

#include "gtest/gtest.h"

namespace headroom {
namespace {

std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

TEST(FileIoTest, WritesAndReadsBackBinaryContents) {
  const std::string path = TempDir() + "/blob.bin";
  const std::string contents("a\0b\nc", 5);
  ASSERT_TRUE(WriteFileContents(path, contents, "blob").ok());
  absl::StatusOr<std::string> read = ReadFileContents(path, "blob");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, contents);
  ASSERT_TRUE(WriteFileContents(path, "x", "blob").ok());
  EXPECT_EQ(ReadFileContents(path, "blob").value(), "x") << "writing replaces the file";
}

TEST(FileIoTest, ErrorsNameTheFileAndWhatItIs) {
  absl::StatusOr<std::string> missing = ReadFileContents(TempDir() + "/none.json", "profile");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("cannot open profile '"), std::string::npos)
      << missing.status();
  absl::Status unwritable = WriteFileContents("/nonexistent/dir/x", "x", "trace");
  EXPECT_EQ(unwritable.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(unwritable.message().find("cannot write trace '/nonexistent/dir/x'"),
            std::string::npos) << unwritable;
}

TEST(FileIoTest, RefusesADirectoryNamingThePath) {
  // Without the check, a directory's size (-1) became a 2^64-byte std::string: length_error.
  absl::StatusOr<std::string> dir = ReadFileContents(TempDir(), "graph file");
  EXPECT_EQ(dir.status().code(), absl::StatusCode::kInvalidArgument) << dir.status();
  EXPECT_NE(dir.status().message().find("graph file '" + TempDir() + "' is a directory"),
            std::string::npos) << dir.status();
}

}  // namespace
}  // namespace headroom
