// The zoo's reversible residual networks (RevNet, Gomez et al. 2017) and the pre-activation
// ResNet-164 for CIFAR (He et al. 2016) they are compared with.
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "graph/graph_builder.h"
#include "graph/zoo_internal.h"

namespace headroom::graph::zoo_internal {
namespace {

struct RevNetLayout {
  bool imagenet;
  bool bottleneck;
  std::vector<int64_t> units;  // Units per stage (the first of stages 2.. downsamples).
  std::vector<int64_t> width;  // Channels of each stage: two halves of width / 2.
  int64_t paper_parameters;    // As the paper's Table 1 gives it.
};

RevNetLayout RevNetLayoutOf(int depth) {
  switch (depth) {
    case 38:
      return {false, false, {3, 3, 3}, {32, 64, 112}, 460000};
    case 110:
      return {false, false, {9, 9, 9}, {32, 64, 128}, 1730000};
    case 164:
      return {false, true, {9, 9, 9}, {128, 256, 512}, 1750000};
    default:
      return {true, true, {2, 2, 11, 2}, {256, 512, 1024, 1664}, 12400000};  // 104.
  }
}

// BN, ReLU, then a convolution with "same" padding: the pre-activation unit; returns the
// convolution's output and appends the three nodes to `nodes`.
std::string BnReluConv(GraphBuilder& b, const std::string& name, const std::string& x, int64_t in,
                       int64_t out, int64_t kernel, int64_t stride,
                       std::vector<std::string>& nodes) {
  const std::string bn = b.BatchNorm(name + ".bn", x, in);
  const std::string relu = b.Unary("ReLU", name + ".relu", bn);
  const std::string conv = b.Conv2D(name + ".conv", relu, in, out, kernel, stride, kernel / 2);
  nodes.insert(nodes.end(), {bn, relu, conv});
  return conv;
}

// A residual function of `in` -> `out` channels, the first convolution with `stride`:
// basic (two 3x3) or bottleneck (1x1 to out/4, 3x3, 1x1 to out), pre-activation. Returns its
// output; its nodes go to `nodes`.
std::string ResidualFunction(GraphBuilder& b, const std::string& name, const std::string& x,
                             bool bottleneck, int64_t in, int64_t out, int64_t stride,
                             std::vector<std::string>& nodes) {
  if (!bottleneck) {
    const std::string y = BnReluConv(b, name + ".1", x, in, out, 3, stride, nodes);
    return BnReluConv(b, name + ".2", y, out, out, 3, 1, nodes);
  }
  const int64_t inner = out / 4;
  std::string y = BnReluConv(b, name + ".1", x, in, inner, 1, 1, nodes);
  y = BnReluConv(b, name + ".2", y, inner, inner, 3, stride, nodes);
  return BnReluConv(b, name + ".3", y, inner, out, 1, 1, nodes);
}

}  // namespace

int64_t RevNetPaperParameters(int depth) { return RevNetLayoutOf(depth).paper_parameters; }

absl::StatusOr<proto::GraphDef> BuildRevNet(int depth, int64_t batch, const ZooOptions& options) {
  const RevNetLayout layout = RevNetLayoutOf(depth);
  const int64_t size = options.at("image_size");
  const int64_t stages = static_cast<int64_t>(layout.units.size());
  const int64_t reduction = (layout.imagenet ? 4 : 1) << (stages - 1);
  if (size % reduction != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("revnet", depth, ": image_size ", size, " is not a multiple of ", reduction));
  }
  const bool declare = options.at("reversible") != 0;
  GraphBuilder b(absl::StrCat("revnet", depth));
  const int64_t channels = options.at("channels");
  std::string x = b.Input("images", {batch, channels, size, size});
  // Stem: CIFAR conv3x3; ImageNet conv7x7/2, BN, ReLU, max-pool 3x3/2.
  if (layout.imagenet) {
    x = b.Conv2D("stem.conv", x, channels, layout.width[0], 7, 2, 3);
    x = b.Unary("ReLU", "stem.relu", b.BatchNorm("stem.bn", x, layout.width[0]));
    x = b.Op("MaxPool", "stem.pool", {x},
             {{"kernel_size", IntsAttr({3, 3})},
              {"stride", IntsAttr({2, 2})},
              {"padding", IntsAttr({1, 1})}});
  } else {
    x = b.Conv2D("stem.conv", x, channels, layout.width[0], 3, 1, 1);
  }
  const int64_t half0 = layout.width[0] / 2;
  b.AddNode("Split", "split", {x}, {"x1", "x2"},
            {{"axis", IntAttr(1)}, {"sizes", IntsAttr({half0, half0})}});
  std::string x1 = "x1", x2 = "x2";
  int64_t half = half0;
  for (int64_t s = 0; s < stages; ++s) {
    const int64_t out = layout.width[s] / 2;
    for (int64_t u = 0; u < layout.units[s]; ++u) {
      const std::string unit = absl::StrCat("layer", s + 1, ".", u);
      // The first unit of stages 2.. downsamples: F and the shortcuts have stride 2 and
      // widen the halves; it cannot be inverted, so it is not declared reversible.
      const bool down = s > 0 && u == 0;
      const int64_t stride = down ? 2 : 1;
      std::string short1 = x1, short2 = x2;
      if (down) {
        short1 = b.Conv2D(unit + ".down1", x1, half, out, 1, 2, 0);
        short2 = b.Conv2D(unit + ".down2", x2, half, out, 1, 2, 0);
      }
      std::vector<std::string> f_nodes, g_nodes;
      const std::string f =
          ResidualFunction(b, unit + ".f", x2, layout.bottleneck, half, out, stride, f_nodes);
      const std::string y1 = b.Add(unit + ".y1", short1, f);
      const std::string g =
          ResidualFunction(b, unit + ".g", y1, layout.bottleneck, out, out, 1, g_nodes);
      const std::string y2 = b.Add(unit + ".y2", short2, g);
      if (declare && !down) b.ReversibleBlock(unit, y1, y2, f_nodes, g_nodes);
      x1 = y1;
      x2 = y2;
      half = out;
    }
  }
  const int64_t width = 2 * half;
  x = b.Op("Concat", "concat", {x1, x2}, {{"axis", IntAttr(1)}});
  x = b.Unary("ReLU", "final.relu", b.BatchNorm("final.bn", x, width));
  x = b.Op("Flatten", "flatten", {b.Op("GlobalAvgPool", "avgpool", {x})});
  AddCrossEntropyLoss(b, b.Linear("fc", x, width, options.at("classes")), {batch});
  return b.Build();
}

absl::StatusOr<proto::GraphDef> BuildPreactResNet164(int64_t batch, const ZooOptions& options) {
  const int64_t size = options.at("image_size");
  if (size % 4 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("resnet164_cifar: image_size ", size, " is not a multiple of 4"));
  }
  GraphBuilder b("resnet164_cifar");
  const int64_t channels = options.at("channels");
  std::string x = b.Input("images", {batch, channels, size, size});
  x = b.Conv2D("stem.conv", x, channels, 16, 3, 1, 1);
  int64_t in = 16;
  for (int64_t s = 0; s < 3; ++s) {
    const int64_t out = int64_t{64} << s;
    for (int64_t u = 0; u < 18; ++u) {
      const std::string unit = absl::StrCat("layer", s + 1, ".", u);
      const int64_t stride = s > 0 && u == 0 ? 2 : 1;
      std::vector<std::string> nodes;
      const std::string f = ResidualFunction(b, unit + ".f", x, true, in, out, stride, nodes);
      std::string shortcut = x;
      if (in != out || stride != 1) shortcut = b.Conv2D(unit + ".down", x, in, out, 1, stride, 0);
      x = b.Add(unit + ".add", shortcut, f);
      in = out;
    }
  }
  x = b.Unary("ReLU", "final.relu", b.BatchNorm("final.bn", x, in));
  x = b.Op("Flatten", "flatten", {b.Op("GlobalAvgPool", "avgpool", {x})});
  AddCrossEntropyLoss(b, b.Linear("fc", x, in, options.at("classes")), {batch});
  return b.Build();
}

}  // namespace headroom::graph::zoo_internal
