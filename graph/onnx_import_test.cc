// The importer on small ONNX models built here, one idea each. Real exports of torchvision's
// models are checked end to end in tests/onnx_import_test.
#include "graph/onnx_import.h"

#include <limits>
#include <map>
#include <numeric>
#include <tuple>

#include "gmock/gmock.h"
#include "graph/graph.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"

namespace headroom::graph {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using TP = onnx::TensorProto;

// Builds an onnx.ModelProto: inputs with a symbolic batch, initializers, Constant nodes and
// nodes with attributes; the first output added is the logits.
class OnnxModelBuilder {
 public:
  explicit OnnxModelBuilder(int64_t opset = 17) {
    model_.set_ir_version(8);
    model_.add_opset_import()->set_version(opset);
    model_.mutable_graph()->set_name("test");
  }

  // An input [batch, dims...] (float unless `type` says otherwise).
  OnnxModelBuilder& Input(const std::string& name, std::vector<int64_t> dims,
                          int type = TP::FLOAT) {
    onnx::ValueInfoProto* v = model_.mutable_graph()->add_input();
    v->set_name(name);
    onnx::TypeProto::Tensor* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(type);
    t->mutable_shape()->add_dim()->set_dim_param("batch");
    for (int64_t d : dims) t->mutable_shape()->add_dim()->set_dim_value(d);
    return *this;
  }

  // An input of fixed `dims`, batch included: what torch.onnx.export writes without
  // dynamic_axes.
  OnnxModelBuilder& FixedInput(const std::string& name, std::vector<int64_t> dims) {
    onnx::ValueInfoProto* v = model_.mutable_graph()->add_input();
    v->set_name(name);
    onnx::TypeProto::Tensor* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(TP::FLOAT);
    for (int64_t d : dims) t->mutable_shape()->add_dim()->set_dim_value(d);
    return *this;
  }

  // A float initializer filled with 0.01 * i (or `value` for all).
  OnnxModelBuilder& Weight(const std::string& name, std::vector<int64_t> dims,
                           std::optional<float> value = std::nullopt) {
    TP* t = model_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(TP::FLOAT);
    int64_t n = 1;
    for (int64_t d : dims) {
      t->add_dims(d);
      n *= d;
    }
    for (int64_t i = 0; i < n; ++i) t->add_float_data(value ? *value : 0.01f * i);
    return *this;
  }

  // A Constant node writing `name`.
  OnnxModelBuilder& Ints(const std::string& name, std::vector<int64_t> values, bool scalar = false) {
    onnx::NodeProto* n = AddNode("Constant", {}, {name});
    TP* t = Attr(*n, "value", onnx::AttributeProto::TENSOR)->mutable_t();
    t->set_data_type(TP::INT64);
    if (!scalar) t->add_dims(values.size());
    for (int64_t v : values) t->add_int64_data(v);
    return *this;
  }
  OnnxModelBuilder& Floats(const std::string& name, std::vector<float> values) {
    onnx::NodeProto* n = AddNode("Constant", {}, {name});
    TP* t = Attr(*n, "value", onnx::AttributeProto::TENSOR)->mutable_t();
    t->set_data_type(TP::FLOAT);
    t->add_dims(values.size());
    for (float v : values) t->add_float_data(v);
    return *this;
  }
  OnnxModelBuilder& Float(const std::string& name, float value) {
    onnx::NodeProto* n = AddNode("Constant", {}, {name});
    TP* t = Attr(*n, "value", onnx::AttributeProto::TENSOR)->mutable_t();
    t->set_data_type(TP::FLOAT);
    t->add_float_data(value);
    return *this;
  }

  onnx::NodeProto* AddNode(const std::string& op, std::vector<std::string> inputs,
                           std::vector<std::string> outputs) {
    onnx::NodeProto* n = model_.mutable_graph()->add_node();
    n->set_op_type(op);
    n->set_name("/" + outputs[0]);
    for (const std::string& in : inputs) n->add_input(in);
    for (const std::string& out : outputs) n->add_output(out);
    return n;
  }

  static onnx::AttributeProto* Attr(onnx::NodeProto& n, const std::string& name, int type) {
    onnx::AttributeProto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(static_cast<onnx::AttributeProto::AttributeType>(type));
    return a;
  }
  static void SetInts(onnx::NodeProto& n, const std::string& name, std::vector<int64_t> v) {
    onnx::AttributeProto* a = Attr(n, name, onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }
  static void SetInt(onnx::NodeProto& n, const std::string& name, int64_t v) {
    Attr(n, name, onnx::AttributeProto::INT)->set_i(v);
  }
  static void SetString(onnx::NodeProto& n, const std::string& name, const std::string& v) {
    Attr(n, name, onnx::AttributeProto::STRING)->set_s(v);
  }
  static void SetFloat(onnx::NodeProto& n, const std::string& name, float v) {
    Attr(n, name, onnx::AttributeProto::FLOAT)->set_f(v);
  }

  OnnxModelBuilder& Output(const std::string& name) {
    model_.mutable_graph()->add_output()->set_name(name);
    return *this;
  }

  std::string Bytes() const { return model_.SerializeAsString(); }

 private:
  onnx::ModelProto model_;
};

// Imports `b` with batch 4; fails the test on an error.
ImportedModel Import(const OnnxModelBuilder& b, uint64_t batch = 4) {
  OnnxImportOptions options;
  options.batch = batch;
  absl::StatusOr<ImportedModel> m = ImportOnnx(b.Bytes(), options);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *std::move(m) : ImportedModel();
}

std::map<std::string, int> OpCounts(const proto::GraphDef& g) {
  std::map<std::string, int> counts;
  for (const proto::NodeDef& n : g.nodes()) ++counts[n.op()];
  return counts;
}

const proto::TensorDef* FindTensor(const proto::GraphDef& g, const std::string& name) {
  for (const proto::TensorDef& t : g.tensors()) {
    if (t.name() == name) return &t;
  }
  return nullptr;
}

std::vector<int64_t> IntsOf(const proto::NodeDef& n, const std::string& attr) {
  const auto& ints = n.attrs().at(attr).ints().values();
  return std::vector<int64_t>(ints.begin(), ints.end());
}

// images[4,3,8,8] -> Conv(8, 3x3, pad 1) -> BatchNormalization -> Relu -> GlobalAveragePool
// -> Flatten -> Gemm(10): a small classification network as torch exports it.
OnnxModelBuilder SmallCnn() {
  OnnxModelBuilder b;
  b.Input("images", {3, 8, 8})
      .Weight("conv.weight", {8, 3, 3, 3})
      .Weight("bn.weight", {8}, 1.0f)
      .Weight("bn.bias", {8}, 0.0f)
      .Weight("bn.running_mean", {8}, 0.0f)
      .Weight("bn.running_var", {8}, 1.0f)
      .Weight("fc.weight", {10, 8})
      .Weight("fc.bias", {10});
  onnx::NodeProto* conv = b.AddNode("Conv", {"images", "conv.weight"}, {"c"});
  OnnxModelBuilder::SetInts(*conv, "kernel_shape", {3, 3});
  OnnxModelBuilder::SetInts(*conv, "pads", {1, 1, 1, 1});
  onnx::NodeProto* bn = b.AddNode("BatchNormalization",
                                  {"c", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"},
                                  {"n", "n.mean", "n.var"});
  OnnxModelBuilder::SetFloat(*bn, "momentum", 0.9f);
  OnnxModelBuilder::SetInt(*bn, "training_mode", 1);
  b.AddNode("Relu", {"n"}, {"r"});
  b.AddNode("GlobalAveragePool", {"r"}, {"p"});
  b.AddNode("Flatten", {"p"}, {"f"});
  onnx::NodeProto* gemm = b.AddNode("Gemm", {"f", "fc.weight", "fc.bias"}, {"logits"});
  OnnxModelBuilder::SetInt(*gemm, "transB", 1);
  b.Output("logits");
  return b;
}

TEST(OnnxImportTest, SmallCnnBecomesAValidTrainingGraph) {
  const ImportedModel m = Import(SmallCnn(), 4);
  EXPECT_THAT(OpCounts(m.graph),
              (std::map<std::string, int>{{"BatchNorm", 1}, {"Conv2D", 1}, {"Flatten", 1},
                                          {"GlobalAvgPool", 1}, {"MatMul", 1}, {"ReLU", 1},
                                          {"SoftmaxCrossEntropy", 1}}));
  absl::StatusOr<Graph> g = Graph::FromProto(m.graph);
  ASSERT_TRUE(g.ok()) << g.status();
  // The batch replaces the symbolic dim; labels and the loss are attached.
  EXPECT_THAT(FindTensor(m.graph, "images")->shape(), ElementsAre(4, 3, 8, 8));
  EXPECT_EQ(FindTensor(m.graph, "labels")->role(), proto::ROLE_LABEL);
  EXPECT_THAT(FindTensor(m.graph, "labels")->shape(), ElementsAre(4));
  EXPECT_EQ(m.graph.loss(), "loss");
  // Weights are parameters, running statistics buffers; all keep their values.
  EXPECT_EQ(FindTensor(m.graph, "conv.weight")->role(), proto::ROLE_PARAMETER);
  EXPECT_EQ(FindTensor(m.graph, "bn.running_var")->role(), proto::ROLE_BUFFER);
  EXPECT_EQ(m.stats.parameters, 5);
  EXPECT_EQ(m.stats.parameter_elements, 8u * 27 + 8 + 8 + 80 + 10);
  EXPECT_EQ(m.stats.buffers, 2);
  ASSERT_EQ(m.values.size(), 7u);
  for (const proto::TensorValue& v : m.values) {
    if (v.name() != "conv.weight") continue;
    ASSERT_EQ(v.data().size(), 8u * 27 * 4);
    float third;
    std::memcpy(&third, v.data().data() + 8, 4);
    EXPECT_FLOAT_EQ(third, 0.02f);
  }
  // ONNX's momentum weighs the running value; Headroom's the batch's.
  for (const proto::NodeDef& n : m.graph.nodes()) {
    if (n.op() == "BatchNorm") {
      EXPECT_NEAR(n.attrs().at("momentum").f(), 0.1, 1e-7);
    }
    if (n.op() == "MatMul") {
      EXPECT_TRUE(n.attrs().at("transpose_b").b());
    }
  }
}

TEST(OnnxImportTest, ValuesAreLeftOutWhenNotAsked) {
  OnnxImportOptions options;
  options.batch = 2;
  options.keep_values = false;
  absl::StatusOr<ImportedModel> m = ImportOnnx(SmallCnn().Bytes(), options);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(m->values.empty());
  EXPECT_EQ(m->stats.parameter_elements, 8u * 27 + 8 + 8 + 80 + 10);
}

TEST(OnnxImportTest, EveryUnknownOpIsListedWithItsCountInOneError) {
  OnnxModelBuilder b = SmallCnn();
  b.AddNode("Celu", {"r"}, {"q1"});
  b.AddNode("Celu", {"q1"}, {"q2"});
  b.AddNode("GridSample", {"q2", "q2"}, {"q3"});
  absl::StatusOr<ImportedModel> m = ImportOnnx(b.Bytes(), OnnxImportOptions{4});
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(m.status().message(), HasSubstr("2 op type(s)"));
  EXPECT_THAT(m.status().message(), HasSubstr("Celu x2, GridSample x1"));
}

TEST(OnnxImportTest, ActivationsConvertWithOnnxDefaults) {
  OnnxModelBuilder b;
  b.Input("x", {6});
  b.AddNode("LeakyRelu", {"x"}, {"leaky"});
  OnnxModelBuilder::SetFloat(*b.AddNode("LeakyRelu", {"leaky"}, {"leaky2"}), "alpha", 0.2f);
  b.AddNode("Elu", {"leaky2"}, {"elu"});
  b.AddNode("Selu", {"elu"}, {"selu"});
  b.AddNode("Softplus", {"selu"}, {"softplus"});
  b.AddNode("Sqrt", {"softplus"}, {"sqrt"});
  b.AddNode("Erf", {"sqrt"}, {"erf"});
  b.AddNode("Mish", {"erf"}, {"logits"});
  b.Output("logits");
  const ImportedModel m = Import(b);
  EXPECT_THAT(OpCounts(m.graph), (std::map<std::string, int>{{"LeakyReLU", 2},
                                                             {"ELU", 1},
                                                             {"SELU", 1},
                                                             {"Softplus", 1},
                                                             {"Sqrt", 1},
                                                             {"Erf", 1},
                                                             {"Mish", 1},
                                                             {"SoftmaxCrossEntropy", 1}}));
  EXPECT_NEAR(m.graph.nodes(0).attrs().at("alpha").f(), 0.01, 1e-9);  // ONNX's default.
  EXPECT_NEAR(m.graph.nodes(1).attrs().at("alpha").f(), 0.2, 1e-7);
  EXPECT_EQ(m.graph.nodes(2).attrs().at("alpha").f(), 1.0);
  EXPECT_NEAR(m.graph.nodes(3).attrs().at("alpha").f(), 1.6732632, 1e-7);
  EXPECT_NEAR(m.graph.nodes(3).attrs().at("gamma").f(), 1.0507010, 1e-7);
  EXPECT_TRUE(Graph::FromProto(m.graph).ok());
}

TEST(OnnxImportTest, BadModelsAndOptionsAreNamed) {
  EXPECT_THAT(ImportOnnx("not a model", {}).status().message(), HasSubstr("not an ONNX model"));
  // A symbolic batch without --batch.
  absl::Status s = ImportOnnx(SmallCnn().Bytes(), OnnxImportOptions{}).status();
  EXPECT_THAT(s.message(), HasSubstr("input 'images' dim 0 is 'batch'"));
  EXPECT_THAT(s.message(), HasSubstr("--batch"));
  // An opset outside the range.
  OnnxModelBuilder old(5);
  old.Input("x", {4}).Output("x");
  EXPECT_THAT(ImportOnnx(old.Bytes(), OnnxImportOptions{2}).status().message(),
              HasSubstr("opset 5"));
  // --classes that disagree with the output.
  OnnxImportOptions classes;
  classes.batch = 2;
  classes.classes = 1000;
  EXPECT_THAT(ImportOnnx(SmallCnn().Bytes(), classes).status().message(),
              HasSubstr("--classes 1000, but ONNX output 'logits' [2,10] has 10"));
  // Reading an output Headroom does not make: batch norm's running mean.
  OnnxModelBuilder b = SmallCnn();
  b.AddNode("Relu", {"n.mean"}, {"bad"});
  s = ImportOnnx(b.Bytes(), OnnxImportOptions{2}).status();
  EXPECT_THAT(s.message(), HasSubstr("value 'n.mean' is read, but it is a batch norm's"));
}

TEST(OnnxImportTest, SubAndDivOfTwoComputedTensorsAreHeadroomOps) {
  // (relu(x[N,2,6]) - w[6]) / sigmoid(w): the weight's side broadcasts, as numpy's rules
  // (Add's and Mul's), and a weight is no known value: it trains.
  OnnxModelBuilder b;
  b.Input("x", {2, 6}).Weight("w", {6});
  b.AddNode("Relu", {"x"}, {"a"});
  b.AddNode("Sub", {"a", "w"}, {"d"});
  b.AddNode("Sigmoid", {"w"}, {"s"});
  b.AddNode("Div", {"d", "s"}, {"logits"});
  b.Output("logits");
  const ImportedModel m = Import(b);
  EXPECT_EQ(OpCounts(m.graph),
            (std::map<std::string, int>{
                {"ReLU", 1}, {"Sub", 1}, {"Sigmoid", 1}, {"Div", 1}, {"SoftmaxCrossEntropy", 1}}));
  for (const auto& node : m.graph.nodes()) {
    if (node.op() == "Sub") {
      EXPECT_THAT(node.inputs(), ElementsAre("a", "w"));
    } else if (node.op() == "Div") {
      EXPECT_THAT(node.inputs(), ElementsAre("d", "s"));
    }
  }
  ASSERT_TRUE(Graph::FromProto(m.graph).ok());
}

TEST(OnnxImportTest, AKnownValueMinusOrOverAComputedTensorIsSubOrDiv) {
  // 1 - sigmoid(x), then 2 / that: the known value is the first operand, a buffer.
  OnnxModelBuilder b;
  b.Input("x", {6}).Float("one", 1.0f).Float("two", 2.0f);
  b.AddNode("Sigmoid", {"x"}, {"s"});
  b.AddNode("Sub", {"one", "s"}, {"d"});
  b.AddNode("Div", {"two", "d"}, {"logits"});
  b.Output("logits");
  const ImportedModel m = Import(b);
  const std::map<std::string, int> counts = OpCounts(m.graph);
  EXPECT_EQ(counts.at("Sub"), 1);
  EXPECT_EQ(counts.at("Div"), 1);
  EXPECT_EQ(counts.count("Add") + counts.count("Mul"), 0u);
  for (const auto& node : m.graph.nodes()) {
    if (node.op() == "Sub" || node.op() == "Div") {
      EXPECT_EQ(node.inputs(1), node.op() == "Sub" ? "s" : "d") << node.op();
    }
  }
  ASSERT_TRUE(Graph::FromProto(m.graph).ok());
}

TEST(OnnxImportTest, PReluTakesTorchsUnsqueezedSlope) {
  // torch 1.13's nn.PReLU(4): PRelu(x, Unsqueeze(weight[4], [1, 2])).
  OnnxModelBuilder b;
  b.Input("x", {4, 5, 5}).Weight("act.weight", {4}, 0.25f).Ints("axes", {1, 2});
  b.AddNode("Unsqueeze", {"act.weight", "axes"}, {"slope"});
  b.AddNode("PRelu", {"x", "slope"}, {"logits"});
  b.Output("logits");
  const ImportedModel m = Import(b);
  EXPECT_EQ(OpCounts(m.graph)["PReLU"], 1);
  absl::StatusOr<Graph> g = Graph::FromProto(m.graph);
  ASSERT_TRUE(g.ok()) << g.status();
  // The slope is a trained parameter of 4 values, broadcast per channel.
  int64_t slope_values = 0;
  for (const auto& t : m.graph.tensors()) {
    if (t.role() == proto::ROLE_PARAMETER) {
      int64_t n = 1;
      for (int64_t d : t.shape()) n *= d;
      slope_values += n;
    }
  }
  EXPECT_EQ(slope_values, 4);

  // nn.PReLU()'s one shared slope: a one-value initializer, folded through the Unsqueeze,
  // still a parameter.
  OnnxModelBuilder one;
  one.Input("x", {4, 5, 5}).Weight("act.weight", {1}, 0.25f).Ints("axes", {1, 2});
  one.AddNode("Unsqueeze", {"act.weight", "axes"}, {"slope"});
  one.AddNode("PRelu", {"x", "slope"}, {"logits"});
  one.Output("logits");
  const ImportedModel shared = Import(one);
  int parameters = 0, buffers = 0;
  for (const auto& t : shared.graph.tensors()) {
    parameters += t.role() == proto::ROLE_PARAMETER;
    buffers += t.role() == proto::ROLE_BUFFER;
  }
  EXPECT_EQ(parameters, 1);
  EXPECT_EQ(buffers, 0);
}

TEST(OnnxImportTest, InstanceNormalizationIsAGroupNormWithAGroupPerChannel) {
  // torch 1.13's nn.InstanceNorm2d(4, affine=True): its weight and bias are scale and B.
  OnnxModelBuilder b;
  b.Input("x", {4, 5, 5}).Weight("norm.weight", {4}, 1.5f).Weight("norm.bias", {4}, 0.5f);
  onnx::NodeProto* in =
      b.AddNode("InstanceNormalization", {"x", "norm.weight", "norm.bias"}, {"logits_nchw"});
  OnnxModelBuilder::SetFloat(*in, "epsilon", 1e-3f);
  b.AddNode("Flatten", {"logits_nchw"}, {"logits"});
  b.Output("logits");
  const ImportedModel m = Import(b);
  ASSERT_EQ(OpCounts(m.graph)["GroupNorm"], 1);
  for (const proto::NodeDef& node : m.graph.nodes()) {
    if (node.op() != "GroupNorm") continue;
    EXPECT_EQ(node.attrs().at("num_groups").i(), 4);
    EXPECT_FLOAT_EQ(node.attrs().at("epsilon").f(), 1e-3f);
  }
  EXPECT_EQ(FindTensor(m.graph, "norm.weight")->role(), proto::ROLE_PARAMETER);
  EXPECT_EQ(FindTensor(m.graph, "norm.bias")->role(), proto::ROLE_PARAMETER);
  ASSERT_TRUE(Graph::FromProto(m.graph).ok());
}

TEST(OnnxImportTest, TorchsGroupNormExportImportsAsAGroupNormOfItsGroups) {
  // torch 1.13's nn.GroupNorm(2, 4) at opset 17: Reshape to [N, 2, -1], InstanceNormalization
  // with constant ones and zeros, Reshape back to x's shape, Mul by the weight and Add the
  // bias, both Unsqueeze'd to [4, 1, 1].
  OnnxModelBuilder b;
  b.Input("x", {4, 3, 3}).Weight("gn.weight", {4}, 1.5f).Weight("gn.bias", {4}, 0.5f);
  b.Ints("groups_shape", {0, 2, -1}).Ints("x_shape", {4, 4, 3, 3}).Ints("axes", {1, 2});
  for (const auto& [name, value] : {std::pair<std::string, float>{"ones", 1.f}, {"zeros", 0.f}}) {
    onnx::NodeProto* c = b.AddNode("Constant", {}, {name});
    onnx::TensorProto* t =
        OnnxModelBuilder::Attr(*c, "value", onnx::AttributeProto::TENSOR)->mutable_t();
    t->set_data_type(onnx::TensorProto::FLOAT);
    t->add_dims(2);
    t->add_float_data(value);
    t->add_float_data(value);
  }
  b.AddNode("Reshape", {"x", "groups_shape"}, {"grouped"});
  b.AddNode("InstanceNormalization", {"grouped", "ones", "zeros"}, {"normed"});
  b.AddNode("Shape", {"x"}, {"shape_of_x"});
  b.AddNode("Reshape", {"normed", "shape_of_x"}, {"back"});
  b.AddNode("Unsqueeze", {"gn.weight", "axes"}, {"w"});
  b.AddNode("Unsqueeze", {"gn.bias", "axes"}, {"bias"});
  b.AddNode("Mul", {"back", "w"}, {"scaled"});
  b.AddNode("Add", {"scaled", "bias"}, {"y"});
  b.AddNode("Flatten", {"y"}, {"logits"});
  b.Output("logits");
  const ImportedModel m = Import(b);
  std::map<std::string, int> ops = OpCounts(m.graph);
  EXPECT_EQ(ops["GroupNorm"], 1);
  EXPECT_EQ(ops["Mul"], 1);
  EXPECT_EQ(ops["Add"], 1);
  for (const proto::NodeDef& node : m.graph.nodes()) {
    if (node.op() == "GroupNorm") {
      EXPECT_EQ(node.attrs().at("num_groups").i(), 2);
    }
  }
  // The affine weight and bias are the only parameters; the constant ones and zeros are not.
  int64_t parameter_values = 0;
  for (const auto& t : m.graph.tensors()) {
    if (t.role() != proto::ROLE_PARAMETER) continue;
    int64_t n = 1;
    for (int64_t d : t.shape()) n *= d;
    parameter_values += n;
  }
  EXPECT_EQ(parameter_values, 8);
  ASSERT_TRUE(Graph::FromProto(m.graph).ok());
}

TEST(OnnxImportTest, ASegmentationOutputTakesThePixelLoss) {
  // logits [N, 3, 4, 4]: the loss reads the classes on axis 1 against labels [N, 4, 4],
  // ignoring 255.
  OnnxModelBuilder b;
  b.Input("x", {3, 4, 4});
  b.AddNode("Relu", {"x"}, {"out"});
  b.Output("out");
  const ImportedModel m = Import(b);
  ASSERT_EQ(OpCounts(m.graph)["PixelSoftmaxCrossEntropy"], 1);
  for (const proto::NodeDef& node : m.graph.nodes()) {
    if (node.op() == "PixelSoftmaxCrossEntropy") {
      EXPECT_EQ(node.attrs().at("ignore_index").i(), kIgnoredPixelLabel);
    }
  }
  const proto::TensorDef* labels = FindTensor(m.graph, "labels");
  ASSERT_NE(labels, nullptr);
  EXPECT_EQ(std::vector<int64_t>(labels->shape().begin(), labels->shape().end()),
            std::vector<int64_t>({4, 4, 4}));
  ASSERT_TRUE(Graph::FromProto(m.graph).ok());

  // --classes checks axis 1; pixel_cross_entropy takes a rank-3 output per position too.
  OnnxImportOptions options;
  options.batch = 4;
  options.classes = 4;
  absl::StatusOr<ImportedModel> wrong = ImportOnnx(b.Bytes(), options);
  ASSERT_FALSE(wrong.ok());
  EXPECT_THAT(wrong.status().message(), HasSubstr("--classes 4, but ONNX output 'out'"));
  OnnxModelBuilder seq;
  seq.Input("x", {3, 7});
  seq.AddNode("Relu", {"x"}, {"out"});
  seq.Output("out");
  options.classes = 0;
  options.loss = "pixel_cross_entropy";
  absl::StatusOr<ImportedModel> per_position = ImportOnnx(seq.Bytes(), options);
  ASSERT_TRUE(per_position.ok()) << per_position.status();
  EXPECT_EQ(OpCounts(per_position->graph)["PixelSoftmaxCrossEntropy"], 1);
  options.loss = "mse";
  absl::StatusOr<ImportedModel> mse = ImportOnnx(seq.Bytes(), options);
  ASSERT_FALSE(mse.ok());
  EXPECT_THAT(mse.status().message(), HasSubstr("softmax_cross_entropy or pixel_cross_entropy"));
}

TEST(OnnxImportTest, PowOfAComputedTensorTakesAConstantExponent) {
  OnnxModelBuilder b;
  b.Input("x", {6}).Float("two", 2.0f);
  b.AddNode("Relu", {"x"}, {"a"});
  b.AddNode("Pow", {"a", "two"}, {"logits"});
  b.Output("logits");
  const ImportedModel m = Import(b);
  EXPECT_EQ(OpCounts(m.graph)["Pow"], 1);
  for (const auto& node : m.graph.nodes()) {
    if (node.op() == "Pow") EXPECT_EQ(node.attrs().at("exponent").f(), 2.0);
  }
  ASSERT_TRUE(Graph::FromProto(m.graph).ok());

  // A computed exponent names the node.
  OnnxModelBuilder c;
  c.Input("x", {6});
  c.AddNode("Relu", {"x"}, {"a"});
  c.AddNode("Pow", {"x", "a"}, {"logits"});
  c.Output("logits");
  absl::Status s = ImportOnnx(c.Bytes(), OnnxImportOptions{2}).status();
  EXPECT_THAT(s.message(), HasSubstr("ONNX node '/logits' (Pow): its exponent (input 1) must "
                                     "be known at import"));
}

TEST(OnnxImportTest, ANegativeStepSliceOfAComputedTensorReverses) {
  // torch.flip(x, [1]) and x[:, :, ::-2] at opset 17: Slice(x, [-1], [INT64_MIN], [1], [-1]).
  OnnxModelBuilder b;
  b.Input("x", {5, 6})
      .Ints("starts", {-1})
      .Ints("ends", {std::numeric_limits<int64_t>::min()})
      .Ints("axes", {1})
      .Ints("steps", {-1})
      .Ints("axes2", {2})
      .Ints("steps2", {-2});
  b.AddNode("Relu", {"x"}, {"r"});
  b.AddNode("Slice", {"r", "starts", "ends", "axes", "steps"}, {"flipped"});
  b.AddNode("Slice", {"flipped", "starts", "ends", "axes2", "steps2"}, {"logits"});
  b.Output("logits");
  const ImportedModel m = Import(b);
  EXPECT_EQ(OpCounts(m.graph)["Slice"], 2);
  absl::StatusOr<Graph> g = Graph::FromProto(m.graph);
  ASSERT_TRUE(g.ok()) << g.status();
  std::vector<std::vector<int64_t>> ends, steps;
  std::string out_name;
  for (const proto::NodeDef& n : m.graph.nodes()) {
    if (n.op() != "Slice") continue;
    out_name = n.outputs(0);
    const auto& a = n.attrs();
    ends.emplace_back(a.at("ends").ints().values().begin(), a.at("ends").ints().values().end());
    steps.emplace_back(a.at("steps").ints().values().begin(), a.at("steps").ints().values().end());
  }
  // The flip runs through element 0 (end -1); ::-2 of 6 columns takes 5, 3, 1 (end 0).
  EXPECT_THAT(ends, ElementsAre(ElementsAre(-1), ElementsAre(0)));
  EXPECT_THAT(steps, ElementsAre(ElementsAre(-1), ElementsAre(-2)));
  const Tensor& out = g->tensor(g->FindTensor(out_name));
  EXPECT_EQ(out.shape, Shape({4, 5, 3}));
}

TEST(OnnxImportTest, ReduceSumMaxAndMinOfComputedTensorsAreHeadroomReductions) {
  // Opset 17: ReduceSum takes its axes as an input, ReduceMax and ReduceMin as an attribute.
  OnnxModelBuilder b;
  b.Input("x", {3, 4, 5}).Ints("axes", {-1});
  b.AddNode("Relu", {"x"}, {"r"});
  OnnxModelBuilder::SetInt(*b.AddNode("ReduceSum", {"r", "axes"}, {"s"}), "keepdims", 0);
  onnx::NodeProto* max = b.AddNode("ReduceMax", {"s"}, {"m"});
  OnnxModelBuilder::SetInts(*max, "axes", {1});
  onnx::NodeProto* min = b.AddNode("ReduceMin", {"r"}, {"all"});  // No axes: all of them.
  OnnxModelBuilder::SetInt(*min, "keepdims", 0);
  // noop_with_empty_axes and no axes: an identity.
  OnnxModelBuilder::SetInt(*b.AddNode("ReduceSum", {"m"}, {"same"}), "noop_with_empty_axes", 1);
  b.AddNode("Add", {"same", "all"}, {"logits"});
  b.Output("logits");
  const ImportedModel m = Import(b);
  EXPECT_EQ(OpCounts(m.graph), (std::map<std::string, int>{{"ReLU", 1},
                                                           {"ReduceSum", 1},
                                                           {"ReduceMax", 1},
                                                           {"ReduceMin", 1},
                                                           {"Add", 1},
                                                           {"SoftmaxCrossEntropy", 1}}));
  absl::StatusOr<Graph> g = Graph::FromProto(m.graph);
  ASSERT_TRUE(g.ok()) << g.status();
  for (const proto::NodeDef& n : m.graph.nodes()) {
    if (n.op() == "ReduceSum") {
      EXPECT_THAT(IntsOf(n, "axes"), ElementsAre(3));  // -1 of [4,3,4,5].
      EXPECT_FALSE(n.attrs().at("keepdims").b());
      EXPECT_EQ(g->tensor(g->FindTensor(n.outputs(0))).shape, Shape({4, 3, 4}));
    } else if (n.op() == "ReduceMax") {
      EXPECT_THAT(IntsOf(n, "axes"), ElementsAre(1));
      EXPECT_EQ(g->tensor(g->FindTensor(n.outputs(0))).shape, Shape({4, 1, 4}));
    } else if (n.op() == "ReduceMin") {
      EXPECT_EQ(n.attrs().count("axes"), 0u);  // The default: every axis.
      EXPECT_EQ(g->tensor(g->FindTensor(n.outputs(0))).shape, Shape({}));
    }
  }
}

TEST(OnnxImportTest, MatMulOfVectorsAndBroadcastBatchesFollowsNumpy) {
  // x[4,2,1,3,5] x w[2,5,6] broadcasts batch dims to [4,2,2,3,6]; times v[6] (a column) drops
  // the last dim: [4,2,2,3]; u[2] (a row) times that ([4,2] matrices [2,3]) drops the row:
  // [4,2,3].
  OnnxModelBuilder b;
  b.Input("x", {2, 1, 3, 5}).Weight("w", {2, 5, 6}).Weight("v", {6}).Weight("u", {2});
  b.AddNode("Relu", {"x"}, {"r"});
  b.AddNode("MatMul", {"r", "w"}, {"h"});
  b.AddNode("MatMul", {"h", "v"}, {"hv"});
  b.AddNode("MatMul", {"u", "hv"}, {"logits"});
  b.Output("logits");
  const ImportedModel m = Import(b);
  EXPECT_EQ(OpCounts(m.graph)["MatMul"], 3);
  EXPECT_EQ(OpCounts(m.graph)["Reshape"], 4);  // v to a column, u to a row, two results back.
  absl::StatusOr<Graph> g = Graph::FromProto(m.graph);
  ASSERT_TRUE(g.ok()) << g.status();
  std::vector<Shape> products;
  for (const proto::NodeDef& n : m.graph.nodes()) {
    if (n.op() == "MatMul") products.push_back(g->tensor(g->FindTensor(n.outputs(0))).shape);
  }
  EXPECT_THAT(products,
              ElementsAre(Shape({4, 2, 2, 3, 6}), Shape({4, 2, 2, 3, 1}), Shape({4, 2, 1, 3})));
  // Two vectors would make a scalar, which Headroom's logits cannot be.
  OnnxModelBuilder dot;
  dot.Input("x", {3}).Weight("v", {3});
  dot.AddNode("Relu", {"x"}, {"r"});
  dot.AddNode("Flatten", {"r"}, {"f"});
  dot.AddNode("MatMul", {"v", "v"}, {"logits"});
  dot.Output("logits");
  absl::StatusOr<ImportedModel> bad = ImportOnnx(dot.Bytes(), OnnxImportOptions{4});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("a dot product of two vectors"));
}

// x[4,3,8,8] -> Resize(x, scales [1,1,0.5,0.5]) as F.interpolate(scale_factor=0.5) writes it
// ("small", [4,3,4,4]) -> Resize to x's own H and W (torchvision's segmentation heads:
// F.interpolate(size=input_shape[-2:], mode="bilinear")) through Shape, Gather, Slice,
// Unsqueeze, Concat and Cast -> Flatten. `big_mode` and `big_coords` set the second Resize.
OnnxModelBuilder SegmentationResize(const std::string& big_mode, const std::string& big_coords) {
  OnnxModelBuilder b;
  b.Input("x", {3, 8, 8}).Floats("scales", {1, 1, 0.5f, 0.5f});
  b.Ints("two", {2}, /*scalar=*/true).Ints("three", {3}, /*scalar=*/true).Ints("axes", {0});
  b.Ints("zero1", {0}).Ints("two1", {2});
  onnx::NodeProto* small = b.AddNode("Resize", {"x", "", "scales"}, {"small"});
  OnnxModelBuilder::SetString(*small, "mode", "nearest");
  OnnxModelBuilder::SetString(*small, "coordinate_transformation_mode", "asymmetric");
  OnnxModelBuilder::SetString(*small, "nearest_mode", "floor");
  b.AddNode("Shape", {"x"}, {"xs"});
  OnnxModelBuilder::SetInt(*b.AddNode("Gather", {"xs", "two"}, {"h"}), "axis", 0);
  OnnxModelBuilder::SetInt(*b.AddNode("Gather", {"xs", "three"}, {"w"}), "axis", 0);
  b.AddNode("Unsqueeze", {"h", "axes"}, {"h1"});
  b.AddNode("Unsqueeze", {"w", "axes"}, {"w1"});
  OnnxModelBuilder::SetInt(*b.AddNode("Concat", {"h1", "w1"}, {"hw"}), "axis", 0);
  OnnxModelBuilder::SetInt(*b.AddNode("Cast", {"hw"}, {"hw64"}), "to", TP::INT64);
  b.AddNode("Shape", {"small"}, {"ss"});
  b.AddNode("Slice", {"ss", "zero1", "two1", "zero1"}, {"nc"});
  OnnxModelBuilder::SetInt(*b.AddNode("Concat", {"nc", "hw64"}, {"sizes"}), "axis", 0);
  onnx::NodeProto* big = b.AddNode("Resize", {"small", "", "", "sizes"}, {"big"});
  OnnxModelBuilder::SetString(*big, "mode", big_mode);
  OnnxModelBuilder::SetString(*big, "coordinate_transformation_mode", big_coords);
  OnnxModelBuilder::SetString(*big, "nearest_mode", "floor");
  OnnxModelBuilder::SetInt(*b.AddNode("Flatten", {"big"}, {"logits"}), "axis", 1);
  b.Output("logits");
  return b;
}

TEST(OnnxImportTest, ResizeTakesScalesAndSizesFoldedFromShapes) {
  const ImportedModel m = Import(SegmentationResize("linear", "half_pixel"));
  EXPECT_EQ(OpCounts(m.graph)["Resize"], 2);
  absl::StatusOr<Graph> g = Graph::FromProto(m.graph);
  ASSERT_TRUE(g.ok()) << g.status();
  const proto::NodeDef& small = m.graph.nodes(0);
  EXPECT_EQ(small.op(), "Resize");
  EXPECT_THAT(small.attrs().at("size").ints().values(), ElementsAre(4, 4));
  EXPECT_EQ(small.attrs().at("mode").s(), "nearest");
  EXPECT_EQ(small.attrs().at("scale_h").f(), 0.5);
  const proto::NodeDef& big = m.graph.nodes(1);
  EXPECT_EQ(big.op(), "Resize");
  EXPECT_THAT(big.attrs().at("size").ints().values(), ElementsAre(8, 8));
  EXPECT_EQ(big.attrs().at("mode").s(), "bilinear");
  EXPECT_FALSE(big.attrs().at("align_corners").b());
  EXPECT_EQ(big.attrs().count("scale_h"), 0u);  // From sizes: in / out.
  EXPECT_EQ(g->tensor(g->FindTensor(big.outputs(0))).shape, Shape({4, 3, 8, 8}));
  // align_corners carries over.
  const ImportedModel corners = Import(SegmentationResize("linear", "align_corners"));
  EXPECT_TRUE(corners.graph.nodes(1).attrs().at("align_corners").b());
}

TEST(OnnxImportTest, ResizeModesPyTorchHasNotAreErrorsNamingTheNode) {
  for (const auto& [mode, coords, says] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"cubic", "half_pixel", "mode 'cubic': Headroom's Resize is 'nearest' or 'linear'"},
           {"nearest", "half_pixel", "with coordinate_transformation_mode 'half_pixel'"},
           {"linear", "asymmetric", "mode 'linear' with coordinate_transformation_mode "
                                    "'asymmetric'"}}) {
    absl::StatusOr<ImportedModel> m =
        ImportOnnx(SegmentationResize(mode, coords).Bytes(), OnnxImportOptions{4});
    ASSERT_FALSE(m.ok()) << mode << " " << coords;
    EXPECT_THAT(m.status().message(), HasSubstr("'/big'")) << m.status();
    EXPECT_THAT(m.status().message(), HasSubstr(says)) << m.status();
  }
}

TEST(OnnxImportTest, ConvTransposeKeepsTorchsWeightLayoutAndOutputPadding) {
  // nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2) on
  // x[4, 4, 5, 5]: weight [4, 3, 3, 3], y [4, 6, 10, 10].
  OnnxModelBuilder b;
  b.Input("x", {4, 5, 5}).Weight("up.weight", {4, 3, 3, 3}).Weight("up.bias", {6});
  onnx::NodeProto* up = b.AddNode("ConvTranspose", {"x", "up.weight", "up.bias"}, {"up"});
  OnnxModelBuilder::SetInts(*up, "strides", {2, 2});
  OnnxModelBuilder::SetInts(*up, "pads", {1, 1, 1, 1});
  OnnxModelBuilder::SetInts(*up, "output_padding", {1, 1});
  OnnxModelBuilder::SetInts(*up, "kernel_shape", {3, 3});
  OnnxModelBuilder::SetInt(*up, "group", 2);
  OnnxModelBuilder::SetInt(*b.AddNode("Flatten", {"up"}, {"logits"}), "axis", 1);
  b.Output("logits");
  const ImportedModel m = Import(b);
  absl::StatusOr<Graph> g = Graph::FromProto(m.graph);
  ASSERT_TRUE(g.ok()) << g.status();
  const proto::NodeDef& n = m.graph.nodes(0);
  EXPECT_EQ(n.op(), "ConvTranspose2D");
  EXPECT_THAT(n.attrs().at("output_padding").ints().values(), ElementsAre(1, 1));
  EXPECT_EQ(n.attrs().at("groups").i(), 2);
  EXPECT_EQ(g->tensor(g->FindTensor(n.outputs(0))).shape, Shape({4, 6, 10, 10}));
  EXPECT_EQ(m.stats.parameter_elements, 4u * 27 + 6);
  // An output_shape that its pads do not give is refused, naming the node.
  OnnxModelBuilder::SetInts(*up, "output_shape", {11, 11});
  absl::StatusOr<ImportedModel> bad = ImportOnnx(b.Bytes(), OnnxImportOptions{4});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("'/up'"));
  EXPECT_THAT(bad.status().message(), HasSubstr("output_shape [11,11] differs"));
}

TEST(OnnxImportTest, ShapeArithmeticFoldsIntoAReshape) {
  // x[4,6,2] -> Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [-1])): [4, 12].
  OnnxModelBuilder b;
  b.Input("x", {6, 2}).Ints("zero", {0}, /*scalar=*/true).Ints("axes", {0}).Ints("rest", {-1});
  b.AddNode("Shape", {"x"}, {"s"});
  onnx::NodeProto* gather = b.AddNode("Gather", {"s", "zero"}, {"n"});
  OnnxModelBuilder::SetInt(*gather, "axis", 0);
  b.AddNode("Unsqueeze", {"n", "axes"}, {"nv"});
  onnx::NodeProto* concat = b.AddNode("Concat", {"nv", "rest"}, {"target"});
  OnnxModelBuilder::SetInt(*concat, "axis", 0);
  b.AddNode("Reshape", {"x", "target"}, {"logits"});
  b.Output("logits");
  const ImportedModel m = Import(b, 4);
  EXPECT_THAT(OpCounts(m.graph),
              (std::map<std::string, int>{{"Reshape", 1}, {"SoftmaxCrossEntropy", 1}}));
  EXPECT_THAT(m.graph.nodes(0).attrs().at("shape").ints().values(), ElementsAre(4, 12));
  EXPECT_EQ(m.stats.folded, 3 + 4);  // three Constants, Shape, Gather, Unsqueeze, Concat
  EXPECT_TRUE(Graph::FromProto(m.graph).ok());
}

// Adds torch's nn.GELU() of input x as it exports: x * (1 + erf(x / sqrt 2)) * 0.5, the
// division's output named "d", the result `output`.
OnnxModelBuilder ErfGelu(const std::string& output) {
  OnnxModelBuilder b;
  b.Input("x", {6}).Float("sqrt2", 1.4142135f).Float("one", 1.0f).Float("half", 0.5f);
  b.AddNode("Div", {"x", "sqrt2"}, {"d"});
  b.AddNode("Erf", {"d"}, {"e"});
  b.AddNode("Add", {"e", "one"}, {"a"});
  b.AddNode("Mul", {"x", "a"}, {"m"});
  b.AddNode("Mul", {"m", "half"}, {output});
  return b;
}

TEST(OnnxImportTest, GeluDecompositionBecomesOneGelu) {
  OnnxModelBuilder b = ErfGelu("logits");
  b.Output("logits");
  const ImportedModel m = Import(b);
  EXPECT_THAT(OpCounts(m.graph),
              (std::map<std::string, int>{{"GELU", 1}, {"SoftmaxCrossEntropy", 1}}));
  EXPECT_EQ(m.graph.nodes(0).attrs().at("approximate").s(), "none");
  EXPECT_EQ(m.stats.fused, 4);
  EXPECT_EQ(m.stats.buffers, 0) << "the pattern's constants must not become tensors";
}

TEST(OnnxImportTest, GeluWithAnotherReaderOfItsInnerValueIsNotFused) {
  OnnxModelBuilder b = ErfGelu("g");
  b.AddNode("Add", {"g", "d"}, {"logits"});  // d is read outside the pattern
  b.Output("logits");
  // Imported op by op: the Erf is an Erf of its own, and no GELU appears.
  const ImportedModel m = Import(b);
  const std::map<std::string, int> counts = OpCounts(m.graph);
  EXPECT_EQ(counts.count("GELU"), 0u);
  EXPECT_EQ(counts.at("Erf"), 1);
  EXPECT_EQ(m.stats.fused, 0);
}

TEST(OnnxImportTest, LayerNormDecompositionBecomesOneLayerNorm) {
  // opset 16's layer_norm: (x - mean) / sqrt(var + eps) * w + b over the last axis.
  OnnxModelBuilder b(16);
  b.Input("x", {3, 8}).Float("two", 2.0f).Float("eps", 1e-5f).Weight("ln.weight", {8}, 1.0f)
      .Weight("ln.bias", {8}, 0.0f);
  OnnxModelBuilder::SetInts(*b.AddNode("ReduceMean", {"x"}, {"mean"}), "axes", {-1});
  b.AddNode("Sub", {"x", "mean"}, {"c"});
  b.AddNode("Pow", {"c", "two"}, {"sq"});
  OnnxModelBuilder::SetInts(*b.AddNode("ReduceMean", {"sq"}, {"var"}), "axes", {-1});
  b.AddNode("Add", {"var", "eps"}, {"ve"});
  b.AddNode("Sqrt", {"ve"}, {"sd"});
  b.AddNode("Div", {"c", "sd"}, {"n"});
  b.AddNode("Mul", {"n", "ln.weight"}, {"w"});
  b.AddNode("Add", {"w", "ln.bias"}, {"logits"});
  b.Output("logits");
  const ImportedModel m = Import(b);
  EXPECT_THAT(OpCounts(m.graph),
              (std::map<std::string, int>{{"LayerNorm", 1}, {"SoftmaxCrossEntropy", 1}}));
  EXPECT_NEAR(m.graph.nodes(0).attrs().at("epsilon").f(), 1e-5, 1e-9);
  EXPECT_THAT(m.graph.nodes(0).inputs(), ElementsAre("x", "ln.weight", "ln.bias"));
  EXPECT_TRUE(Graph::FromProto(m.graph).ok());
}

TEST(OnnxImportTest, TransposedWeightAndBiasJoinTheMatMul) {
  // torch's Linear in training-mode exports: x @ W^T, then + b.
  OnnxModelBuilder b;
  b.Input("x", {5, 6}).Weight("w", {3, 6}).Weight("b", {3});
  OnnxModelBuilder::SetInts(*b.AddNode("Transpose", {"w"}, {"wt"}), "perm", {1, 0});
  b.AddNode("MatMul", {"x", "wt"}, {"y"});
  b.AddNode("Add", {"b", "y"}, {"logits"});
  b.Output("logits");
  const ImportedModel m = Import(b);
  EXPECT_THAT(OpCounts(m.graph),
              (std::map<std::string, int>{{"MatMul", 1}, {"SoftmaxCrossEntropy", 1}}));
  const proto::NodeDef& mm = m.graph.nodes(0);
  EXPECT_THAT(mm.inputs(), ElementsAre("x", "w", "b"));
  EXPECT_TRUE(mm.attrs().at("transpose_b").b());
  EXPECT_EQ(m.stats.fused, 2);
  EXPECT_TRUE(Graph::FromProto(m.graph).ok());
}

TEST(OnnxImportTest, ATransposedWeightReadElsewhereIsMadeOnce) {
  OnnxModelBuilder b;
  b.Input("x", {5, 6}).Weight("w", {3, 6});
  OnnxModelBuilder::SetInts(*b.AddNode("Transpose", {"w"}, {"wt"}), "perm", {1, 0});
  b.AddNode("Relu", {"wt"}, {"r"});  // reads the transpose itself
  b.AddNode("MatMul", {"x", "r"}, {"logits"});
  b.Output("logits");
  const ImportedModel m = Import(b);
  EXPECT_EQ(OpCounts(m.graph)["Transpose"], 1);
  EXPECT_TRUE(Graph::FromProto(m.graph).ok());
}

TEST(OnnxImportTest, ZeroPadJoinsTheAveragePoolAfterIt) {
  // avg_pool2d(padding=1, count_include_pad=True) as torch exports it.
  OnnxModelBuilder b;
  b.Input("x", {2, 6, 6}).Ints("pads", {0, 0, 1, 1, 0, 0, 1, 1});
  b.AddNode("Pad", {"x", "pads"}, {"padded"});
  onnx::NodeProto* pool = b.AddNode("AveragePool", {"padded"}, {"pooled"});
  OnnxModelBuilder::SetInts(*pool, "kernel_shape", {3, 3});
  OnnxModelBuilder::SetInts(*pool, "strides", {1, 1});
  b.AddNode("Flatten", {"pooled"}, {"logits"});
  b.Output("logits");
  const ImportedModel m = Import(b);
  const proto::NodeDef& avg = m.graph.nodes(0);
  ASSERT_EQ(avg.op(), "AvgPool");
  EXPECT_THAT(avg.attrs().at("padding").ints().values(), ElementsAre(1, 1, 1, 1));
  EXPECT_TRUE(avg.attrs().at("count_include_pad").b());
  absl::StatusOr<Graph> g = Graph::FromProto(m.graph);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_THAT(g->tensor(g->FindTensor("pooled")).shape, ElementsAre(4, 2, 6, 6));
}

TEST(OnnxImportTest, APadBeforeAnythingElseIsRefused) {
  OnnxModelBuilder b;
  b.Input("x", {2, 6, 6}).Ints("pads", {0, 0, 1, 1, 0, 0, 1, 1});
  b.AddNode("Pad", {"x", "pads"}, {"padded"});
  b.AddNode("Relu", {"padded"}, {"r"});
  b.AddNode("Flatten", {"r"}, {"logits"});
  b.Output("logits");
  EXPECT_THAT(ImportOnnx(b.Bytes(), OnnxImportOptions{2}).status().message(),
              HasSubstr("value 'padded' is a zero Pad"));
}

TEST(OnnxImportTest, IdentityAliasesOfAnInitializerAreTensorsOfTheirOwn) {
  // Eval-mode exports merge equal initializers behind Identity nodes; each batch norm must
  // still get its own running statistics.
  OnnxModelBuilder b;
  b.Input("x", {4}).Weight("shared.ones", {4}, 1.0f).Weight("shared.zeros", {4}, 0.0f);
  for (const char* bn : {"bn1", "bn2"}) {
    for (const char* field : {"weight", "running_var"}) {
      b.AddNode("Identity", {"shared.ones"}, {std::string(bn) + "." + field});
    }
    for (const char* field : {"bias", "running_mean"}) {
      b.AddNode("Identity", {"shared.zeros"}, {std::string(bn) + "." + field});
    }
  }
  b.AddNode("BatchNormalization", {"x", "bn1.weight", "bn1.bias", "bn1.running_mean", "bn1.running_var"}, {"y1"});
  b.AddNode("BatchNormalization", {"y1", "bn2.weight", "bn2.bias", "bn2.running_mean", "bn2.running_var"}, {"logits"});
  b.Output("logits");
  const ImportedModel m = Import(b);
  EXPECT_EQ(m.stats.parameters, 4);
  EXPECT_EQ(m.stats.buffers, 4);
  EXPECT_EQ(FindTensor(m.graph, "bn2.running_mean")->role(), proto::ROLE_BUFFER);
  EXPECT_EQ(FindTensor(m.graph, "shared.ones"), nullptr) << "the merged name is no tensor";
  EXPECT_TRUE(Graph::FromProto(m.graph).ok());
}

TEST(OnnxImportTest, DropoutKeepsItsRatioAndRatioZeroIsDropped) {
  OnnxModelBuilder b;
  b.Input("x", {6}).Float("p", 0.25f).Float("zero", 0.0f);
  b.AddNode("Dropout", {"x", "p"}, {"d", "mask"});
  b.AddNode("Dropout", {"d", "zero"}, {"logits"});
  b.Output("logits");
  const ImportedModel m = Import(b);
  EXPECT_THAT(OpCounts(m.graph),
              (std::map<std::string, int>{{"Dropout", 1}, {"SoftmaxCrossEntropy", 1}}));
  EXPECT_NEAR(m.graph.nodes(0).attrs().at("rate").f(), 0.25, 1e-7);
  EXPECT_EQ(m.stats.elided, 1);
}

TEST(OnnxImportTest, ArithmeticWithKnownValuesBecomesAddAndMul) {
  // x / 4 - 1: Mul by 0.25 and Add of -1, each constant a float32 buffer.
  OnnxModelBuilder b;
  b.Input("x", {6}).Float("four", 4.0f).Float("one", 1.0f).Float("unit", 1.0f);
  b.AddNode("Div", {"x", "four"}, {"q"});
  b.AddNode("Sub", {"q", "one"}, {"s"});
  b.AddNode("Mul", {"s", "unit"}, {"logits"});  // times 1 changes nothing
  b.Output("logits");
  const ImportedModel m = Import(b);
  EXPECT_THAT(OpCounts(m.graph),
              (std::map<std::string, int>{{"Add", 1}, {"Mul", 1}, {"SoftmaxCrossEntropy", 1}}));
  std::map<std::string, float> constants;
  for (const proto::TensorValue& v : m.values) {
    float f;
    std::memcpy(&f, v.data().data(), 4);
    constants[v.name()] = f;
  }
  EXPECT_FLOAT_EQ(constants.at("q.constant"), 0.25f);
  EXPECT_FLOAT_EQ(constants.at("s.constant"), -1.0f);
  EXPECT_EQ(m.stats.elided, 1);
}

TEST(OnnxRebatchTest, ArithmeticOnAValueNothingWritesIsAnErrorNamingIt) {
  // Found by the fuzzer: re-batching a known operand beside a computed one that nothing
  // writes threw from a map lookup; it must be the importer's error naming the value.
  for (const char* op : {"Mul", "Sub", "Div"}) {
    for (bool known_first : {false, true}) {
      OnnxModelBuilder b;
      b.FixedInput("x", {2, 6}).Float("two", 2.0f);
      if (known_first) {
        b.AddNode(op, {"two", "nowhere"}, {"y"});
      } else {
        b.AddNode(op, {"nowhere", "two"}, {"y"});
      }
      b.AddNode("Add", {"x", "y"}, {"logits"});
      b.Output("logits");
      absl::Status s = ImportOnnx(b.Bytes(), OnnxImportOptions{4}).status();
      EXPECT_THAT(s.message(), HasSubstr("value 'nowhere' is read before anything writes it"))
          << op << (known_first ? " (known first)" : "");
    }
  }
}

TEST(OnnxImportTest, ClipBecomesReLU6OrIsRefused) {
  OnnxModelBuilder b;
  b.Input("x", {6}).Float("lo", 0.0f).Float("hi", 6.0f).Float("two", 2.0f);
  b.AddNode("Clip", {"x", "lo", "hi"}, {"logits"});
  b.Output("logits");
  EXPECT_EQ(Import(b).graph.nodes(0).op(), "ReLU6");
  OnnxModelBuilder c;
  c.Input("x", {6}).Float("lo", 0.0f).Float("two", 2.0f);
  c.AddNode("Clip", {"x", "lo", "two"}, {"logits"});
  c.Output("logits");
  EXPECT_THAT(ImportOnnx(c.Bytes(), OnnxImportOptions{2}).status().message(),
              HasSubstr("clips to [0, 2]"));
}

TEST(OnnxImportTest, EinsumOfABatchedProductBecomesAMatMul) {
  OnnxModelBuilder b;
  b.Input("q", {2, 5, 4}).Input("k", {2, 5, 4});
  onnx::NodeProto* e = b.AddNode("Einsum", {"q", "k"}, {"scores"});
  OnnxModelBuilder::Attr(*e, "equation", onnx::AttributeProto::STRING)->set_s("b h i d, b h j d -> b h i j");
  b.AddNode("Flatten", {"scores"}, {"logits"});
  b.Output("logits");
  const ImportedModel m = Import(b);
  const proto::NodeDef& mm = m.graph.nodes(0);
  ASSERT_EQ(mm.op(), "MatMul");
  EXPECT_FALSE(mm.attrs().at("transpose_a").b());
  EXPECT_TRUE(mm.attrs().at("transpose_b").b());
  absl::StatusOr<Graph> g = Graph::FromProto(m.graph);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_THAT(g->tensor(g->FindTensor("scores")).shape, ElementsAre(4, 2, 5, 5));
}

TEST(OnnxImportTest, ReduceMeanOverHeightAndWidthIsAGlobalAveragePool) {
  OnnxModelBuilder b;
  b.Input("x", {3, 5, 5});
  onnx::NodeProto* r = b.AddNode("ReduceMean", {"x"}, {"logits"});
  OnnxModelBuilder::SetInts(*r, "axes", {2, 3});
  OnnxModelBuilder::SetInt(*r, "keepdims", 0);
  b.Output("logits");
  const ImportedModel m = Import(b);
  EXPECT_THAT(OpCounts(m.graph),
              (std::map<std::string, int>{{"GlobalAvgPool", 1}, {"Reshape", 1},
                                          {"SoftmaxCrossEntropy", 1}}));
  EXPECT_TRUE(Graph::FromProto(m.graph).ok());
}

// ---- Fixed-batch exports, re-batched ---------------------------------------------------------

const proto::NodeDef* FindNode(const proto::GraphDef& g, const std::string& name) {
  for (const proto::NodeDef& n : g.nodes()) {
    if (n.name() == name) return &n;
  }
  return nullptr;
}

// x[2, 4, 3, 3] exported at batch 2, every shape written as a literal for that batch:
//   Reshape [2, 2, 2, 3, 3] -> Transpose -> Reshape [2, -1, 3, 3]   (a channel shuffle)
//   Slice of all 2 samples and channels 0..1                     (batch axis by literal ends)
//   * ConstantOfShape([2, 2, 1, 1], 0.5)                          (a known operand per sample)
//   + Expand(token[1, 2, 1, 1], [2, 2, 3, 3])                     (a class-token expand)
//   + Tile(bias[1, 2, 3, 3], [2, 1, 1, 1])
//   -> Reshape [2, 18] -> Gemm(5)
OnnxModelBuilder FixedBatchChain() {
  OnnxModelBuilder b;
  b.FixedInput("x", {2, 4, 3, 3})
      .Weight("token", {1, 2, 1, 1})
      .Weight("tile.bias", {1, 2, 3, 3})
      .Weight("fc.weight", {5, 18})
      .Weight("fc.bias", {5})
      .Ints("groups", {2, 2, 2, 3, 3})
      .Ints("merged", {2, -1, 3, 3})
      .Ints("starts", {0, 0})
      .Ints("ends", {2, 2})
      .Ints("axes", {0, 1})
      .Ints("scale.shape", {2, 2, 1, 1})
      .Ints("expand.shape", {2, 2, 3, 3})
      .Ints("repeats", {2, 1, 1, 1})
      .Ints("flat", {2, 18});
  b.AddNode("Reshape", {"x", "groups"}, {"g"});
  OnnxModelBuilder::SetInts(*b.AddNode("Transpose", {"g"}, {"t"}), "perm", {0, 2, 1, 3, 4});
  b.AddNode("Reshape", {"t", "merged"}, {"shuffled"});
  b.AddNode("Slice", {"shuffled", "starts", "ends", "axes"}, {"sliced"});
  onnx::NodeProto* cos = b.AddNode("ConstantOfShape", {"scale.shape"}, {"scale"});
  TP* half = OnnxModelBuilder::Attr(*cos, "value", onnx::AttributeProto::TENSOR)->mutable_t();
  half->set_data_type(TP::FLOAT);
  half->add_dims(1);
  half->add_float_data(0.5f);
  b.AddNode("Mul", {"sliced", "scale"}, {"scaled"});
  b.AddNode("Expand", {"token", "expand.shape"}, {"tokens"});
  b.AddNode("Add", {"scaled", "tokens"}, {"with_tokens"});
  b.AddNode("Tile", {"tile.bias", "repeats"}, {"biases"});
  b.AddNode("Add", {"with_tokens", "biases"}, {"biased"});
  b.AddNode("Reshape", {"biased", "flat"}, {"f"});
  OnnxModelBuilder::SetInt(*b.AddNode("Gemm", {"f", "fc.weight", "fc.bias"}, {"logits"}), "transB",
                           1);
  b.Output("logits");
  return b;
}

TEST(OnnxRebatchTest, EveryShapeTheExportBatchWasBakedIntoFollowsTheBatch) {
  const ImportedModel m = Import(FixedBatchChain(), 5);
  absl::StatusOr<Graph> g = Graph::FromProto(m.graph);  // shape inference agrees throughout
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_THAT(FindTensor(m.graph, "x")->shape(), ElementsAre(5, 4, 3, 3));
  EXPECT_THAT(FindTensor(m.graph, "labels")->shape(), ElementsAre(5));
  // The channel shuffle's literal shapes, scaled on the batch axis.
  EXPECT_THAT(IntsOf(*FindNode(m.graph, "/g.reshape"), "shape"), ElementsAre(5, 2, 2, 3, 3));
  EXPECT_THAT(IntsOf(*FindNode(m.graph, "/shuffled.reshape"), "shape"), ElementsAre(5, 4, 3, 3));
  // The slice keeps every sample (ends [2] were all of the export batch), channels 0..1.
  const proto::NodeDef* slice = FindNode(m.graph, "/sliced");
  ASSERT_NE(slice, nullptr);
  EXPECT_THAT(IntsOf(*slice, "axes"), ElementsAre(1));
  // ConstantOfShape's equal slabs collapse to one that broadcasts over any batch.
  EXPECT_THAT(FindTensor(m.graph, "scaled.constant")->shape(), ElementsAre(1, 2, 1, 1));
  // The token's expand and the tile of the bias take the imported batch.
  EXPECT_THAT(IntsOf(*FindNode(m.graph, "/tokens"), "shape"), ElementsAre(5, 2, 3, 3));
  EXPECT_THAT(IntsOf(*FindNode(m.graph, "/biases"), "shape"), ElementsAre(5, 2, 3, 3));
  EXPECT_THAT(IntsOf(*FindNode(m.graph, "/f.reshape"), "shape"), ElementsAre(5, 18));
  // At the export batch nothing is rewritten.
  const ImportedModel same = Import(FixedBatchChain(), 2);
  EXPECT_THAT(IntsOf(*FindNode(same.graph, "/g.reshape"), "shape"), ElementsAre(2, 2, 2, 3, 3));
  EXPECT_THAT(FindTensor(same.graph, "scaled.constant")->shape(), ElementsAre(2, 2, 1, 1));
}

TEST(OnnxRebatchTest, ChannelShuffleExportedAtBatchOneTakesBatchEight) {
  // shufflenet_v2's channel_shuffle as torch.onnx.export writes it for one 1x116x28x28 input.
  OnnxModelBuilder b;
  b.FixedInput("x", {1, 116, 28, 28})
      .Weight("fc.weight", {10, 116})
      .Ints("groups", {1, 2, 58, 28, 28})
      .Ints("merged", {1, -1, 28, 28});
  b.AddNode("Reshape", {"x", "groups"}, {"g"});
  OnnxModelBuilder::SetInts(*b.AddNode("Transpose", {"g"}, {"t"}), "perm", {0, 2, 1, 3, 4});
  b.AddNode("Reshape", {"t", "merged"}, {"shuffled"});
  b.AddNode("GlobalAveragePool", {"shuffled"}, {"p"});
  b.AddNode("Flatten", {"p"}, {"f"});
  OnnxModelBuilder::SetInt(*b.AddNode("Gemm", {"f", "fc.weight"}, {"logits"}), "transB", 1);
  b.Output("logits");
  const ImportedModel m = Import(b, 8);
  ASSERT_TRUE(Graph::FromProto(m.graph).ok());
  EXPECT_THAT(IntsOf(*FindNode(m.graph, "/g.reshape"), "shape"), ElementsAre(8, 2, 58, 28, 28));
  EXPECT_THAT(IntsOf(*FindNode(m.graph, "/shuffled.reshape"), "shape"),
              ElementsAre(8, 116, 28, 28));
  EXPECT_THAT(FindTensor(m.graph, "labels")->shape(), ElementsAre(8));
}

TEST(OnnxRebatchTest, AShapeThatCannotBeAttributedNamesTheNodeAndDynamicAxes) {
  // [2, 4, 3, 3] -> [3, 24]: a row holds two thirds of a sample, so no axis holds the batch.
  OnnxModelBuilder b;
  b.FixedInput("images", {2, 4, 3, 3}).Ints("bad.shape", {3, 24});
  b.AddNode("Reshape", {"images", "bad.shape"}, {"bad"});
  b.Output("bad");
  OnnxImportOptions options;
  options.batch = 8;
  absl::StatusOr<ImportedModel> m = ImportOnnx(b.Bytes(), options);
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("ONNX node '/bad' (Reshape)"));
  EXPECT_THAT(m.status().message(), HasSubstr("[3,24] was exported for batch 2"));
  EXPECT_THAT(m.status().message(), HasSubstr("mixes samples"));
  EXPECT_THAT(m.status().message(), HasSubstr("dynamic_axes={'images': {0: 'batch'}}"));

  // A known operand with a different value per exported sample.
  OnnxModelBuilder c;
  c.FixedInput("images", {2, 3});
  TP* rows = OnnxModelBuilder::Attr(*c.AddNode("Constant", {}, {"per.sample"}), "value",
                                    onnx::AttributeProto::TENSOR)
                 ->mutable_t();
  rows->set_data_type(TP::FLOAT);
  rows->add_dims(2);
  rows->add_dims(3);
  for (float v : {1.f, 2.f, 3.f, 4.f, 5.f, 6.f}) rows->add_float_data(v);
  c.AddNode("Mul", {"images", "per.sample"}, {"logits"});
  c.Output("logits");
  m = ImportOnnx(c.Bytes(), options);
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("ONNX node '/logits' (Mul)"));
  EXPECT_THAT(m.status().message(), HasSubstr("values per sample of the export batch"));
}

TEST(OnnxRebatchTest, SwinsWindowsAndQkvSplitFollowTheBatch) {
  // swin after a Pad: x.view(B, pad_H // 2, 2, W, C) with B a literal 1 and pad_H // 2 computed
  // from the Shape; then a permute and qkv[0] (a Gather before the batch axis), a flatten to
  // the literal [1, 16], and a classifier.
  OnnxModelBuilder b;
  b.FixedInput("x", {1, 4, 4, 2})
      .Weight("fc.weight", {5, 16})
      .Ints("one", {1})
      .Ints("h.at", {1}, /*scalar=*/true)
      .Ints("two", {2}, /*scalar=*/true)
      .Ints("axes", {0})
      .Ints("rest", {2, 4, 2})
      .Ints("zero", {0}, /*scalar=*/true)
      .Ints("flat", {1, 16});
  b.AddNode("Shape", {"x"}, {"shape"});
  b.AddNode("Gather", {"shape", "h.at"}, {"h"});
  b.AddNode("Div", {"h", "two"}, {"half"});
  b.AddNode("Unsqueeze", {"half", "axes"}, {"half.1"});
  OnnxModelBuilder::SetInt(*b.AddNode("Concat", {"one", "half.1", "rest"}, {"windows.shape"}),
                           "axis", 0);
  b.AddNode("Reshape", {"x", "windows.shape"}, {"windows"});
  OnnxModelBuilder::SetInts(*b.AddNode("Transpose", {"windows"}, {"t"}), "perm", {1, 0, 2, 3, 4});
  b.AddNode("Gather", {"t", "zero"}, {"first"});
  b.AddNode("Reshape", {"first", "flat"}, {"f"});
  OnnxModelBuilder::SetInt(*b.AddNode("Gemm", {"f", "fc.weight"}, {"logits"}), "transB", 1);
  b.Output("logits");
  const ImportedModel m = Import(b, 3);
  ASSERT_TRUE(Graph::FromProto(m.graph).ok());
  EXPECT_THAT(IntsOf(*FindNode(m.graph, "/windows.reshape"), "shape"), ElementsAre(3, 2, 2, 4, 2));
  EXPECT_THAT(IntsOf(*FindNode(m.graph, "/f.reshape"), "shape"), ElementsAre(3, 16));
  EXPECT_THAT(FindTensor(m.graph, "labels")->shape(), ElementsAre(3));
}

TEST(OnnxRebatchTest, AProductOverTheBatchAxisIsRefusedAsMixingSamples) {
  // x^T x, [3, B] [B, 3]: a Gram matrix over the samples, whose shapes hold at any batch.
  OnnxModelBuilder b;
  b.FixedInput("x", {2, 3});
  OnnxModelBuilder::SetInts(*b.AddNode("Transpose", {"x"}, {"xt"}), "perm", {1, 0});
  b.AddNode("MatMul", {"xt", "x"}, {"logits"});
  b.Output("logits");
  OnnxImportOptions options;
  options.batch = 8;
  absl::StatusOr<ImportedModel> m = ImportOnnx(b.Bytes(), options);
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("ONNX node '/logits' (MatMul): it contracts over "
                                              "the batch axis of 'xt' (axis 1), which mixes "
                                              "samples"));
}

// ---- Inference-mode exports ------------------------------------------------------------------

TEST(OnnxExportModeTest, ATrainingExportHasNoWarning) {
  const ImportedModel m = Import(SmallCnn(), 4);
  EXPECT_FALSE(m.inference_export);
  EXPECT_TRUE(m.warnings.empty());
}

// SmallCnn with its batch norm as an inference export writes it: training_mode 0, one output.
OnnxModelBuilder InferenceBatchNorm() {
  OnnxModelBuilder b;
  b.Input("images", {3, 8, 8})
      .Weight("conv.weight", {8, 3, 3, 3})
      .Weight("bn.weight", {8}, 1.0f)
      .Weight("bn.bias", {8}, 0.0f)
      .Weight("bn.running_mean", {8}, 0.0f)
      .Weight("bn.running_var", {8}, 1.0f);
  b.AddNode("Conv", {"images", "conv.weight"}, {"c"});
  b.AddNode("BatchNormalization",
            {"c", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"}, {"n"});
  b.AddNode("GlobalAveragePool", {"n"}, {"p"});
  b.AddNode("Flatten", {"p"}, {"logits"});
  b.Output("logits");
  return b;
}

TEST(OnnxExportModeTest, InferenceBatchNormsAreNamedAndStrictRefusesThem) {
  const ImportedModel m = Import(InferenceBatchNorm(), 4);
  EXPECT_TRUE(m.inference_export);
  ASSERT_EQ(m.warnings.size(), 1u);
  EXPECT_THAT(m.warnings[0], HasSubstr("1 of its 1 batch norm(s) have training_mode 0"));
  EXPECT_THAT(m.warnings[0], HasSubstr("the plan is for the exported inference graph"));
  EXPECT_THAT(m.warnings[0], HasSubstr("training=torch.onnx.TrainingMode.TRAINING, "
                                       "do_constant_folding=False"));
  EXPECT_THAT(m.warnings[0], HasSubstr("graph_from_module"));
  OnnxImportOptions strict;
  strict.batch = 4;
  strict.strict_training = true;
  absl::StatusOr<ImportedModel> refused = ImportOnnx(InferenceBatchNorm().Bytes(), strict);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("--strict-training"));
  // Opset 9's inference batch norm has no training_mode, only a single output.
  OnnxModelBuilder old(9);
  old.Input("images", {8, 4, 4})
      .Weight("s", {8}, 1.0f)
      .Weight("b", {8}, 0.0f)
      .Weight("m", {8}, 0.0f)
      .Weight("v", {8}, 1.0f);
  old.AddNode("BatchNormalization", {"images", "s", "b", "m", "v"}, {"n"});
  old.AddNode("GlobalAveragePool", {"n"}, {"p"});
  old.AddNode("Flatten", {"p"}, {"logits"});
  old.Output("logits");
  EXPECT_TRUE(Import(old, 4).inference_export);
}

TEST(OnnxExportModeTest, BatchNormFoldedIntoConvolutionsIsFound) {
  // torch's eval export: no batch norm; the convolution's weight and bias are tensors the
  // exporter computed ("onnx::Conv_*"), the bias read through an Identity alias.
  OnnxModelBuilder b;
  b.Input("images", {3, 8, 8})
      .Weight("onnx::Conv_101", {8, 3, 3, 3})
      .Weight("onnx::Conv_102", {8})
      .Weight("features.0.weight", {8, 8, 1, 1})
      .Weight("features.0.bias", {8});
  b.AddNode("Identity", {"onnx::Conv_102"}, {"onnx::Conv_103"});
  b.AddNode("Conv", {"images", "onnx::Conv_101", "onnx::Conv_103"}, {"c"});
  // A convolution with its own module's bias (alexnet's, vgg's) is no sign.
  b.AddNode("Conv", {"c", "features.0.weight", "features.0.bias"}, {"d"});
  b.AddNode("GlobalAveragePool", {"d"}, {"p"});
  b.AddNode("Flatten", {"p"}, {"logits"});
  b.Output("logits");
  const ImportedModel m = Import(b, 4);
  EXPECT_TRUE(m.inference_export);
  ASSERT_EQ(m.warnings.size(), 1u);
  EXPECT_THAT(m.warnings[0], HasSubstr("1 of its 2 convolution(s) have a weight and bias the "
                                       "exporter computed"));
}

}  // namespace
}  // namespace headroom::graph
