#include "graph/zoo.h"

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "graph/zoo_internal.h"
#include "util/status_macros.h"

namespace headroom::graph {
namespace {

using zoo_internal::ZooOptions;

using ZooBuilder = std::function<absl::StatusOr<proto::GraphDef>(int64_t, const ZooOptions&)>;

// One option as the registry declares it.
struct OptionSpec {
  ZooOption option;
};

// Returns the option `name` (`doc`) with `default_value`, accepting [min_value, max_value].
OptionSpec Option(const std::string& name, int64_t default_value, int64_t max_value,
                  const std::string& doc, int64_t min_value = 1) {
  return {ZooOption{name, default_value, doc, min_value, max_value}};
}

// One model of the registry.
struct ModelSpec {
  std::string name;
  std::string doc;
  std::vector<OptionSpec> options;
  ZooBuilder build;
};

std::vector<OptionSpec> ImageOptions(int64_t image_size = 224, int64_t channels = 3,
                                     int64_t classes = 1000) {
  return {Option("image_size", image_size, 4096, "height and width of the square input images"),
          Option("channels", channels, 64, "channels of the input images"),
          Option("classes", classes, 1 << 20, "output classes")};
}

ModelSpec ResNetSpec(int depth) {
  const bool bottleneck = depth >= 50;
  return {absl::StrCat("resnet", depth),
          absl::StrCat("ResNet-", depth, " (torchvision layout",
                       bottleneck ? ", v1.5 bottleneck" : "", ")"),
          ImageOptions(),
          [depth](int64_t batch, const ZooOptions& options) {
            return zoo_internal::BuildResNet(depth, batch, options);
          }};
}

ModelSpec RevNetSpec(int depth) {
  const bool imagenet = depth == 104;
  std::vector<OptionSpec> options = imagenet ? ImageOptions() : ImageOptions(32, 3, 10);
  options.push_back(Option("reversible", 1, 1,
                           "1 declares the reversible blocks (rebuilt in the backward pass); 0 "
                           "builds the same network without them (keeps every activation)",
                           /*min_value=*/0));
  return {absl::StrCat("revnet", depth),
          absl::StrCat("RevNet-", depth, " (Gomez et al. 2017, ", imagenet ? "ImageNet" : "CIFAR",
                       "; the paper counts ",
                       absl::StrFormat("%.2fM", zoo_internal::RevNetPaperParameters(depth) / 1e6),
                       " parameters)"),
          options, [depth](int64_t batch, const ZooOptions& o) {
            return zoo_internal::BuildRevNet(depth, batch, o);
          }};
}

ModelSpec MlpSpec() {
  return {"mlp",
          "multilayer perceptron: Linear+ReLU hidden layers, then a Linear classifier",
          {Option("depth", 4, 1000, "Linear layers, the output layer included"),
           Option("width", 1024, 1 << 16, "features of each hidden layer"),
           Option("input", 784, 1 << 20, "input features"),
           Option("classes", 10, 1 << 20, "output classes")},
          zoo_internal::BuildMlp};
}

ModelSpec TransformerSpec() {
  return {"transformer",
          "GPT-2-style decoder-only transformer with tied embeddings (defaults: GPT-2 small)",
          {Option("layers", 12, 1000, "transformer blocks"),
           Option("d_model", 768, 1 << 16, "embedding width; must be divisible by heads"),
           Option("heads", 12, 1024, "attention heads"),
           Option("sequence", 1024, 1 << 17, "tokens per sample; at most positions"),
           Option("vocab", 50257, 1 << 20, "vocabulary size (rows of wte)"),
           Option("positions", 1024, 1 << 17, "learned positions (rows of wpe)"),
           Option("d_ff", 0, 1 << 18, "hidden width of the MLP; 0 means 4 * d_model",
                  /*min_value=*/0),
           Option("dropout_percent", 10, 99,
                  "dropout rate in percent; 0 leaves out the dropout nodes", /*min_value=*/0)},
          zoo_internal::BuildTransformer};
}

// Returns the registry, in ZooModels() order.
const std::vector<ModelSpec>& Registry() {
  static const auto* const registry = new std::vector<ModelSpec>{
      MlpSpec(),
      ResNetSpec(18),
      ResNetSpec(34),
      ResNetSpec(50),
      ResNetSpec(101),
      ResNetSpec(152),
      {"vgg16", "VGG-16 without batch norm (torchvision layout)", ImageOptions(),
       zoo_internal::BuildVgg16},
      {"mobilenet_v2", "MobileNetV2, width multiplier 1 (torchvision layout)", ImageOptions(),
       zoo_internal::BuildMobileNetV2},
      TransformerSpec(),
      {"small_cnn",
       "small CNN for 28x28 images: 2 x (conv3x3, batch norm, ReLU, max-pool), then 2 Linear "
       "layers",
       ImageOptions(/*image_size=*/28, /*channels=*/1, /*classes=*/10),
       zoo_internal::BuildSmallCnn},
      RevNetSpec(38),
      RevNetSpec(110),
      RevNetSpec(164),
      RevNetSpec(104),
      {"resnet164_cifar",
       "pre-activation ResNet-164 for CIFAR (He et al. 2016; 1.7M parameters): the network "
       "RevNet-164 is compared with",
       ImageOptions(32, 3, 10), zoo_internal::BuildPreactResNet164},
  };
  return *registry;
}

// Returns "a, b, c" of the names of `items`.
template <typename T, typename NameFn>
std::string JoinNames(const std::vector<T>& items, NameFn name) {
  std::vector<std::string> names;
  for (const T& item : items) names.push_back(name(item));
  return absl::StrJoin(names, ", ");
}

absl::StatusOr<const ModelSpec*> FindModel(const std::string& name) {
  for (const ModelSpec& model : Registry()) {
    if (model.name == name) return &model;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown zoo model '", name, "'; valid models: ",
      JoinNames(Registry(), [](const ModelSpec& m) { return m.name; })));
}

// Returns every option of `model`: the spec's values where set, defaults elsewhere; or
// InvalidArgument for an option the model does not declare or a value outside its range.
absl::StatusOr<ZooOptions> ResolveOptions(const ModelSpec& model,
                                          const proto::ZooModel& spec) {
  ZooOptions resolved;
  for (const OptionSpec& option : model.options) {
    resolved[option.option.name] = option.option.default_value;
  }
  for (const auto& [name, value] : spec.options()) {
    if (resolved.count(name) == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "zoo model '", model.name, "' has no option '", name, "'; valid options: ",
          JoinNames(model.options, [](const OptionSpec& o) { return o.option.name; })));
    }
    resolved[name] = value;
  }
  for (const OptionSpec& option : model.options) {
    const int64_t value = resolved[option.option.name];
    if (value < option.option.min_value) {
      return absl::InvalidArgumentError(
          absl::StrCat("zoo model '", model.name, "': option '", option.option.name,
                       "' must be at least ", option.option.min_value, ", got ", value));
    }
    if (value > option.option.max_value) {
      return absl::InvalidArgumentError(
          absl::StrCat("zoo model '", model.name, "': option '", option.option.name,
                       "' must be at most ", option.option.max_value, ", got ", value));
    }
  }
  return resolved;
}

absl::StatusOr<int64_t> CheckBatch(const proto::ZooModel& spec) {
  if (spec.batch() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("zoo model '", spec.name(), "': batch must be positive, got 0"));
  }
  if (spec.batch() > kMaxZooBatch) {
    return absl::InvalidArgumentError(absl::StrCat("zoo model '", spec.name(), "': batch must be at most ",
                                                   kMaxZooBatch, ", got ", spec.batch()));
  }
  return static_cast<int64_t>(spec.batch());
}

}  // namespace

absl::StatusOr<proto::GraphDef> BuildZooModel(const proto::ZooModel& spec) {
  ASSIGN_OR_RETURN(const ModelSpec* model, FindModel(spec.name()));
  ASSIGN_OR_RETURN(int64_t batch, CheckBatch(spec));
  ASSIGN_OR_RETURN(ZooOptions options, ResolveOptions(*model, spec));
  return model->build(batch, options);
}

proto::ZooModel ZooSpec(const std::string& name, uint64_t batch,
                        const std::map<std::string, int64_t>& options) {
  proto::ZooModel spec;
  spec.set_name(name);
  spec.set_batch(batch);
  for (const auto& [key, value] : options) (*spec.mutable_options())[key] = value;
  return spec;
}

const std::vector<ZooModelInfo>& ZooModels() {
  static const auto* const models = [] {
    auto* infos = new std::vector<ZooModelInfo>;
    for (const ModelSpec& model : Registry()) {
      ZooModelInfo info{model.name, model.doc, {}};
      for (const OptionSpec& option : model.options) info.options.push_back(option.option);
      infos->push_back(std::move(info));
    }
    return infos;
  }();
  return *models;
}

namespace zoo_internal {

std::string AddDropout(GraphBuilder& builder, const std::string& name, const std::string& x,
                       double rate) {
  return builder.Op("Dropout", name, {x}, {{"rate", FloatAttr(rate)}});
}

void AddCrossEntropyLoss(GraphBuilder& builder, const std::string& logits,
                         const Shape& label_shape) {
  const std::string labels = builder.Label("labels", label_shape);
  builder.SetLoss(builder.Op("SoftmaxCrossEntropy", "loss", {logits, labels}));
}

}  // namespace zoo_internal
}  // namespace headroom::graph
