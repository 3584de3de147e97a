// The zoo's multilayer perceptron and convolutional networks, laid out and named as
// torchvision builds them (NCHW, float32), so torchvision state_dicts load by name.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "graph/graph_builder.h"
#include "graph/zoo_internal.h"
#include "util/status_macros.h"

namespace headroom::graph::zoo_internal {
namespace {

// A square pooling window of `kernel` with stride `stride` and symmetric `padding`.
std::string Pool(GraphBuilder& b, const std::string& op, const std::string& name,
                 const std::string& x, int64_t kernel, int64_t stride, int64_t padding) {
  return b.Op(op, name, {x},
              {{"kernel_size", IntsAttr({kernel, kernel})},
               {"stride", IntsAttr({stride, stride})},
               {"padding", IntsAttr({padding, padding})}});
}

// GlobalAvgPool "avgpool" then Flatten "flatten": [N,C,H,W] -> [N,C].
std::string PoolAndFlatten(GraphBuilder& b, const std::string& x) {
  return b.Op("Flatten", "flatten", {b.Op("GlobalAvgPool", "avgpool", {x})});
}

// A bias-free convolution `conv` with "same" padding, then batch norm `bn`.
std::string ConvBn(GraphBuilder& b, const std::string& conv, const std::string& bn,
                   const std::string& x, int64_t in_channels, int64_t out_channels,
                   int64_t kernel, int64_t stride, int64_t groups = 1) {
  const std::string y = b.Conv2D(conv, x, in_channels, out_channels, kernel, stride,
                                 (kernel - 1) / 2, groups);
  return b.BatchNorm(bn, y, out_channels);
}

// ---------------------------------------------------------------------------------------------
// ResNet (torchvision.models.resnet).
// ---------------------------------------------------------------------------------------------

// Bottleneck blocks output `planes * kBottleneckExpansion` channels.
constexpr int64_t kBottleneckExpansion = 4;

struct ResNetLayout {
  bool bottleneck;
  std::array<int64_t, 4> blocks;  // Blocks of layer1..layer4.
};

ResNetLayout LayoutOf(int depth) {
  switch (depth) {
    case 18: return {false, {2, 2, 2, 2}};
    case 34: return {false, {3, 4, 6, 3}};
    case 50: return {true, {3, 4, 6, 3}};
    case 101: return {true, {3, 4, 23, 3}};
    default: return {true, {3, 8, 36, 3}};  // 152.
  }
}

// Adds the block's shortcut to `residual` and applies ReLU; the shortcut is `x` itself, or
// "<block>.downsample" (1x1 conv with `stride`, then BN) where the shape changes.
std::string AddShortcut(GraphBuilder& b, const std::string& block, const std::string& x,
                        const std::string& residual, int64_t in_channels,
                        int64_t out_channels, int64_t stride) {
  std::string shortcut = x;
  if (stride != 1 || in_channels != out_channels) {
    shortcut = ConvBn(b, block + ".downsample.0", block + ".downsample.1", x, in_channels,
                      out_channels, 1, stride);
  }
  return b.Unary("ReLU", block + ".relu", b.Add(block + ".add", residual, shortcut));
}

// BasicBlock: 3x3 conv (with `stride`), BN, ReLU, 3x3 conv, BN, shortcut.
std::string BasicBlock(GraphBuilder& b, const std::string& block, const std::string& x,
                       int64_t in_channels, int64_t planes, int64_t stride) {
  std::string y = ConvBn(b, block + ".conv1", block + ".bn1", x, in_channels, planes, 3, stride);
  y = b.Unary("ReLU", block + ".relu1", y);
  y = ConvBn(b, block + ".conv2", block + ".bn2", y, planes, planes, 3, 1);
  return AddShortcut(b, block, x, y, in_channels, planes, stride);
}

// Bottleneck (v1.5, stride on the 3x3): 1x1 conv, 3x3 conv, 1x1 conv expanding to
// 4 * planes, each with BN, ReLU between, then the shortcut.
std::string Bottleneck(GraphBuilder& b, const std::string& block, const std::string& x,
                       int64_t in_channels, int64_t planes, int64_t stride) {
  const int64_t out_channels = planes * kBottleneckExpansion;
  std::string y = ConvBn(b, block + ".conv1", block + ".bn1", x, in_channels, planes, 1, 1);
  y = b.Unary("ReLU", block + ".relu1", y);
  y = ConvBn(b, block + ".conv2", block + ".bn2", y, planes, planes, 3, stride);
  y = b.Unary("ReLU", block + ".relu2", y);
  y = ConvBn(b, block + ".conv3", block + ".bn3", y, planes, out_channels, 1, 1);
  return AddShortcut(b, block, x, y, in_channels, out_channels, stride);
}

// Adds "<layer>.0" .. "<layer>.<blocks-1>"; the first block has `stride`. Updates
// `in_channels` to the stage's output channels and returns its output.
std::string ResNetStage(GraphBuilder& b, const std::string& layer, std::string x,
                        bool bottleneck, int64_t blocks, int64_t planes, int64_t stride,
                        int64_t& in_channels) {
  for (int64_t i = 0; i < blocks; ++i) {
    const std::string block = absl::StrCat(layer, ".", i);
    const int64_t block_stride = i == 0 ? stride : 1;
    x = bottleneck ? Bottleneck(b, block, x, in_channels, planes, block_stride)
                   : BasicBlock(b, block, x, in_channels, planes, block_stride);
    in_channels = bottleneck ? planes * kBottleneckExpansion : planes;
  }
  return x;
}

// conv1 (7x7/2), bn1, relu, maxpool (3x3/2): [N,C,S,S] -> [N,64,S/4,S/4].
std::string ResNetStem(GraphBuilder& b, const std::string& images, int64_t channels) {
  std::string x = b.Conv2D("conv1", images, channels, 64, 7, 2, 3);
  x = b.Unary("ReLU", "relu", b.BatchNorm("bn1", x, 64));
  return Pool(b, "MaxPool", "maxpool", x, 3, 2, 1);
}

// ---------------------------------------------------------------------------------------------
// VGG-16 (torchvision.models.vgg16, configuration "D" without batch norm).
// ---------------------------------------------------------------------------------------------

// Marks a 2x2 max-pool in kVgg16Features.
constexpr int64_t kMaxPool = 0;
constexpr int64_t kVgg16Features[] = {64,  64,  kMaxPool, 128, 128, kMaxPool, 256,
                                      256, 256, kMaxPool, 512, 512, 512,      kMaxPool,
                                      512, 512, 512,      kMaxPool};
// torchvision's adaptive pool output side, and the spatial reduction of the features.
constexpr int64_t kVggPooledSide = 7;
constexpr int64_t kVggFeatureStride = 32;

// Adds "features.<i>" modules numbered as nn.Sequential numbers them: each conv3x3 (with bias)
// and its ReLU take two indices, each max-pool one. Returns [N,512,S/32,S/32].
std::string Vgg16Features(GraphBuilder& b, std::string x, int64_t in_channels) {
  int64_t index = 0;
  for (int64_t channels : kVgg16Features) {
    if (channels == kMaxPool) {
      x = Pool(b, "MaxPool", absl::StrCat("features.", index++), x, 2, 2, 0);
      continue;
    }
    x = b.Conv2D(absl::StrCat("features.", index++), x, in_channels, channels, 3, 1, 1,
                 /*groups=*/1, /*bias=*/true);
    x = b.Unary("ReLU", absl::StrCat("features.", index++), x);
    in_channels = channels;
  }
  return x;
}

// Returns the AvgPool kernel (= stride) that stands for AdaptiveAvgPool2d((7, 7)) at
// `image_size` (1: no pool needed), or InvalidArgument if no fixed pool is equivalent.
absl::StatusOr<int64_t> VggAvgPoolKernel(int64_t image_size) {
  const int64_t side = image_size / kVggFeatureStride;
  if (image_size % kVggFeatureStride != 0 || side % kVggPooledSide != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "zoo model 'vgg16': image_size ", image_size,
        " is not supported; torchvision's AdaptiveAvgPool2d((7, 7)) is modelled as a fixed "
        "AvgPool, which needs image_size to be a multiple of 32 whose quotient by 32 is a "
        "multiple of 7, i.e. a multiple of 224 (224, 448, 672, ...)"));
  }
  return side / kVggPooledSide;
}

// classifier.0..6: Linear 25088->4096, ReLU, Dropout, Linear 4096->4096, ReLU, Dropout,
// Linear 4096->classes.
std::string Vgg16Classifier(GraphBuilder& b, const std::string& x, int64_t classes) {
  constexpr int64_t kHidden = 4096;
  constexpr int64_t kFeatures = 512 * kVggPooledSide * kVggPooledSide;
  std::string y = b.Linear("classifier.0", x, kFeatures, kHidden);
  y = AddDropout(b, "classifier.2", b.Unary("ReLU", "classifier.1", y), 0.5);
  y = b.Linear("classifier.3", y, kHidden, kHidden);
  y = AddDropout(b, "classifier.5", b.Unary("ReLU", "classifier.4", y), 0.5);
  return b.Linear("classifier.6", y, kHidden, classes);
}

// ---------------------------------------------------------------------------------------------
// MobileNetV2 (torchvision.models.mobilenet_v2, width multiplier 1).
// ---------------------------------------------------------------------------------------------

struct InvertedResidualSetting {
  int64_t expand_ratio;  // t
  int64_t channels;      // c
  int64_t repeats;       // n
  int64_t stride;        // s, of the first repeat
};

constexpr InvertedResidualSetting kMobileNetV2Settings[] = {
    {1, 16, 1, 1}, {6, 24, 2, 2},  {6, 32, 3, 2},  {6, 64, 4, 2},
    {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1},
};
constexpr int64_t kMobileNetV2StemChannels = 32;
constexpr int64_t kMobileNetV2LastChannels = 1280;

// Conv2dNormActivation: "<name>.0" conv (no bias), "<name>.1" BN, "<name>.2" ReLU6.
std::string ConvBnReLU6(GraphBuilder& b, const std::string& name, const std::string& x,
                        int64_t in_channels, int64_t out_channels, int64_t kernel,
                        int64_t stride, int64_t groups = 1) {
  const std::string y = ConvBn(b, name + ".0", name + ".1", x, in_channels, out_channels,
                               kernel, stride, groups);
  return b.Unary("ReLU6", name + ".2", y);
}

// InvertedResidual "<block>.conv.<i>": optional 1x1 expansion (when expand_ratio != 1),
// depthwise 3x3 with `stride`, linear 1x1 projection and BN; adds `x` back ("<block>.add")
// when stride is 1 and the channels match.
std::string InvertedResidual(GraphBuilder& b, const std::string& block, const std::string& x,
                             int64_t in_channels, int64_t out_channels, int64_t stride,
                             int64_t expand_ratio) {
  const std::string conv = block + ".conv.";
  const int64_t hidden = in_channels * expand_ratio;
  int index = 0;
  std::string y = x;
  if (expand_ratio != 1) {
    y = ConvBnReLU6(b, conv + std::to_string(index++), y, in_channels, hidden, 1, 1);
  }
  y = ConvBnReLU6(b, conv + std::to_string(index++), y, hidden, hidden, 3, stride, hidden);
  y = b.Conv2D(conv + std::to_string(index++), y, hidden, out_channels, 1, 1, 0);
  y = b.BatchNorm(conv + std::to_string(index), y, out_channels);
  if (stride == 1 && in_channels == out_channels) y = b.Add(block + ".add", x, y);
  return y;
}

// features.0 .. features.18: stem, the 17 inverted residual blocks, the 1x1 conv to 1280.
std::string MobileNetV2Features(GraphBuilder& b, const std::string& images, int64_t channels) {
  std::string x = ConvBnReLU6(b, "features.0", images, channels, kMobileNetV2StemChannels, 3, 2);
  int64_t index = 1;
  int64_t in_channels = kMobileNetV2StemChannels;
  for (const InvertedResidualSetting& s : kMobileNetV2Settings) {
    for (int64_t i = 0; i < s.repeats; ++i) {
      x = InvertedResidual(b, absl::StrCat("features.", index++), x, in_channels, s.channels,
                           i == 0 ? s.stride : 1, s.expand_ratio);
      in_channels = s.channels;
    }
  }
  return ConvBnReLU6(b, absl::StrCat("features.", index), x, in_channels,
                     kMobileNetV2LastChannels, 1, 1);
}

}  // namespace

absl::StatusOr<proto::GraphDef> BuildMlp(int64_t batch, const ZooOptions& options) {
  const int64_t depth = options.at("depth");
  const int64_t width = options.at("width");
  GraphBuilder b("mlp");
  std::string x = b.Input("x", {batch, options.at("input")});
  int64_t in_features = options.at("input");
  for (int64_t i = 1; i < depth; ++i) {
    x = b.Unary("ReLU", absl::StrCat("relu", i),
                b.Linear(absl::StrCat("fc", i), x, in_features, width));
    in_features = width;
  }
  const std::string logits =
      b.Linear(absl::StrCat("fc", depth), x, in_features, options.at("classes"));
  AddCrossEntropyLoss(b, logits, {batch});
  return b.Build();
}

absl::StatusOr<proto::GraphDef> BuildResNet(int depth, int64_t batch,
                                            const ZooOptions& options) {
  const ResNetLayout layout = LayoutOf(depth);
  const int64_t size = options.at("image_size");
  GraphBuilder b(absl::StrCat("resnet", depth));
  const int64_t in = options.at("channels");
  std::string x = ResNetStem(b, b.Input("images", {batch, in, size, size}), in);
  int64_t channels = 64;
  const int64_t planes[4] = {64, 128, 256, 512};
  for (int stage = 0; stage < 4; ++stage) {
    x = ResNetStage(b, absl::StrCat("layer", stage + 1), x, layout.bottleneck,
                    layout.blocks[stage], planes[stage], stage == 0 ? 1 : 2, channels);
  }
  const std::string logits =
      b.Linear("fc", PoolAndFlatten(b, x), channels, options.at("classes"));
  AddCrossEntropyLoss(b, logits, {batch});
  return b.Build();
}

absl::StatusOr<proto::GraphDef> BuildVgg16(int64_t batch, const ZooOptions& options) {
  const int64_t size = options.at("image_size");
  ASSIGN_OR_RETURN(const int64_t pool_kernel, VggAvgPoolKernel(size));
  GraphBuilder b("vgg16");
  const int64_t in = options.at("channels");
  std::string x = Vgg16Features(b, b.Input("images", {batch, in, size, size}), in);
  if (pool_kernel > 1) x = Pool(b, "AvgPool", "avgpool", x, pool_kernel, pool_kernel, 0);
  x = b.Op("Flatten", "flatten", {x});
  AddCrossEntropyLoss(b, Vgg16Classifier(b, x, options.at("classes")), {batch});
  return b.Build();
}

absl::StatusOr<proto::GraphDef> BuildMobileNetV2(int64_t batch, const ZooOptions& options) {
  const int64_t size = options.at("image_size");
  GraphBuilder b("mobilenet_v2");
  const int64_t in = options.at("channels");
  std::string x = MobileNetV2Features(b, b.Input("images", {batch, in, size, size}), in);
  x = AddDropout(b, "classifier.0", PoolAndFlatten(b, x), 0.2);
  const std::string logits =
      b.Linear("classifier.1", x, kMobileNetV2LastChannels, options.at("classes"));
  AddCrossEntropyLoss(b, logits, {batch});
  return b.Build();
}

absl::StatusOr<proto::GraphDef> BuildSmallCnn(int64_t batch, const ZooOptions& options) {
  const int64_t size = options.at("image_size");
  const int64_t in = options.at("channels");
  if (size % 4 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "small_cnn: image_size ", size, " is not a multiple of 4 (two 2x2 max-pools)"));
  }
  GraphBuilder b("small_cnn");
  std::string x = b.Input("images", {batch, in, size, size});
  int64_t channels = in;
  for (const auto& [index, out] : {std::pair{1, 32}, std::pair{2, 64}}) {
    const std::string n = std::to_string(index);
    x = ConvBn(b, "conv" + n, "bn" + n, x, channels, out, 3, 1);
    x = Pool(b, "MaxPool", "pool" + n, b.Unary("ReLU", "relu" + n, x), 2, 2, 0);
    channels = out;
  }
  x = b.Op("Flatten", "flatten", {x});
  x = b.Unary("ReLU", "relu3", b.Linear("fc1", x, channels * (size / 4) * (size / 4), 128));
  AddCrossEntropyLoss(b, b.Linear("fc2", x, 128, options.at("classes")), {batch});
  return b.Build();
}

}  // namespace headroom::graph::zoo_internal
