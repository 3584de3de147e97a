#include "graph/zoo.h"

#include <cstdint>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "graph/graph.h"
#include "graph/summary.h"
#include "gtest/gtest.h"
#include "proto/headroom.pb.h"

namespace headroom::graph {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

using Options = std::map<std::string, int64_t>;

proto::ZooModel Spec(const std::string& name, uint64_t batch, const Options& options = {}) {
  return ZooSpec(name, batch, options);
}

// Builds a model that must build.
proto::GraphDef MustBuild(const std::string& name, uint64_t batch, const Options& options = {}) {
  absl::StatusOr<proto::GraphDef> def = BuildZooModel(Spec(name, batch, options));
  EXPECT_TRUE(def.ok()) << name << ": " << def.status();
  return def.ok() ? *def : proto::GraphDef();
}

// Returns the error message of a spec that must fail with InvalidArgument.
std::string MustFail(const std::string& name, uint64_t batch, const Options& options = {}) {
  absl::StatusOr<proto::GraphDef> def = BuildZooModel(Spec(name, batch, options));
  EXPECT_EQ(def.status().code(), absl::StatusCode::kInvalidArgument) << def.status();
  return std::string(def.status().message());
}

// Sums the elements of the tensors of `role`, straight from the description.
uint64_t CountElements(const proto::GraphDef& def, proto::TensorRole role) {
  uint64_t total = 0;
  for (const proto::TensorDef& t : def.tensors()) {
    if (t.role() != role) continue;
    uint64_t elements = 1;
    for (int64_t d : t.shape()) elements *= d;
    total += elements;
  }
  return total;
}

uint64_t CountParameters(const proto::GraphDef& def) {
  return CountElements(def, proto::ROLE_PARAMETER);
}

// Returns the names of the tensors of `role`.
std::set<std::string> NamesWithRole(const proto::GraphDef& def, proto::TensorRole role) {
  std::set<std::string> names;
  for (const proto::TensorDef& t : def.tensors()) {
    if (t.role() == role) names.insert(t.name());
  }
  return names;
}

const proto::TensorDef* FindTensorDef(const proto::GraphDef& def, const std::string& name) {
  for (const proto::TensorDef& t : def.tensors()) {
    if (t.name() == name) return &t;
  }
  return nullptr;
}

// Expects a listed tensor `name` with `role` and `shape`.
void ExpectTensor(const proto::GraphDef& def, const std::string& name, proto::TensorRole role,
                  const std::vector<int64_t>& shape) {
  const proto::TensorDef* t = FindTensorDef(def, name);
  ASSERT_NE(t, nullptr) << def.name() << " lacks tensor '" << name << "'";
  EXPECT_EQ(t->role(), role) << name;
  EXPECT_THAT(t->shape(), ElementsAreArray(shape)) << name;
}

// Every model with small enough options to build and validate quickly at any batch.
std::vector<std::pair<std::string, Options>> SmallModels() {
  return {{"mlp", {}},
          {"resnet18", {}},
          {"resnet34", {}},
          {"resnet50", {}},
          {"resnet101", {}},
          {"resnet152", {}},
          {"vgg16", {}},
          {"mobilenet_v2", {}},
          {"small_cnn", {}},
          {"revnet38", {}},
          {"revnet110", {}},
          {"revnet164", {}},
          {"revnet104", {{"image_size", 64}}},
          {"resnet164_cifar", {}},
          {"transformer",
           {{"layers", 2},
            {"d_model", 64},
            {"heads", 4},
            {"sequence", 16},
            {"vocab", 100},
            {"positions", 16}}}};
}

// ---------------------------------------------------------------------------------------------
// The registry.
// ---------------------------------------------------------------------------------------------

TEST(ZooModelsTest, ListsEveryModelInOrder) {
  std::vector<std::string> names;
  for (const ZooModelInfo& info : ZooModels()) names.push_back(info.name);
  EXPECT_THAT(names,
              ElementsAre("mlp", "resnet18", "resnet34", "resnet50", "resnet101", "resnet152",
                          "vgg16", "mobilenet_v2", "transformer", "small_cnn", "revnet38",
                          "revnet110", "revnet164", "revnet104", "resnet164_cifar"));
}

TEST(ZooModelsTest, EveryModelAndOptionIsDocumented) {
  for (const ZooModelInfo& info : ZooModels()) {
    EXPECT_FALSE(info.doc.empty()) << info.name;
    EXPECT_FALSE(info.options.empty()) << info.name;
    for (const ZooOption& option : info.options) {
      EXPECT_FALSE(option.doc.empty()) << info.name << "." << option.name;
    }
  }
}

TEST(ZooModelsTest, ExplicitDefaultsBuildTheSameGraph) {
  for (const ZooModelInfo& info : ZooModels()) {
    Options defaults;
    for (const ZooOption& option : info.options) defaults[option.name] = option.default_value;
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(
        MustBuild(info.name, 1, defaults), MustBuild(info.name, 1)))
        << info.name;
  }
}

// ---------------------------------------------------------------------------------------------
// Parameter counts: the published figures of torchvision and Hugging Face.
// ---------------------------------------------------------------------------------------------

TEST(ZooParameterCountTest, MatchesPublishedCountsAtAnyBatch) {
  const std::map<std::string, uint64_t> expected = {
      {"resnet18", 11'689'512},   {"resnet34", 21'797'672},  {"resnet50", 25'557'032},
      {"resnet101", 44'549'160},  {"resnet152", 60'192'808}, {"vgg16", 138'357'544},
      {"mobilenet_v2", 3'504'872}, {"transformer", 124'439'808}};
  for (const auto& [name, count] : expected) {
    for (uint64_t batch : {1, 2, 7}) {
      EXPECT_EQ(CountParameters(MustBuild(name, batch)), count) << name << " batch " << batch;
    }
  }
}

// PyTorch's count of the same layers (nn.Sequential of Conv2d(bias=False), BatchNorm2d,
// ReLU, MaxPool2d, Flatten, Linear): 421,738 for 1x28x28 and 10 classes.
TEST(ZooParameterCountTest, SmallCnnMatchesPyTorch) {
  EXPECT_EQ(CountParameters(MustBuild("small_cnn", 4)), 421'738u);
  // 3 channels of 32x32: conv1 grows by 2 * 32 * 9, fc1 by 64 * (64 - 49) * 128.
  EXPECT_EQ(CountParameters(MustBuild("small_cnn", 4, {{"channels", 3}, {"image_size", 32}})),
            421'738u + 2 * 32 * 9 + 64 * 15 * 128);
  absl::StatusOr<proto::GraphDef> odd = BuildZooModel(Spec("small_cnn", 1, {{"image_size", 30}}));
  EXPECT_THAT(odd.status().message(), HasSubstr("not a multiple of 4"));
}

// The channels option changes only the first convolution: torchvision's resnet18 with
// 10 classes has 11,181,642 parameters; one input channel takes 2 * 64 * 49 fewer.
TEST(ZooParameterCountTest, ChannelsChangeOnlyTheStem) {
  EXPECT_EQ(CountParameters(MustBuild("resnet18", 2, {{"channels", 1}, {"classes", 10}})),
            11'175'370u);
}

// Linear layers input->width, (depth-2) x width->width, width->classes, each with a bias.
uint64_t MlpParameters(int64_t depth, int64_t width, int64_t input, int64_t classes) {
  if (depth == 1) return input * classes + classes;
  return input * width + width + (depth - 2) * (width * width + width) + width * classes +
         classes;
}

TEST(ZooParameterCountTest, MlpMatchesFormula) {
  EXPECT_EQ(CountParameters(MustBuild("mlp", 3)), MlpParameters(4, 1024, 784, 10));
  for (int64_t depth : {1, 2, 5}) {
    const Options options = {{"depth", depth}, {"width", 33}, {"input", 17}, {"classes", 5}};
    EXPECT_EQ(CountParameters(MustBuild("mlp", 2, options)), MlpParameters(depth, 33, 17, 5))
        << "depth " << depth;
  }
}

// wte + wpe + per layer (two LayerNorms, c_attn, attn.c_proj, c_fc, mlp.c_proj) + ln_f.
uint64_t TransformerParameters(int64_t layers, int64_t d, int64_t vocab, int64_t positions,
                               int64_t d_ff) {
  const int64_t per_layer =
      2 * (2 * d) + (d * 3 * d + 3 * d) + (d * d + d) + (d * d_ff + d_ff) + (d_ff * d + d);
  return vocab * d + positions * d + layers * per_layer + 2 * d;
}

TEST(ZooParameterCountTest, TransformerMatchesFormula) {
  const Options options = {{"layers", 3}, {"d_model", 48}, {"heads", 6}, {"sequence", 10},
                           {"vocab", 99}, {"positions", 12}, {"d_ff", 100}};
  EXPECT_EQ(CountParameters(MustBuild("transformer", 2, options)),
            TransformerParameters(3, 48, 99, 12, 100));
  EXPECT_EQ(TransformerParameters(12, 768, 50257, 1024, 3072), 124'439'808u);
}

// ---------------------------------------------------------------------------------------------
// Well-formed descriptions, checked without Graph.
// ---------------------------------------------------------------------------------------------

// Expects unique tensor and node names, every node input defined (listed or produced), no
// listed leaf also produced by a node, and a loss produced by a node.
void ExpectWellFormed(const proto::GraphDef& def) {
  std::set<std::string> listed, produced, nodes;
  for (const proto::TensorDef& t : def.tensors()) {
    EXPECT_TRUE(listed.insert(t.name()).second) << def.name() << ": tensor " << t.name();
  }
  for (const proto::NodeDef& n : def.nodes()) {
    EXPECT_TRUE(nodes.insert(n.name()).second) << def.name() << ": node " << n.name();
    for (const std::string& out : n.outputs()) {
      EXPECT_TRUE(produced.insert(out).second) << def.name() << ": output " << out;
      EXPECT_EQ(listed.count(out), 0u) << def.name() << ": leaf " << out << " is produced";
    }
  }
  for (const proto::NodeDef& n : def.nodes()) {
    for (const std::string& in : n.inputs()) {
      EXPECT_TRUE(listed.count(in) + produced.count(in) > 0)
          << def.name() << ": node " << n.name() << " reads undefined " << in;
    }
  }
  EXPECT_EQ(produced.count(def.loss()), 1u) << def.name() << ": loss " << def.loss();
}

TEST(ZooWellFormedTest, EveryModelAtBatchOneAndTwo) {
  for (const auto& [name, options] : SmallModels()) {
    for (uint64_t batch : {1, 2}) {
      SCOPED_TRACE(name + " batch " + std::to_string(batch));
      ExpectWellFormed(MustBuild(name, batch, options));
    }
  }
  ExpectWellFormed(MustBuild("transformer", 1));
}

TEST(ZooWellFormedTest, InputsAndLabels) {
  const proto::GraphDef resnet = MustBuild("resnet18", 3, {{"image_size", 64}});
  ExpectTensor(resnet, "images", proto::ROLE_INPUT, {3, 3, 64, 64});
  ExpectTensor(resnet, "labels", proto::ROLE_LABEL, {3});
  EXPECT_EQ(FindTensorDef(resnet, "labels")->dtype(), proto::DTYPE_INT64);
  const proto::GraphDef mlp = MustBuild("mlp", 5);
  ExpectTensor(mlp, "x", proto::ROLE_INPUT, {5, 784});
  EXPECT_EQ(FindTensorDef(mlp, "x")->dtype(), proto::DTYPE_FLOAT32);
  const proto::GraphDef gpt = MustBuild("transformer", 2, {{"sequence", 8}});
  ExpectTensor(gpt, "tokens", proto::ROLE_INPUT, {2, 8});
  ExpectTensor(gpt, "positions", proto::ROLE_INPUT, {8});
  ExpectTensor(gpt, "labels", proto::ROLE_LABEL, {2, 8});
  EXPECT_EQ(FindTensorDef(gpt, "tokens")->dtype(), proto::DTYPE_INT64);
}

// ---------------------------------------------------------------------------------------------
// Parameter names: torchvision's and Hugging Face's state_dict keys.
// ---------------------------------------------------------------------------------------------

TEST(ZooNamesTest, ResNet) {
  const proto::GraphDef r50 = MustBuild("resnet50", 1);
  ExpectTensor(r50, "conv1.weight", proto::ROLE_PARAMETER, {64, 3, 7, 7});
  ExpectTensor(r50, "bn1.running_mean", proto::ROLE_BUFFER, {64});
  ExpectTensor(r50, "layer1.0.downsample.0.weight", proto::ROLE_PARAMETER, {256, 64, 1, 1});
  ExpectTensor(r50, "layer2.0.conv2.weight", proto::ROLE_PARAMETER, {128, 128, 3, 3});
  ExpectTensor(r50, "layer4.2.bn3.running_var", proto::ROLE_BUFFER, {2048});
  ExpectTensor(r50, "fc.weight", proto::ROLE_PARAMETER, {1000, 2048});
  ExpectTensor(r50, "fc.bias", proto::ROLE_PARAMETER, {1000});
  EXPECT_EQ(FindTensorDef(r50, "conv1.bias"), nullptr);
  EXPECT_EQ(FindTensorDef(r50, "layer1.1.downsample.0.weight"), nullptr);
  // torchvision: 161 parameters; 106 buffers less 53 num_batches_tracked.
  EXPECT_EQ(NamesWithRole(r50, proto::ROLE_PARAMETER).size(), 161u);
  EXPECT_EQ(NamesWithRole(r50, proto::ROLE_BUFFER).size(), 106u);

  const proto::GraphDef r18 = MustBuild("resnet18", 1, {{"classes", 10}});
  EXPECT_EQ(FindTensorDef(r18, "layer1.0.downsample.0.weight"), nullptr);
  ExpectTensor(r18, "layer2.0.downsample.0.weight", proto::ROLE_PARAMETER, {128, 64, 1, 1});
  ExpectTensor(r18, "layer2.0.downsample.1.running_var", proto::ROLE_BUFFER, {128});
  ExpectTensor(r18, "layer4.1.conv2.weight", proto::ROLE_PARAMETER, {512, 512, 3, 3});
  ExpectTensor(r18, "fc.weight", proto::ROLE_PARAMETER, {10, 512});
  EXPECT_EQ(NamesWithRole(r18, proto::ROLE_PARAMETER).size(), 62u);
  EXPECT_EQ(NamesWithRole(r18, proto::ROLE_BUFFER).size(), 40u);

  ExpectTensor(MustBuild("resnet152", 1), "layer3.35.bn3.weight", proto::ROLE_PARAMETER,
               {1024});
}

TEST(ZooNamesTest, Vgg16) {
  const proto::GraphDef vgg = MustBuild("vgg16", 1);
  // Convs at the nn.Sequential indices torchvision gives them (ReLU and MaxPool take the rest).
  const std::set<std::string> expected = {
      "features.0.weight",  "features.0.bias",  "features.2.weight",  "features.2.bias",
      "features.5.weight",  "features.5.bias",  "features.7.weight",  "features.7.bias",
      "features.10.weight", "features.10.bias", "features.12.weight", "features.12.bias",
      "features.14.weight", "features.14.bias", "features.17.weight", "features.17.bias",
      "features.19.weight", "features.19.bias", "features.21.weight", "features.21.bias",
      "features.24.weight", "features.24.bias", "features.26.weight", "features.26.bias",
      "features.28.weight", "features.28.bias", "classifier.0.weight", "classifier.0.bias",
      "classifier.3.weight", "classifier.3.bias", "classifier.6.weight", "classifier.6.bias"};
  EXPECT_EQ(NamesWithRole(vgg, proto::ROLE_PARAMETER), expected);
  EXPECT_TRUE(NamesWithRole(vgg, proto::ROLE_BUFFER).empty());
  ExpectTensor(vgg, "features.0.weight", proto::ROLE_PARAMETER, {64, 3, 3, 3});
  ExpectTensor(vgg, "features.28.weight", proto::ROLE_PARAMETER, {512, 512, 3, 3});
  ExpectTensor(vgg, "classifier.0.weight", proto::ROLE_PARAMETER, {4096, 25088});
  ExpectTensor(vgg, "classifier.6.weight", proto::ROLE_PARAMETER, {1000, 4096});
}

TEST(ZooNamesTest, MobileNetV2) {
  const proto::GraphDef mnv2 = MustBuild("mobilenet_v2", 1);
  ExpectTensor(mnv2, "features.0.0.weight", proto::ROLE_PARAMETER, {32, 3, 3, 3});
  ExpectTensor(mnv2, "features.0.1.running_mean", proto::ROLE_BUFFER, {32});
  // Block 1 (t = 1): depthwise conv.0, projection conv.1, its BN conv.2.
  ExpectTensor(mnv2, "features.1.conv.0.0.weight", proto::ROLE_PARAMETER, {32, 1, 3, 3});
  ExpectTensor(mnv2, "features.1.conv.1.weight", proto::ROLE_PARAMETER, {16, 32, 1, 1});
  ExpectTensor(mnv2, "features.1.conv.2.weight", proto::ROLE_PARAMETER, {16});
  // Block 2 (t = 6): expansion conv.0, depthwise conv.1, projection conv.2, its BN conv.3.
  ExpectTensor(mnv2, "features.2.conv.0.0.weight", proto::ROLE_PARAMETER, {96, 16, 1, 1});
  ExpectTensor(mnv2, "features.2.conv.1.0.weight", proto::ROLE_PARAMETER, {96, 1, 3, 3});
  ExpectTensor(mnv2, "features.2.conv.2.weight", proto::ROLE_PARAMETER, {24, 96, 1, 1});
  ExpectTensor(mnv2, "features.17.conv.3.running_var", proto::ROLE_BUFFER, {320});
  ExpectTensor(mnv2, "features.18.0.weight", proto::ROLE_PARAMETER, {1280, 320, 1, 1});
  ExpectTensor(mnv2, "classifier.1.weight", proto::ROLE_PARAMETER, {1000, 1280});
  // torchvision: 158 parameters; 104 buffers less 52 num_batches_tracked.
  EXPECT_EQ(NamesWithRole(mnv2, proto::ROLE_PARAMETER).size(), 158u);
  EXPECT_EQ(NamesWithRole(mnv2, proto::ROLE_BUFFER).size(), 104u);
}

TEST(ZooNamesTest, MobileNetV2ResidualsWhereShapesMatch) {
  const proto::GraphDef mnv2 = MustBuild("mobilenet_v2", 1);
  std::set<std::string> adds;
  for (const proto::NodeDef& n : mnv2.nodes()) {
    if (n.op() == "Add") adds.insert(n.name());
  }
  // Repeats after the first of each setting: 24x2, 32x3, 64x4, 96x3, 160x3.
  EXPECT_EQ(adds, (std::set<std::string>{"features.3.add", "features.5.add", "features.6.add",
                                         "features.8.add", "features.9.add", "features.10.add",
                                         "features.12.add", "features.13.add",
                                         "features.15.add", "features.16.add"}));
}

TEST(ZooNamesTest, Transformer) {
  const proto::GraphDef gpt = MustBuild("transformer", 1);
  ExpectTensor(gpt, "wte.weight", proto::ROLE_PARAMETER, {50257, 768});
  ExpectTensor(gpt, "wpe.weight", proto::ROLE_PARAMETER, {1024, 768});
  ExpectTensor(gpt, "ln_f.bias", proto::ROLE_PARAMETER, {768});
  std::set<std::string> expected = {"wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias"};
  for (int layer = 0; layer < 12; ++layer) {
    const std::string h = "h." + std::to_string(layer) + ".";
    for (const char* module : {"ln_1", "attn.c_attn", "attn.c_proj", "ln_2", "mlp.c_fc",
                               "mlp.c_proj"}) {
      expected.insert(h + module + ".weight");
      expected.insert(h + module + ".bias");
    }
  }
  EXPECT_EQ(NamesWithRole(gpt, proto::ROLE_PARAMETER), expected);
  // Hugging Face's Conv1D layout: weight [in, out].
  ExpectTensor(gpt, "h.0.attn.c_attn.weight", proto::ROLE_PARAMETER, {768, 2304});
  ExpectTensor(gpt, "h.0.attn.c_attn.bias", proto::ROLE_PARAMETER, {2304});
  ExpectTensor(gpt, "h.11.mlp.c_fc.weight", proto::ROLE_PARAMETER, {768, 3072});
  ExpectTensor(gpt, "h.11.mlp.c_proj.weight", proto::ROLE_PARAMETER, {3072, 768});
}

TEST(ZooNamesTest, TransformerDffOverride) {
  const proto::GraphDef gpt = MustBuild("transformer", 1, {{"layers", 1}, {"d_ff", 100}});
  ExpectTensor(gpt, "h.0.mlp.c_fc.weight", proto::ROLE_PARAMETER, {768, 100});
  ExpectTensor(gpt, "h.0.mlp.c_proj.weight", proto::ROLE_PARAMETER, {100, 768});
}

// ---------------------------------------------------------------------------------------------
// Errors.
// ---------------------------------------------------------------------------------------------

TEST(ZooErrorTest, UnknownModelListsValidNames) {
  const std::string message = MustFail("resnet51", 1);
  EXPECT_THAT(message, HasSubstr("'resnet51'"));
  for (const ZooModelInfo& info : ZooModels()) EXPECT_THAT(message, HasSubstr(info.name));
}

TEST(ZooErrorTest, UnknownOptionNamedWithValidOnes) {
  const std::string message = MustFail("resnet50", 1, {{"depth", 50}});
  EXPECT_THAT(message, HasSubstr("'depth'"));
  EXPECT_THAT(message, HasSubstr("image_size"));
  EXPECT_THAT(message, HasSubstr("classes"));
}

TEST(ZooErrorTest, ZeroBatch) { EXPECT_THAT(MustFail("mlp", 0), HasSubstr("batch")); }

TEST(ZooErrorTest, NonPositiveOptionsNamed) {
  EXPECT_THAT(MustFail("mlp", 1, {{"width", 0}}), HasSubstr("'width'"));
  EXPECT_THAT(MustFail("mlp", 1, {{"depth", -3}}), HasSubstr("'depth'"));
  EXPECT_THAT(MustFail("resnet18", 1, {{"classes", 0}}), HasSubstr("'classes'"));
  EXPECT_THAT(MustFail("transformer", 1, {{"heads", 0}}), HasSubstr("'heads'"));
  EXPECT_THAT(MustFail("transformer", 1, {{"d_ff", -1}}), HasSubstr("'d_ff'"));
}

TEST(ZooErrorTest, OptionsAndBatchAboveTheirMaximumNamedWithTheLimit) {
  // mlp depth 10^6 (or 2^40) drove headroomd past 13 GB before the limits.
  EXPECT_THAT(MustFail("mlp", 1, {{"depth", 1000000}}),
              HasSubstr("zoo model 'mlp': option 'depth' must be at most 1000, got 1000000"));
  EXPECT_THAT(MustFail("mlp", 1, {{"depth", int64_t{1} << 40}}), HasSubstr("at most 1000"));
  EXPECT_THAT(MustFail("transformer", 1, {{"layers", 1001}}), HasSubstr("'layers'"));
  EXPECT_THAT(MustFail("resnet50", 1, {{"image_size", 4097}}), HasSubstr("'image_size'"));
  EXPECT_THAT(MustFail("mlp", kMaxZooBatch + 1),
              HasSubstr("zoo model 'mlp': batch must be at most 65536, got 65537"));
  EXPECT_THAT(MustFail("mlp", uint64_t{1} << 63), HasSubstr("batch must be at most"));
  // Every option's range holds its default, and the limits are inclusive.
  for (const ZooModelInfo& info : ZooModels()) {
    for (const ZooOption& option : info.options) {
      EXPECT_LE(option.min_value, option.default_value) << info.name << "." << option.name;
      EXPECT_LE(option.default_value, option.max_value) << info.name << "." << option.name;
    }
  }
  MustBuild("mlp", 2, {{"depth", 1000}, {"width", 8}, {"input", 8}});
}

// RevNets: the parameter count beside the paper's (Table 1), within 5% (our downsampling
// units use 1x1 projections of the halves); the reversible blocks validate; option
// reversible 0 gives the same nodes and parameters without the declarations.
TEST(ZooRevNetTest, ParameterCountsBesideThePapers) {
  const std::map<std::string, std::pair<uint64_t, int>> paper = {
      {"revnet38", {460'000, 7}},      // Reversible blocks: 3 + 2 + 2.
      {"revnet110", {1'730'000, 25}},  // 9 + 8 + 8.
      {"revnet164", {1'750'000, 25}},
      {"revnet104", {12'400'000, 14}}};  // 2 + 1 + 10 + 1 (batch 1 at 224).
  for (const auto& [name, expected] : paper) {
    const proto::GraphDef def = MustBuild(name, 1);
    const uint64_t count = CountParameters(def);
    std::cout << name << ": " << count << " parameters, the paper " << expected.first << " ("
              << 100.0 * count / expected.first << "%)\n";
    EXPECT_NEAR(static_cast<double>(count), expected.first, 0.05 * expected.first) << name;
    absl::StatusOr<Graph> g = Graph::FromProto(def);
    ASSERT_TRUE(g.ok()) << name << ": " << g.status();
    EXPECT_EQ(g->reversible_blocks().size(), static_cast<size_t>(expected.second)) << name;
    const proto::GraphDef plain = MustBuild(name, 1, {{"reversible", 0}});
    EXPECT_EQ(plain.reversible_blocks_size(), 0) << name;
    EXPECT_EQ(plain.nodes_size(), def.nodes_size()) << name;
    EXPECT_EQ(CountParameters(plain), count) << name;
  }
  // The pre-activation ResNet-164 of He et al. 2016: 1.7M parameters.
  const uint64_t resnet164 = CountParameters(MustBuild("resnet164_cifar", 1));
  std::cout << "resnet164_cifar: " << resnet164 << " parameters, the paper 1700000\n";
  EXPECT_NEAR(static_cast<double>(resnet164), 1.7e6, 0.05 * 1.7e6);
  EXPECT_THAT(MustFail("revnet104", 1, {{"image_size", 48}}),
              HasSubstr("revnet104: image_size 48 is not a multiple of 32"));
}

TEST(ZooErrorTest, TransformerHeadsMustDivideDModel) {
  const std::string message = MustFail("transformer", 1, {{"d_model", 100}, {"heads", 12}});
  EXPECT_THAT(message, HasSubstr("d_model 100"));
  EXPECT_THAT(message, HasSubstr("heads 12"));
}

TEST(ZooErrorTest, TransformerSequenceAtMostPositions) {
  EXPECT_THAT(MustFail("transformer", 1, {{"sequence", 2048}}),
              HasSubstr("sequence 2048 exceeds positions 1024"));
  MustBuild("transformer", 1, {{"layers", 1}, {"sequence", 8}, {"positions", 8}});
}

TEST(ZooErrorTest, Vgg16ImageSize) {
  for (int64_t size : {32, 100, 256, 320}) {
    const std::string message = MustFail("vgg16", 1, {{"image_size", size}});
    EXPECT_THAT(message, HasSubstr("image_size " + std::to_string(size)));
    EXPECT_THAT(message, HasSubstr("multiple of 224"));
  }
}

TEST(ZooVggTest, LargerImagesPoolTo7x7) {
  const proto::GraphDef at224 = MustBuild("vgg16", 1);
  for (const proto::NodeDef& n : at224.nodes()) EXPECT_NE(n.name(), "avgpool");
  const proto::GraphDef at448 = MustBuild("vgg16", 1, {{"image_size", 448}});
  EXPECT_EQ(CountParameters(at448), CountParameters(at224));
  bool found = false;
  for (const proto::NodeDef& n : at448.nodes()) {
    if (n.name() != "avgpool") continue;
    found = true;
    EXPECT_EQ(n.op(), "AvgPool");
    EXPECT_THAT(n.attrs().at("kernel_size").ints().values(), ElementsAre(2, 2));
    EXPECT_THAT(n.attrs().at("stride").ints().values(), ElementsAre(2, 2));
  }
  EXPECT_TRUE(found);
}

// ---------------------------------------------------------------------------------------------
// Validation by Graph::FromProto, with shapes inferred.
// ---------------------------------------------------------------------------------------------

// Returns the inferred shape of the loss node's first input, the logits.
Shape LogitsShape(const proto::GraphDef& def, const Graph& graph) {
  for (const proto::NodeDef& n : def.nodes()) {
    if (n.outputs_size() == 1 && n.outputs(0) == def.loss()) {
      const TensorId logits = graph.FindTensor(n.inputs(0));
      if (logits >= 0) return graph.tensor(logits).shape;
    }
  }
  ADD_FAILURE() << def.name() << ": no node produces the loss";
  return {};
}

// Expects `def` to pass FromProto with a scalar float loss, logits `logits_shape` and a
// summary that agrees with the description.
void ExpectValid(const proto::GraphDef& def, const Shape& logits_shape) {
  absl::StatusOr<Graph> graph = Graph::FromProto(def);
  ASSERT_TRUE(graph.ok()) << def.name() << ": " << graph.status();
  const Tensor& loss = graph->tensor(graph->loss());
  EXPECT_TRUE(loss.shape.empty()) << ShapeString(loss.shape);
  EXPECT_EQ(loss.dtype, proto::DTYPE_FLOAT32);
  EXPECT_EQ(LogitsShape(def, *graph), logits_shape)
      << "expected " << ShapeString(logits_shape) << ", got "
      << ShapeString(LogitsShape(def, *graph));
  const GraphSummary summary = Summarize(*graph);
  EXPECT_EQ(summary.num_nodes, static_cast<uint64_t>(def.nodes_size()));
  EXPECT_EQ(summary.num_parameters, CountParameters(def));
  EXPECT_EQ(summary.parameter_bytes, 4 * CountParameters(def));
  EXPECT_EQ(summary.buffer_bytes, 4 * CountElements(def, proto::ROLE_BUFFER));
}

TEST(ZooFromProtoTest, EveryModelAtBatchTwo) {
  for (const auto& [name, options] : SmallModels()) {
    SCOPED_TRACE(name);
    const proto::GraphDef def = MustBuild(name, 2, options);
    if (name == "mlp" || name == "small_cnn" || name == "revnet38" || name == "revnet110" ||
        name == "revnet164" || name == "resnet164_cifar") {
      ExpectValid(def, {2, 10});
    } else if (name == "transformer") {
      ExpectValid(def, {2, 16, 100});
    } else {
      ExpectValid(def, {2, 1000});
    }
  }
}

TEST(ZooFromProtoTest, DefaultTransformerAtBatchOne) {
  const proto::GraphDef def = MustBuild("transformer", 1);
  ExpectValid(def, {1, 1024, 50257});
  absl::StatusOr<Graph> graph = Graph::FromProto(def);
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_EQ(Summarize(*graph).num_parameters, 124'439'808u);
  // Causal attention scores [B,H,T,T].
  const TensorId scores = graph->FindTensor("h.0.attn.scores");
  ASSERT_GE(scores, 0);
  EXPECT_EQ(graph->tensor(scores).shape, (Shape{1, 12, 1024, 1024}));
}

TEST(ZooFromProtoTest, NonDefaultImageSizesAndClasses) {
  ExpectValid(MustBuild("resnet50", 2, {{"image_size", 64}, {"classes", 7}}), {2, 7});
  ExpectValid(MustBuild("resnet18", 2, {{"image_size", 33}}), {2, 1000});
  ExpectValid(MustBuild("mobilenet_v2", 2, {{"image_size", 96}, {"classes", 3}}), {2, 3});
  ExpectValid(MustBuild("vgg16", 2, {{"image_size", 448}, {"classes", 5}}), {2, 5});
  ExpectValid(MustBuild("mlp", 2, {{"depth", 1}, {"classes", 4}}), {2, 4});
}

TEST(ZooFromProtoTest, ResNetStageShapes) {
  const proto::GraphDef def = MustBuild("resnet50", 2);
  absl::StatusOr<Graph> graph = Graph::FromProto(def);
  ASSERT_TRUE(graph.ok()) << graph.status();
  const std::map<std::string, Shape> expected = {{"maxpool", {2, 64, 56, 56}},
                                                 {"layer1.2.relu", {2, 256, 56, 56}},
                                                 {"layer2.3.relu", {2, 512, 28, 28}},
                                                 {"layer3.5.relu", {2, 1024, 14, 14}},
                                                 {"layer4.2.relu", {2, 2048, 7, 7}}};
  for (const auto& [name, shape] : expected) {
    const TensorId id = graph->FindTensor(name);
    ASSERT_GE(id, 0) << name;
    EXPECT_EQ(graph->tensor(id).shape, shape)
        << name << ": expected " << ShapeString(shape) << ", got "
        << ShapeString(graph->tensor(id).shape);
  }
}

}  // namespace
}  // namespace headroom::graph
