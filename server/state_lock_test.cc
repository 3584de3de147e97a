#include "server/state_lock.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace headroom::server {
namespace {

using ::testing::HasSubstr;

std::string FreshDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name, "-", getpid(), "/nested");
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(StateLockTest, ASecondLockNamesTheFileAndTheHoldersPid) {
  const std::string dir = FreshDir("second");
  absl::StatusOr<std::unique_ptr<StateLock>> first = StateLock::Acquire(dir);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ((*first)->path(), dir + "/headroomd.lock");
  EXPECT_EQ(ReadFile((*first)->path()), absl::StrCat(getpid(), "\n"));

  // flock conflicts between open file descriptions, so a second open in this process is
  // refused just as another daemon's would be.
  absl::StatusOr<std::unique_ptr<StateLock>> second = StateLock::Acquire(dir);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status().message(), HasSubstr(dir + "/headroomd.lock"));
  EXPECT_THAT(second.status().message(), HasSubstr(absl::StrCat("pid ", getpid())));
  // The refused attempt left the holder's pid in place.
  EXPECT_EQ(ReadFile((*first)->path()), absl::StrCat(getpid(), "\n"));
}

TEST(StateLockTest, ReleasedOnDestructionAndAfterTheHolderDies) {
  const std::string dir = FreshDir("released");
  {
    absl::StatusOr<std::unique_ptr<StateLock>> lock = StateLock::Acquire(dir);
    ASSERT_TRUE(lock.ok()) << lock.status();
  }
  // A child takes the lock and is killed holding it: the file stays, the lock does not.
  const pid_t child = fork();
  if (child == 0) {
    absl::StatusOr<std::unique_ptr<StateLock>> lock = StateLock::Acquire(dir);
    _exit(lock.ok() ? 0 : 1);  // exits without running the destructor
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(ReadFile(dir + "/headroomd.lock"), absl::StrCat(child, "\n"));
  absl::StatusOr<std::unique_ptr<StateLock>> again = StateLock::Acquire(dir);
  EXPECT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(ReadFile(dir + "/headroomd.lock"), absl::StrCat(getpid(), "\n"));
}

}  // namespace
}  // namespace headroom::server
