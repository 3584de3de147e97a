// For tests: a chain of reversible blocks small enough to check by finite differences.
#ifndef HEADROOM_GRAPH_REVERSIBLE_TESTING_H_
#define HEADROOM_GRAPH_REVERSIBLE_TESTING_H_

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "graph/graph.h"
#include "graph/graph_builder.h"
#include "proto/headroom.pb.h"

namespace headroom::graph {

struct RevChainOptions {
  int blocks = 2;
  int64_t batch = 2;
  // Channels of each half (x1 and x2); the input has twice as many.
  int64_t half_channels = 2;
  int64_t size = 4;  // Height and width.
  // Adds Dropout at this rate at the end of F and G when > 0.
  double dropout = 0;
  // Adds BatchNorm after each convolution.
  bool batch_norm = true;
  // Declares the blocks (false: the same nodes, no declaration).
  bool declare = true;
};

// Returns x [batch, 2h, size, size] -> Split -> `blocks` blocks b0, b1, ... each
//   F: b.f.conv (3x3, pad 1) [-> b.f.bn] -> b.f.relu [-> b.f.drop];  b.y1 = x1 + F(x2)
//   G: b.g.conv (3x3, pad 1) [-> b.g.bn] -> b.g.relu [-> b.g.drop];  b.y2 = x2 + G(y1)
// -> Concat -> GlobalAvgPool -> Flatten -> fc (3 classes) -> SoftmaxCrossEntropy "loss".
inline proto::GraphDef RevChain(const RevChainOptions& o) {
  GraphBuilder b("rev_chain");
  const int64_t h = o.half_channels;
  b.Input("x", {o.batch, 2 * h, o.size, o.size});
  b.AddNode("Split", "split", {"x"}, {"x1", "x2"},
            {{"axis", IntAttr(1)}, {"sizes", IntsAttr({h, h})}});
  std::string x1 = "x1", x2 = "x2";
  for (int k = 0; k < o.blocks; ++k) {
    const std::string p = absl::StrCat("b", k);
    auto residual = [&](const std::string& part, const std::string& in) {
      std::vector<std::string> nodes;
      std::string t = b.Conv2D(absl::StrCat(p, ".", part, ".conv"), in, h, h, 3, 1, 1);
      nodes.push_back(t);
      if (o.batch_norm) {
        t = b.BatchNorm(absl::StrCat(p, ".", part, ".bn"), t, h);
        nodes.push_back(t);
      }
      t = b.Unary("ReLU", absl::StrCat(p, ".", part, ".relu"), t);
      nodes.push_back(t);
      if (o.dropout > 0) {
        t = b.Op("Dropout", absl::StrCat(p, ".", part, ".drop"), {t},
                 {{"rate", FloatAttr(o.dropout)}});
        nodes.push_back(t);
      }
      return std::make_pair(t, nodes);
    };
    auto [f, f_nodes] = residual("f", x2);
    const std::string y1 = b.Add(p + ".y1", x1, f);
    auto [g, g_nodes] = residual("g", y1);
    const std::string y2 = b.Add(p + ".y2", x2, g);
    if (o.declare) b.ReversibleBlock(p, y1, y2, f_nodes, g_nodes);
    x1 = y1;
    x2 = y2;
  }
  b.Op("Concat", "concat", {x1, x2}, {{"axis", IntAttr(1)}});
  b.Unary("GlobalAvgPool", "pool", "concat");
  b.Unary("Flatten", "flat", "pool");
  b.Linear("fc", "flat", 2 * h, 3);
  b.Op("SoftmaxCrossEntropy", "loss", {"fc", b.Label("labels", {o.batch})});
  b.SetLoss("loss");
  return b.Build();
}

// Returns RevChain(o) loaded and validated (a test's setup: aborts with the loader's error
// if it is not valid).
inline Graph RevChainGraph(const RevChainOptions& o) {
  return Graph::FromProto(RevChain(o)).value();
}

}  // namespace headroom::graph

#endif  // HEADROOM_GRAPH_REVERSIBLE_TESTING_H_
