// Headroom's model zoo: forward training graphs (with their loss) of well-known networks,
// built by name with a few integer options, so that a user can plan, profile or train a real
// model without writing its graph. Parameter names follow torchvision's and Hugging Face's
// state_dict keys, so real weights can be loaded by name.
#ifndef HEADROOM_GRAPH_ZOO_H_
#define HEADROOM_GRAPH_ZOO_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/headroom.pb.h"

namespace headroom::graph {

// Returns the forward graph (with its loss) of a zoo model, or InvalidArgument naming the bad
// model or option (and listing the valid ones), or a batch (at most kMaxZooBatch) or option
// value (within [ZooOption::min_value, max_value]) out of range, naming it and the limit. Unset options take their defaults (see
// ZooModels()). The graph is not validated here: Graph::FromProto does that. Thread-safe.
absl::StatusOr<proto::GraphDef> BuildZooModel(const proto::ZooModel& spec);

// Returns the spec of zoo model `name` at `batch` with `options` set (the rest default).
proto::ZooModel ZooSpec(const std::string& name, uint64_t batch,
                        const std::map<std::string, int64_t>& options = {});

// The largest batch a zoo spec may ask for (BuildZooModel answers InvalidArgument above it).
inline constexpr uint64_t kMaxZooBatch = 65536;

// One integer option of a zoo model.
struct ZooOption {
  std::string name;
  // The value used when the spec leaves the option unset.
  int64_t default_value;
  // One line for people, e.g. "output classes".
  std::string doc;
  // The smallest value it accepts.
  int64_t min_value = 1;
  // The largest value it accepts: a bound on the graph (and the daemon's memory) one request
  // can ask for, well above every published model of the family (depth 10^6 took 13 GB).
  int64_t max_value = 1 << 20;
};

// A zoo model and the options it accepts.
struct ZooModelInfo {
  std::string name;
  // One line for people, e.g. "ResNet-50 (torchvision layout)".
  std::string doc;
  std::vector<ZooOption> options;
};

// Returns every zoo model, in a fixed order: mlp, resnet18, resnet34, resnet50, resnet101,
// resnet152, vgg16, mobilenet_v2, transformer, small_cnn, revnet38, revnet110, revnet164,
// revnet104, resnet164_cifar. Thread-safe.
const std::vector<ZooModelInfo>& ZooModels();

}  // namespace headroom::graph

#endif  // HEADROOM_GRAPH_ZOO_H_
