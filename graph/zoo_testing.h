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
  if (name == "transformer") {
    return ZooSpec(name, batch,
                   {{"layers", 2}, {"d_model", 64}, {"heads", 4}, {"sequence", 32},
                    {"vocab", 100}, {"positions", 32}});
  }
  if (name == "mlp") return ZooSpec(name, batch);
  return ZooSpec(name, batch, {{"image_size", name == "vgg16" ? 224 : 64}});
}

}  // namespace headroom::graph

#endif  // HEADROOM_GRAPH_ZOO_TESTING_H_
