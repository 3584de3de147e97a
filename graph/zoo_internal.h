// Declarations shared by the zoo's source files: the per-family builders that zoo.cc
// dispatches to, and the helpers they have in common. Not part of the public API; use zoo.h.
#ifndef HEADROOM_GRAPH_ZOO_INTERNAL_H_
#define HEADROOM_GRAPH_ZOO_INTERNAL_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "graph/graph_builder.h"
#include "graph/shape.h"
#include "proto/headroom.pb.h"

namespace headroom::graph::zoo_internal {

// A model's options after resolution: every option the model declares is present (set by the
// spec or filled from its default) and within its declared minimum. Builders read them with
// `options.at(name)`; a missing name is a broken invariant of zoo.cc.
using ZooOptions = std::map<std::string, int64_t>;

// Each builder returns the forward graph of its family for `batch` samples (REQUIRES:
// batch > 0) and resolved `options`, or InvalidArgument for option combinations that the
// family cannot build (the message names the model and the options at fault).

// mlp: options depth, width, input, classes.
absl::StatusOr<proto::GraphDef> BuildMlp(int64_t batch, const ZooOptions& options);

// resnet18/34/50/101/152 (torchvision layout, v1.5 bottleneck): options image_size, classes.
// REQUIRES: depth is 18, 34, 50, 101 or 152.
absl::StatusOr<proto::GraphDef> BuildResNet(int depth, int64_t batch, const ZooOptions& options);

// revnet38/110/164 (CIFAR) and revnet104 (ImageNet), Gomez et al. 2017: stages of units
// y1 = x1 + F(x2), y2 = x2 + G(y1) over the two halves of the channels, pre-activation
// residual functions F and G (basic or bottleneck); the first unit of every stage after the
// first downsamples (stride 2, 1x1 projections of the halves) and is not reversible; the
// others are declared reversible blocks unless option reversible is 0. Options image_size,
// channels, classes, reversible. REQUIRES: depth is 38, 110, 164 or 104.
absl::StatusOr<proto::GraphDef> BuildRevNet(int depth, int64_t batch, const ZooOptions& options);
// Returns the parameter count the RevNet paper gives for `depth` (Table 1).
int64_t RevNetPaperParameters(int depth);

// resnet164_cifar: the pre-activation ResNet-164 for CIFAR (He et al. 2016): 3 stages of 18
// bottleneck units (64, 128, 256 channels out), 1x1 projection shortcuts where the shape
// changes. Options image_size, channels, classes.
absl::StatusOr<proto::GraphDef> BuildPreactResNet164(int64_t batch, const ZooOptions& options);

// vgg16 (torchvision layout, no batch norm): options image_size, classes.
absl::StatusOr<proto::GraphDef> BuildVgg16(int64_t batch, const ZooOptions& options);

// mobilenet_v2 (torchvision layout, width multiplier 1): options image_size, classes.
absl::StatusOr<proto::GraphDef> BuildMobileNetV2(int64_t batch, const ZooOptions& options);

// A small CNN for 28x28 images (Fashion-MNIST): two blocks of conv3x3 (bias-free), batch
// norm, ReLU and a 2x2 max-pool (32 then 64 channels), then Linear 128, ReLU, Linear to the
// classes. InvalidArgument for an image size that is not a multiple of 4.
absl::StatusOr<proto::GraphDef> BuildSmallCnn(int64_t batch, const ZooOptions& options);

// transformer (GPT-2 layout with tied embeddings): options layers, d_model, heads, sequence,
// vocab, positions, d_ff.
absl::StatusOr<proto::GraphDef> BuildTransformer(int64_t batch, const ZooOptions& options);

// Adds the Dropout node `name` (output `name`) of `x` with `rate`; returns its output.
std::string AddDropout(GraphBuilder& builder, const std::string& name, const std::string& x,
                       double rate);

// Adds the label tensor "labels" of `label_shape` (int64), the node "loss"
// (SoftmaxCrossEntropy of `logits` against it) and sets it as the graph's loss.
void AddCrossEntropyLoss(GraphBuilder& builder, const std::string& logits,
                         const Shape& label_shape);

}  // namespace headroom::graph::zoo_internal

#endif  // HEADROOM_GRAPH_ZOO_INTERNAL_H_
