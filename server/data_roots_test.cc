#include "server/data_roots.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace headroom::server {
namespace {

using ::testing::HasSubstr;

// TEST_TMPDIR/NAME/{root/{set/index.txt, inner -> set, escape -> ../outside}, outside/}.
class DataRootsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    namespace fs = std::filesystem;
    base_ = fs::path(getenv("TEST_TMPDIR")) /
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(base_);
    fs::create_directories(base_ / "root" / "set");
    fs::create_directories(base_ / "outside" / "set");
    std::ofstream(base_ / "root" / "set" / "index.txt") << "classes 2\n";
    fs::create_directory_symlink(base_ / "root" / "set", base_ / "root" / "inner");
    fs::create_directory_symlink(base_ / "outside", base_ / "root" / "escape");
  }
  std::string Path(const std::string& relative) const { return (base_ / relative).string(); }

  std::filesystem::path base_;
};

TEST_F(DataRootsTest, AcceptsPathsThatResolveUnderARoot) {
  const DataRoots roots = DataRoots::Create({Path("root")}).value();
  const std::string real_set = std::filesystem::canonical(Path("root/set")).string();
  EXPECT_EQ(roots.Resolve(Path("root/set")).value(), real_set);
  // A symlink inside that stays inside, and a ".." that comes back in.
  EXPECT_EQ(roots.Resolve(Path("root/inner")).value(), real_set);
  EXPECT_EQ(roots.Resolve(Path("outside/../root/set")).value(), real_set);
  // The root itself.
  EXPECT_EQ(roots.Resolve(Path("root")).value(), std::filesystem::canonical(Path("root")).string());
  // fashion-mnist needs no root.
  EXPECT_EQ(DataRoots().Resolve("fashion-mnist").value(), "fashion-mnist");
}

TEST_F(DataRootsTest, RefusesPathsOutsideEveryRootNamingPathAndRoots) {
  const DataRoots roots = DataRoots::Create({Path("root")}).value();
  const std::string real_root = std::filesystem::canonical(Path("root")).string();
  for (const std::string& bad :
       {Path("outside/set"), Path("root/../outside/set"), Path("root/escape/set"),
        Path("root/escape"), std::string("/etc")}) {
    absl::StatusOr<std::string> r = roots.Resolve(bad);
    ASSERT_FALSE(r.ok()) << bad << " resolved to " << *r;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
    EXPECT_THAT(r.status().message(), HasSubstr(absl::StrCat("'", bad, "'")));
    EXPECT_THAT(r.status().message(), HasSubstr(real_root));
    EXPECT_THAT(r.status().message(), HasSubstr("outside this daemon's data roots"));
  }
  // A root's name as a prefix of a sibling is not inside it: root2 is not under root.
  std::filesystem::create_directories(Path("root2"));
  EXPECT_FALSE(roots.Resolve(Path("root2")).ok());
}

TEST_F(DataRootsTest, RefusesMissingPathsAndEverythingWithoutRoots) {
  const DataRoots roots = DataRoots::Create({Path("root")}).value();
  absl::StatusOr<std::string> missing = roots.Resolve(Path("root/nothing"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(missing.status().message(), HasSubstr("does not resolve"));
  EXPECT_EQ(roots.Resolve("").status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::string> none = DataRoots().Resolve(Path("root/set"));
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(none.status().message(), HasSubstr("start headroomd with --data-root"));
}

TEST_F(DataRootsTest, CreateRefusesARootThatIsNoDirectory) {
  absl::StatusOr<DataRoots> missing = DataRoots::Create({Path("nowhere")});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(missing.status().message(), HasSubstr("--data-root"));
  absl::StatusOr<DataRoots> file = DataRoots::Create({Path("root/set/index.txt")});
  EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(file.status().message(), HasSubstr("is not a directory"));
}

}  // namespace
}  // namespace headroom::server
