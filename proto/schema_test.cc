// The wire schema keeps its promises: the service's methods and streaming, a comment on every
// field and enum value, byte sizes as uint64.
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "google/protobuf/descriptor.h"
#include "gtest/gtest.h"
#include "proto/headroom.grpc.pb.h"
#include "proto/headroom.pb.h"

namespace headroom::proto {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::FileDescriptor;

TEST(SchemaTest, ServiceHasEveryMethodWithTheirStreamingDirections) {
  const auto* service = GraphDef::descriptor()->file()->FindServiceByName("Headroom");
  ASSERT_NE(service, nullptr);
  std::vector<std::string> names;
  for (int i = 0; i < service->method_count(); ++i) names.push_back(service->method(i)->name());
  EXPECT_THAT(names, ::testing::UnorderedElementsAre("Plan", "Profile", "SubmitJob", "WatchJob",
                                                     "CancelJob", "ListJobs", "GetJob",
                                                     "GetTimeline", "ListProfiles", "UploadJob",
                                                     "ExportModel"));
  for (int i = 0; i < service->method_count(); ++i) {
    const auto* m = service->method(i);
    EXPECT_EQ(m->client_streaming(), m->name() == "UploadJob") << m->name();
    EXPECT_EQ(m->server_streaming(), m->name() == "WatchJob" || m->name() == "ExportModel")
        << m->name();
  }
}

TEST(SchemaTest, ByteSizesAreUnsigned64) {
  const FileDescriptor* file = GraphDef::descriptor()->file();
  int checked = 0;
  for (int m = 0; m < file->message_type_count(); ++m) {
    const Descriptor* d = file->message_type(m);
    for (int f = 0; f < d->field_count(); ++f) {
      const FieldDescriptor* field = d->field(f);
      const std::string& name = field->name();
      if (name.size() >= 5 && name.compare(name.size() - 5, 5, "bytes") == 0 &&
          name != "bytes_by_role") {
        EXPECT_EQ(field->type(), FieldDescriptor::TYPE_UINT64) << field->full_name();
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 10);
}

// Returns the schema's lines. The test runs in the workspace root of its runfiles.
std::vector<std::string> SchemaLines() {
  std::ifstream in("proto/headroom.proto");
  EXPECT_TRUE(in.good()) << "cannot read proto/headroom.proto";
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(SchemaTest, EveryFieldAndEnumValueHasAComment) {
  // A field (`repeated int64 shape = 2;`, `map<string, int64> options = 3;`) or an enum value
  // (`ROLE_INPUT = 1;`) needs a trailing comment or a comment on the line above.
  const std::regex field(R"(^\s*(repeated\s+)?(map<[^>]+>|[\w.]+)\s+\w+\s*=\s*\d+;.*)");
  const std::regex value(R"(^\s*[A-Z][A-Z0-9_]*\s*=\s*\d+;.*)");
  std::vector<std::string> lines = SchemaLines();
  int fields = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    if (!std::regex_match(line, field) && !std::regex_match(line, value)) continue;
    ++fields;
    const bool trailing = line.find("//") != std::string::npos;
    const bool above = i > 0 && lines[i - 1].find("//") != std::string::npos;
    EXPECT_TRUE(trailing || above) << "line " << i + 1 << " has no comment: " << line;
  }
  EXPECT_GT(fields, 100);
}

}  // namespace
}  // namespace headroom::proto
