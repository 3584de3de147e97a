#include "graph/graph_io.h"

#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "util/file_io.h"

namespace headroom::graph {
namespace {

bool IsTextName(const std::string& path) {
  return absl::EndsWith(path, ".pbtxt") || absl::EndsWith(path, ".txtpb") ||
         absl::EndsWith(path, ".textproto");
}

bool IsBinaryName(const std::string& path) {
  return absl::EndsWith(path, ".pb") || absl::EndsWith(path, ".binpb");
}

// Collects the text parser's first error with its position.
class FirstError : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    if (message_.empty()) message_ = absl::StrCat("line ", line + 1, ", column ", column + 1, ": ", message);
  }
  const std::string& message() const { return message_; }

 private:
  std::string message_;
};

}  // namespace

absl::StatusOr<proto::GraphDef> ParseGraphBinary(const std::string& bytes,
                                                 const std::string& what) {
  proto::GraphDef def;
  if (!def.ParseFromString(bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": not a binary GraphDef"));
  }
  return def;
}

absl::Status ParseTextMessage(const std::string& text, const std::string& what,
                              google::protobuf::Message* message) {
  google::protobuf::TextFormat::Parser parser;
  FirstError errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text, message)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": not a text-format ",
                                                   message->GetDescriptor()->name(), ": ",
                                                   errors.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<proto::GraphDef> ParseGraphText(const std::string& text, const std::string& what) {
  proto::GraphDef def;
  if (absl::Status s = ParseTextMessage(text, what, &def); !s.ok()) return s;
  return def;
}

absl::StatusOr<proto::GraphDef> ReadGraphFile(const std::string& path) {
  absl::StatusOr<std::string> read = ReadFileContents(path, "graph file");
  if (!read.ok()) return read.status();
  const std::string& contents = *read;
  const std::string what = absl::StrCat("graph file '", path, "'");
  if (IsTextName(path)) return ParseGraphText(contents, what);
  if (IsBinaryName(path)) return ParseGraphBinary(contents, what);
  absl::StatusOr<proto::GraphDef> binary = ParseGraphBinary(contents, what);
  if (binary.ok() && (binary->nodes_size() > 0 || binary->tensors_size() > 0)) return binary;
  absl::StatusOr<proto::GraphDef> text = ParseGraphText(contents, what);
  if (text.ok()) return text;
  return absl::InvalidArgumentError(
      absl::StrCat(what, " is neither a binary nor a text-format GraphDef (as text: ",
                   text.status().message(), ")"));
}

absl::Status WriteGraphFile(const proto::GraphDef& def, const std::string& path) {
  std::string contents;
  if (IsTextName(path)) {
    google::protobuf::TextFormat::PrintToString(def, &contents);
  } else if (!def.SerializeToString(&contents)) {
    return absl::InternalError(absl::StrCat("cannot serialize graph '", def.name(), "'"));
  }
  return WriteFileContents(path, contents, "graph file");
}

}  // namespace headroom::graph
