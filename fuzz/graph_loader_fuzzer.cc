// libFuzzer target: a serialized GraphDef, as any client may send it, through the graph
// loader and its validation (graph::Graph::FromProto). Any input must give a Graph or an
// error; a crash, a sanitizer report, a leak or a hang is a bug.
#include <cstddef>
#include <cstdint>

#include "google/protobuf/stubs/logging.h"
#include "graph/graph.h"
#include "proto/headroom.pb.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Protobuf logs every malformed UTF-8 string it parses; the fuzzer makes millions.
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  headroom::proto::GraphDef def;
  if (!def.ParseFromArray(data, static_cast<int>(size))) return 0;
  (void)headroom::graph::Graph::FromProto(def);
  return 0;
}
