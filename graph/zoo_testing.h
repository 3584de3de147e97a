// For tests: every zoo model shrunk to plan and differentiate in milliseconds.
#ifndef HEADROOM_GRAPH_ZOO_TESTING_H_
#define HEADROOM_GRAPH_ZOO_TESTING_H_

#include <string>

#include "graph/zoo.h"
#include "proto/headroom.pb.h"

namespace headroom::graph {

// Returns the spec of zoo model `name` at `batch`, small: CNNs on 64x64 images (vgg16 keeps
// 224, the smallest it accepts), the transformer with 2 layers, d_model 64, 4 heads,
// sequence 32, vocabulary 100.
inline proto::ZooModel SmallZooSpec(const std::string& name, uint64_t batch) {
  proto::ZooModel spec;
  spec.set_name(name);
  spec.set_batch(batch);
  auto& options = *spec.mutable_options();
  if (name == "transformer") {
    options["layers"] = 2;
    options["d_model"] = 64;
    options["heads"] = 4;
    options["sequence"] = 32;
    options["vocab"] = 100;
    options["positions"] = 32;
  } else if (name != "mlp") {
    options["image_size"] = name == "vgg16" ? 224 : 64;
  }
  return spec;
}

}  // namespace headroom::graph

#endif  // HEADROOM_GRAPH_ZOO_TESTING_H_
