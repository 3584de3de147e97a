// Reading and writing graph descriptions as files: binary protobuf or protobuf text format.
#ifndef HEADROOM_GRAPH_GRAPH_IO_H_
#define HEADROOM_GRAPH_GRAPH_IO_H_

#include <string>

#include "absl/status/statusor.h"
#include "google/protobuf/message.h"
#include "proto/headroom.pb.h"

namespace headroom::graph {

// Returns the GraphDef in `path`: text format when the name ends in .pbtxt, .txtpb or .textproto,
// binary when it ends in .pb or .binpb; otherwise binary is tried first, then text. Errors name
// the file and, for text, the line and column.
absl::StatusOr<proto::GraphDef> ReadGraphFile(const std::string& path);

// Returns the GraphDef parsed from `bytes` (binary) or `text` (text format).
absl::StatusOr<proto::GraphDef> ParseGraphBinary(const std::string& bytes, const std::string& what);
absl::StatusOr<proto::GraphDef> ParseGraphText(const std::string& text, const std::string& what);

// Writes `def` to `path`, as text for the text extensions above and binary otherwise.
// Returns OK after parsing text-format `text` into `message`, or InvalidArgument with `what`
// and the line and column of the first error.
absl::Status ParseTextMessage(const std::string& text, const std::string& what,
                              google::protobuf::Message* message);

absl::Status WriteGraphFile(const proto::GraphDef& def, const std::string& path);

}  // namespace headroom::graph

#endif  // HEADROOM_GRAPH_GRAPH_IO_H_
