#include "graph/onnx_export.h"

#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "graph/graph.h"
#include "graph/graph_builder.h"
#include "graph/onnx_import.h"
#include "graph/op_registry.h"
#include "gtest/gtest.h"

namespace headroom::graph {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

Graph Build(const proto::GraphDef& def) {
  absl::StatusOr<Graph> g = Graph::FromProto(def);
  EXPECT_TRUE(g.ok()) << g.status();
  return *std::move(g);
}

// Returns a value for every parameter and buffer of `g`: float32 elements that differ from
// tensor to tensor (running variances positive), so a value bound to the wrong tensor shows.
std::vector<proto::TensorValue> ValuesOf(const Graph& g) {
  std::vector<proto::TensorValue> values;
  int k = 0;
  for (const Tensor& t : g.tensors()) {
    if (t.role != proto::ROLE_PARAMETER && t.role != proto::ROLE_BUFFER) continue;
    ++k;
    std::vector<float> data(t.num_elements());
    const bool positive = t.name.find("running_var") != std::string::npos;
    for (size_t i = 0; i < data.size(); ++i) {
      const float v = 0.5f * std::sin(0.37f * static_cast<float>(i) + 1.3f * static_cast<float>(k));
      data[i] = positive ? 0.5f + std::fabs(v) : v;
    }
    proto::TensorValue v;
    v.set_name(t.name);
    for (int64_t d : t.shape) v.add_shape(d);
    v.set_dtype(t.dtype);
    v.set_data(std::string(reinterpret_cast<const char*>(data.data()), data.size() * 4));
    values.push_back(std::move(v));
  }
  return values;
}

// conv3x3 -> batch norm -> ReLU -> max-pool -> flatten -> dropout -> Linear -> loss, batch 2.
proto::GraphDef SmallCnn() {
  GraphBuilder b("small");
  std::string x = b.Input("images", {2, 3, 8, 8});
  x = b.Conv2D("conv", x, 3, 4, 3, 1, 1);
  x = b.BatchNorm("bn", x, 4, 1e-3, 0.2);
  x = b.Unary("ReLU", "relu", x);
  x = b.Op("MaxPool", "pool", {x}, {{"kernel_size", IntsAttr({2, 2})}});
  x = b.Op("Flatten", "flatten", {x}, {{"axis", IntAttr(1)}});
  x = b.Op("Dropout", "drop", {x}, {{"rate", FloatAttr(0.3)}});
  x = b.Linear("fc", x, 64, 5);
  const std::string labels = b.Label("labels", {2});
  b.SetLoss(b.AddNode("SoftmaxCrossEntropy", "loss", {x, labels}, {"loss"})[0]);
  return b.Build();
}

absl::StatusOr<ImportedModel> Reimport(const OnnxExport& e, uint64_t batch) {
  OnnxImportOptions options;
  options.batch = batch;
  return ImportOnnx(e.model.SerializeAsString(), options);
}

std::vector<std::string> Ops(const proto::GraphDef& def) {
  std::vector<std::string> ops;
  for (const proto::NodeDef& n : def.nodes()) ops.push_back(n.op());
  return ops;
}

const onnx::NodeProto* FindOnnxNode(const onnx::GraphProto& g, const std::string& op) {
  for (const onnx::NodeProto& n : g.node()) {
    if (n.op_type() == op) return &n;
  }
  return nullptr;
}

const onnx::AttributeProto* Attr(const onnx::NodeProto& n, const std::string& name) {
  for (const onnx::AttributeProto& a : n.attribute()) {
    if (a.name() == name) return &a;
  }
  return nullptr;
}

TEST(OnnxExportTest, SmallCnnIsAnInferenceModelWithASymbolicBatch) {
  const Graph g = Build(SmallCnn());
  absl::StatusOr<OnnxExport> e = ExportOnnx(g, ValuesOf(g));
  ASSERT_TRUE(e.ok()) << e.status();
  const onnx::ModelProto& m = e->model;
  EXPECT_EQ(m.opset_import(0).version(), kOnnxExportOpset);
  ASSERT_EQ(m.graph().input_size(), 1);
  EXPECT_EQ(m.graph().input(0).name(), "images");
  EXPECT_EQ(m.graph().input(0).type().tensor_type().shape().dim(0).dim_param(), "batch");
  ASSERT_EQ(m.graph().output_size(), 1);
  EXPECT_EQ(m.graph().output(0).name(), "fc") << "the logits, not the loss";
  EXPECT_EQ(m.graph().output(0).type().tensor_type().shape().dim(0).dim_param(), "batch");
  EXPECT_EQ(m.graph().output(0).type().tensor_type().shape().dim(1).dim_value(), 5);
  std::vector<std::string> ops;
  for (const onnx::NodeProto& n : m.graph().node()) ops.push_back(n.op_type());
  EXPECT_THAT(ops, ElementsAre("Conv", "BatchNormalization", "Relu", "MaxPool", "Flatten", "Gemm"))
      << "dropout removed, the loss left out";
  const onnx::NodeProto* bn = FindOnnxNode(m.graph(), "BatchNormalization");
  ASSERT_NE(bn, nullptr);
  ASSERT_NE(Attr(*bn, "training_mode"), nullptr);
  EXPECT_EQ(Attr(*bn, "training_mode")->i(), 0);
  EXPECT_FLOAT_EQ(Attr(*bn, "momentum")->f(), 0.8f) << "ONNX's momentum weighs the running value";
  EXPECT_FLOAT_EQ(Attr(*bn, "epsilon")->f(), 1e-3f);
  EXPECT_EQ(Attr(*FindOnnxNode(m.graph(), "Gemm"), "transB")->i(), 1);
  // Every weight and running statistic, bytes as given.
  std::map<std::string, std::string> bytes;
  for (const onnx::TensorProto& t : m.graph().initializer()) bytes[t.name()] = t.raw_data();
  for (const proto::TensorValue& v : ValuesOf(g)) {
    ASSERT_EQ(bytes.count(v.name()), 1u) << v.name();
    EXPECT_EQ(bytes[v.name()], v.data()) << v.name();
  }
  EXPECT_EQ(e->stats.dropped, 1);
  EXPECT_EQ(e->stats.output, "fc");
  EXPECT_TRUE(CheckOnnxModel(m).ok());
}

// Returns attribute `name` of `n` as it acts: floats to 6 digits (ONNX's attributes are
// float32, and its batch norm momentum is 1 - Headroom's), padding as 4 values, an empty pool
// stride as the kernel.
std::string Canonical(const Node& n, const std::string& name) {
  proto::AttrValue v = n.attrs.values().at(name);
  if (v.has_f()) return absl::StrFormat("%.6g", v.f());
  if (name == "padding" && v.ints().values_size() == 2) {
    const std::vector<int64_t> p(v.ints().values().begin(), v.ints().values().end());
    v = IntsAttr({p[0], p[1], p[0], p[1]});
  }
  if (name == "stride" && v.ints().values_size() == 0) v = n.attrs.values().at("kernel_size");
  return v.DebugString();
}

TEST(OnnxExportTest, ImportBringsBackTheSameGraphAndValues) {
  const Graph g = Build(SmallCnn());
  const std::vector<proto::TensorValue> values = ValuesOf(g);
  absl::StatusOr<OnnxExport> e = ExportOnnx(g, values);
  ASSERT_TRUE(e.ok()) << e.status();
  // At another batch than the graph's: the symbolic batch takes it.
  absl::StatusOr<ImportedModel> back = Reimport(*e, 7);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->inference_export) << "training_mode 0 batch norms";
  EXPECT_THAT(Ops(back->graph), ElementsAre("Conv2D", "BatchNorm", "ReLU", "MaxPool", "Flatten",
                                            "MatMul", "SoftmaxCrossEntropy"));
  const Graph h = Build(back->graph);
  EXPECT_EQ(h.tensor(h.FindTensor("images")).shape, (Shape{7, 3, 8, 8}));
  // Each node's attributes as the original's (the dropout is gone).
  for (const Node& n : h.nodes()) {
    const NodeId id = g.FindNode(n.name);
    if (n.op->name == "SoftmaxCrossEntropy") continue;
    ASSERT_NE(id, -1) << "imported node '" << n.name << "' has no original";
    for (const auto& [name, value] : g.node(id).attrs.values()) {
      EXPECT_EQ(Canonical(n, name), Canonical(g.node(id), name)) << n.name << "." << name;
    }
  }
  // Roles and values by name, byte for byte.
  std::map<std::string, std::string> imported;
  for (const proto::TensorValue& v : back->values) imported[v.name()] = v.data();
  for (const proto::TensorValue& v : values) {
    const TensorId t = h.FindTensor(v.name());
    ASSERT_NE(t, -1) << v.name();
    EXPECT_EQ(h.tensor(t).role, g.tensor(g.FindTensor(v.name())).role) << v.name();
    EXPECT_EQ(imported[v.name()], v.data()) << v.name();
  }
}

// One graph through every op with a one-to-one or decomposed form.
proto::GraphDef EveryActivation() {
  GraphBuilder b("activations");
  const std::string x0 = b.Input("x", {2, 4, 3, 3});
  std::string x = b.Op("LeakyReLU", "leaky", {x0}, {{"alpha", FloatAttr(0.2)}});
  x = b.Op("ELU", "elu", {x}, {{"alpha", FloatAttr(0.7)}});
  x = b.Unary("SELU", "selu", x);
  x = b.Unary("Softplus", "softplus", x);
  x = b.Unary("Sqrt", "sqrt", x);
  x = b.Unary("Erf", "erf", x);
  x = b.Unary("Mish", "mish", x);
  x = b.Op("HardSigmoid", "hardsigmoid", {x}, {{"alpha", FloatAttr(0.25)}});
  x = b.Unary("HardSwish", "hardswish", x);
  x = b.Unary("ReLU6", "relu6", x);
  x = b.Op("Pow", "pow", {x}, {{"exponent", FloatAttr(3.0)}});
  x = b.Op("GELU", "gelu", {x});
  x = b.Op("GELU", "gelu_tanh", {x}, {{"approximate", StringAttr("tanh")}});
  x = b.Op("PReLU", "prelu", {x, b.Parameter("prelu.weight", {4, 1, 1})});
  x = b.Op("Sub", "sub", {x, x0});
  x = b.Op("Div", "div", {x, b.Unary("Sigmoid", "sigmoid", x0)});
  x = b.Op("Mul", "mul", {x, b.Unary("Tanh", "tanh", x0)});
  x = b.Op("AvgPool", "avgpool", {x},
           {{"kernel_size", IntsAttr({3, 3})},
            {"stride", IntsAttr({1, 1})},
            {"padding", IntsAttr({1, 1})},
            {"count_include_pad", BoolAttr(false)}});
  x = b.Unary("GlobalAvgPool", "gap", x);
  x = b.Op("Reshape", "reshape", {x}, {{"shape", IntsAttr({2, 4})}});
  x = b.Op("Softmax", "softmax", {x}, {{"scale", FloatAttr(0.5)}});
  const std::string labels = b.Label("labels", {2});
  b.SetLoss(b.AddNode("SoftmaxCrossEntropy", "loss", {x, labels}, {"loss"})[0]);
  return b.Build();
}

TEST(OnnxExportTest, ActivationsExportAndImportBack) {
  const Graph g = Build(EveryActivation());
  absl::StatusOr<OnnxExport> e = ExportOnnx(g, ValuesOf(g));
  ASSERT_TRUE(e.ok()) << e.status();
  const onnx::GraphProto& og = e->model.graph();
  for (const char* op :
       {"LeakyRelu", "Elu", "Selu", "Softplus", "Sqrt", "Erf", "HardSigmoid", "HardSwish", "Clip",
        "Pow", "PRelu", "Sub", "Div", "AveragePool", "GlobalAveragePool", "Reshape", "Softmax"}) {
    EXPECT_NE(FindOnnxNode(og, op), nullptr) << op;
  }
  EXPECT_FLOAT_EQ(Attr(*FindOnnxNode(og, "LeakyRelu"), "alpha")->f(), 0.2f);
  EXPECT_FLOAT_EQ(Attr(*FindOnnxNode(og, "HardSigmoid"), "alpha")->f(), 0.25f);
  EXPECT_EQ(Attr(*FindOnnxNode(og, "AveragePool"), "count_include_pad")->i(), 0);
  absl::StatusOr<ImportedModel> back = Reimport(*e, 2);
  ASSERT_TRUE(back.ok()) << back.status();
  std::map<std::string, int> counts;
  for (const std::string& op : Ops(back->graph)) ++counts[op];
  // Both GELUs fuse back; Mish comes back as x * tanh(softplus(x)), as torch's at opset 17;
  // the softmax's scale is a Mul by a buffer.
  EXPECT_EQ(counts["GELU"], 2);
  EXPECT_EQ(counts["Softplus"], 2);
  EXPECT_EQ(counts["Tanh"], 2);
  EXPECT_EQ(counts["ReLU6"], 1);
  EXPECT_EQ(counts["PReLU"], 1);
  EXPECT_EQ(counts["Pow"], 1);
  EXPECT_EQ(counts["Softmax"], 1);
  for (const char* op : {"LeakyReLU", "ELU", "SELU", "Sqrt", "Erf", "HardSigmoid", "HardSwish",
                         "Sub", "Div", "AvgPool", "GlobalAvgPool"}) {
    EXPECT_EQ(counts[op], 1) << op;
  }
  const Graph h = Build(back->graph);
  EXPECT_EQ(h.tensor(h.FindTensor("prelu.weight")).role, proto::ROLE_PARAMETER);
}

// A causal scaled softmax over [B, H, T, T] attention scores, a Split, a Transpose, a
// product of two computed tensors, a LayerNorm and an Embedding: the transformer's ops.
proto::GraphDef Attention() {
  GraphBuilder b("attention");
  const std::string ids = b.Input("ids", {2, 4}, proto::DTYPE_INT64);
  std::string h = b.Op("Embedding", "wte", {ids, b.Parameter("wte.weight", {10, 6})});
  h = b.LayerNorm("ln", h, 6);
  const std::vector<std::string> qk = b.AddNode(
      "Split", "split", {h}, {"q", "k"}, {{"axis", IntAttr(2)}, {"sizes", IntsAttr({3, 3})}});
  const std::string scores =
      b.Op("MatMul", "scores", {qk[0], qk[1]}, {{"transpose_b", BoolAttr(true)}});
  const std::string probs =
      b.Op("Softmax", "probs", {scores}, {{"scale", FloatAttr(0.5)}, {"causal", BoolAttr(true)}});
  h = b.Op("MatMul", "context", {probs, h});
  h = b.Op("Transpose", "t", {h}, {{"perm", IntsAttr({0, 2, 1})}});
  h = b.Op("Transpose", "t2", {h}, {{"perm", IntsAttr({0, 2, 1})}});
  h = b.Op("MatMul", "head", {h, "wte.weight"}, {{"transpose_b", BoolAttr(true)}});
  const std::string labels = b.Label("labels", {2, 4});
  b.SetLoss(b.AddNode("SoftmaxCrossEntropy", "loss", {h, labels}, {"loss"})[0]);
  return b.Build();
}

TEST(OnnxExportTest, AttentionExportsWithItsCausalMask) {
  const Graph g = Build(Attention());
  absl::StatusOr<OnnxExport> e = ExportOnnx(g, ValuesOf(g));
  ASSERT_TRUE(e.ok()) << e.status();
  const onnx::GraphProto& og = e->model.graph();
  for (const char* op : {"Gather", "LayerNormalization", "Split", "Constant", "Softmax"}) {
    EXPECT_NE(FindOnnxNode(og, op), nullptr) << op;
  }
  EXPECT_EQ(og.input(0).type().tensor_type().shape().dim(0).dim_param(), "batch");
  EXPECT_EQ(og.input(0).type().tensor_type().elem_type(), onnx::TensorProto::INT64);
  absl::StatusOr<ImportedModel> back = Reimport(*e, 3);
  ASSERT_TRUE(back.ok()) << back.status();
  std::map<std::string, int> counts;
  for (const std::string& op : Ops(back->graph)) ++counts[op];
  EXPECT_EQ(counts["Embedding"], 1);
  EXPECT_EQ(counts["LayerNorm"], 1);
  EXPECT_EQ(counts["Split"], 1);
  EXPECT_EQ(counts["Softmax"], 1);
  EXPECT_EQ(counts["MatMul"], 3);
  const Graph h = Build(back->graph);
  EXPECT_EQ(h.tensor(h.FindTensor("wte.weight")).role, proto::ROLE_PARAMETER);
  EXPECT_EQ(h.tensor(h.loss()).shape, Shape{});
}

TEST(OnnxExportTest, EveryOpButTheLossesHasAnOnnxForm) {
  std::vector<std::string> ops;
  for (const OpSchema* op : AllOps()) {
    const bool loss = op->name == "SoftmaxCrossEntropy" || op->name == "PixelSoftmaxCrossEntropy";
    if (!loss) ops.push_back(op->name);
  }
  EXPECT_THAT(OnnxExportableOps(), ElementsAreArray(ops))
      << "an op joined Headroom's op set without an ONNX export (graph/onnx_export.cc)";
}

// A segmentation head: a transposed convolution, a group norm of 2 groups and one of a group
// per channel, resizes by size and by scale (nearest and bilinear), then reductions over the
// channels and the width, kept and dropped.
proto::GraphDef SegmentationOps() {
  GraphBuilder b("segmentation_ops");
  std::string x = b.Input("x", {2, 4, 5, 5});
  x = b.Op("ConvTranspose2D", "up", {x, b.Parameter("up.weight", {4, 6, 3, 3})},
           {{"stride", IntsAttr({2, 2})},
            {"padding", IntsAttr({1, 1})},
            {"output_padding", IntsAttr({1, 1})}});  // [2, 6, 10, 10]
  x = b.Op("GroupNorm", "gn", {x, b.Parameter("gn.weight", {6}), b.Parameter("gn.bias", {6})},
           {{"num_groups", IntAttr(2)}, {"epsilon", FloatAttr(1e-3)}});
  x = b.Op("GroupNorm", "in", {x, b.Parameter("in.weight", {6}), b.Parameter("in.bias", {6})},
           {{"num_groups", IntAttr(6)}});
  x = b.Op("Resize", "down", {x}, {{"size", IntsAttr({7, 7})}});
  x = b.Op("Resize", "up2", {x},
           {{"size", IntsAttr({10, 10})},
            {"mode", StringAttr("bilinear")},
            {"scale_h", FloatAttr(1.5)},
            {"scale_w", FloatAttr(1.5)}});
  const std::string channels_max = b.Op("ReduceMax", "cmax", {x}, {{"axes", IntsAttr({1})}});
  const std::string channels_min = b.Op("ReduceMin", "cmin", {x}, {{"axes", IntsAttr({1})}});
  x = b.Op("Add", "span", {b.Op("Sub", "range", {channels_max, channels_min}), x});
  x = b.Op("ReduceSum", "rows", {x}, {{"axes", IntsAttr({3})}, {"keepdims", BoolAttr(false)}});
  x = b.Op("Reshape", "flat", {x}, {{"shape", IntsAttr({2, 60})}});
  x = b.Linear("fc", x, 60, 3);
  const std::string labels = b.Label("labels", {2});
  b.SetLoss(b.AddNode("SoftmaxCrossEntropy", "loss", {x, labels}, {"loss"})[0]);
  return b.Build();
}

TEST(OnnxExportTest, SegmentationOpsExportAndImportBack) {
  const Graph g = Build(SegmentationOps());
  absl::StatusOr<OnnxExport> e = ExportOnnx(g, ValuesOf(g));
  ASSERT_TRUE(e.ok()) << e.status();
  const onnx::GraphProto& og = e->model.graph();
  const onnx::NodeProto* up = FindOnnxNode(og, "ConvTranspose");
  ASSERT_NE(up, nullptr);
  EXPECT_THAT(Attr(*up, "output_padding")->ints(), ElementsAre(1, 1));
  EXPECT_THAT(Attr(*up, "pads")->ints(), ElementsAre(1, 1, 1, 1));
  // The 2-group norm as torch writes it at opset 17, the per-channel one as itself.
  int instance_norms = 0;
  for (const onnx::NodeProto& n : og.node())
    instance_norms += n.op_type() == "InstanceNormalization";
  EXPECT_EQ(instance_norms, 2);
  // Resize by size reads the batch and channels from the input's shape; by scale, the scales.
  std::vector<const onnx::NodeProto*> resizes;
  for (const onnx::NodeProto& n : og.node()) {
    if (n.op_type() == "Resize") resizes.push_back(&n);
  }
  ASSERT_EQ(resizes.size(), 2u);
  EXPECT_EQ(Attr(*resizes[0], "coordinate_transformation_mode")->s(), "asymmetric");
  EXPECT_EQ(Attr(*resizes[0], "nearest_mode")->s(), "floor");
  ASSERT_EQ(resizes[0]->input_size(), 4);
  EXPECT_EQ(resizes[0]->input(2), "");
  EXPECT_EQ(Attr(*resizes[1], "mode")->s(), "linear");
  EXPECT_EQ(Attr(*resizes[1], "coordinate_transformation_mode")->s(), "half_pixel");
  ASSERT_EQ(resizes[1]->input_size(), 3);
  EXPECT_NE(FindOnnxNode(og, "Shape"), nullptr);
  EXPECT_THAT(Attr(*FindOnnxNode(og, "ReduceMax"), "axes")->ints(), ElementsAre(1));
  EXPECT_EQ(FindOnnxNode(og, "ReduceSum")->input_size(), 2) << "axes an input from opset 13";
  EXPECT_EQ(Attr(*FindOnnxNode(og, "ReduceSum"), "keepdims")->i(), 0);
  EXPECT_EQ(e->model.graph().output(0).type().tensor_type().shape().dim(0).dim_param(), "batch");

  // Back at another batch: the same ops (the 2-group norm as its parts), the attributes of the
  // ones that come back one to one.
  absl::StatusOr<ImportedModel> back = Reimport(*e, 3);
  ASSERT_TRUE(back.ok()) << back.status();
  std::map<std::string, int> counts;
  for (const std::string& op : Ops(back->graph)) ++counts[op];
  EXPECT_EQ(counts["ConvTranspose2D"], 1);
  EXPECT_EQ(counts["GroupNorm"], 2);
  EXPECT_EQ(counts["Resize"], 2);
  EXPECT_EQ(counts["ReduceMax"], 1);
  EXPECT_EQ(counts["ReduceMin"], 1);
  EXPECT_EQ(counts["ReduceSum"], 1);
  const Graph h = Build(back->graph);
  EXPECT_EQ(h.tensor(h.FindTensor("x")).shape, (Shape{3, 4, 5, 5}));
  for (const char* name : {"up", "in", "down", "up2", "cmax", "rows"}) {
    const NodeId id = h.FindNode(name);
    ASSERT_NE(id, -1) << name;
    for (const auto& [attr, value] : g.node(g.FindNode(name)).attrs.values()) {
      EXPECT_EQ(Canonical(h.node(id), attr), Canonical(g.node(g.FindNode(name)), attr))
          << name << "." << attr;
    }
  }
}

TEST(OnnxExportTest, AReductionOverTheBatchNeedsAFixedBatch) {
  GraphBuilder b("batch_sum");
  const std::string x = b.Input("x", {2, 3});
  const std::string total = b.Op("ReduceSum", "total", {x}, {{"axes", IntsAttr({0})}});
  const std::string logits = b.Op("Add", "shift", {x, total});
  const std::string labels = b.Label("labels", {2});
  b.SetLoss(b.AddNode("SoftmaxCrossEntropy", "loss", {logits, labels}, {"loss"})[0]);
  const Graph g = Build(b.Build());
  absl::Status s = ExportOnnx(g, ValuesOf(g)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("node 'total' (ReduceSum): reduces over the batch axis"));
  OnnxExportOptions fixed;
  fixed.dynamic_batch = false;
  EXPECT_TRUE(ExportOnnx(g, ValuesOf(g), fixed).ok());
}

TEST(OnnxExportTest, AnInputWithoutTheBatchKeepsItsShapeWhenReadBack) {
  // Token and position embeddings, as the zoo's transformer: `positions` [T] has no batch.
  GraphBuilder b("positions");
  const std::string ids = b.Input("ids", {2, 4}, proto::DTYPE_INT64);
  const std::string positions = b.Input("positions", {4}, proto::DTYPE_INT64);
  const std::string tokens = b.Op("Embedding", "wte", {ids, b.Parameter("wte.weight", {10, 6})});
  const std::string where =
      b.Op("Embedding", "wpe", {positions, b.Parameter("wpe.weight", {4, 6})});
  std::string h = b.Op("Add", "embed", {tokens, where});
  h = b.Op("MatMul", "head", {h, "wte.weight"}, {{"transpose_b", BoolAttr(true)}});
  const std::string labels = b.Label("labels", {2, 4});
  b.SetLoss(b.AddNode("SoftmaxCrossEntropy", "loss", {h, labels}, {"loss"})[0]);
  const Graph g = Build(b.Build());
  absl::StatusOr<OnnxExport> e = ExportOnnx(g, ValuesOf(g));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->model.graph().input(0).type().tensor_type().shape().dim(0).dim_param(), "batch");
  EXPECT_EQ(e->model.graph().input(1).type().tensor_type().shape().dim(0).dim_value(), 4);
  // Read back at batch 3: the ids take it, the positions keep their 4.
  absl::StatusOr<ImportedModel> back = Reimport(*e, 3);
  ASSERT_TRUE(back.ok()) << back.status();
  const Graph h3 = Build(back->graph);
  EXPECT_EQ(h3.tensor(h3.FindTensor("ids")).shape, (Shape{3, 4}));
  EXPECT_EQ(h3.tensor(h3.FindTensor("positions")).shape, (Shape{4}));
  EXPECT_EQ(h3.tensor(h3.loss()).shape, Shape{});
}

TEST(OnnxExportTest, MissingAndMismatchedValuesAreNamed) {
  const Graph g = Build(SmallCnn());
  std::vector<proto::TensorValue> values = ValuesOf(g);
  std::vector<proto::TensorValue> missing(values.begin() + 1, values.end());
  absl::Status s = ExportOnnx(g, missing).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("no value for 1 parameter(s) and buffer(s)"));
  EXPECT_THAT(s.message(), HasSubstr(values[0].name()));

  std::vector<proto::TensorValue> reshaped = values;
  reshaped[0].set_shape(0, reshaped[0].shape(0) * 2);
  s = ExportOnnx(g, reshaped).status();
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("value '", values[0].name(), "'")));
  EXPECT_THAT(s.message(), HasSubstr("of another model"));

  std::vector<proto::TensorValue> short_data = values;
  short_data[1].mutable_data()->resize(4);
  s = ExportOnnx(g, short_data).status();
  EXPECT_THAT(s.message(), HasSubstr("holds 4 bytes"));

  // Optimizer state and tensors of other graphs are ignored.
  std::vector<proto::TensorValue> extra = values;
  extra.push_back(values[0]);
  extra.back().set_name("conv.weight.momentum");
  EXPECT_TRUE(ExportOnnx(g, extra).ok());
}

TEST(OnnxExportTest, ABatchFoldedIntoAnotherAxisNeedsAFixedBatch) {
  GraphBuilder b("fold");
  const std::string x = b.Input("x", {2, 3, 4});
  const std::string y = b.Op("Reshape", "fold", {x}, {{"shape", IntsAttr({6, 4})}});
  const std::string z = b.Op("Reshape", "unfold", {y}, {{"shape", IntsAttr({2, 12})}});
  const std::string logits = b.Linear("fc", z, 12, 3);
  const std::string labels = b.Label("labels", {2});
  b.SetLoss(b.AddNode("SoftmaxCrossEntropy", "loss", {logits, labels}, {"loss"})[0]);
  const Graph g = Build(b.Build());
  absl::Status s = ExportOnnx(g, ValuesOf(g)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("node 'fold' (Reshape)"));
  EXPECT_THAT(s.message(), HasSubstr("export with a fixed batch"));

  OnnxExportOptions fixed;
  fixed.dynamic_batch = false;
  absl::StatusOr<OnnxExport> e = ExportOnnx(g, ValuesOf(g), fixed);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->model.graph().input(0).type().tensor_type().shape().dim(0).dim_value(), 2);
  absl::StatusOr<ImportedModel> back = Reimport(*e, 0);
  ASSERT_TRUE(back.ok()) << back.status();
}

TEST(OnnxExportTest, TheCheckerRefusesABrokenModel) {
  const Graph g = Build(SmallCnn());
  absl::StatusOr<OnnxExport> e = ExportOnnx(g, ValuesOf(g));
  ASSERT_TRUE(e.ok()) << e.status();
  onnx::ModelProto broken = e->model;
  broken.mutable_graph()->mutable_node(0)->set_input(1, "no_such_value");
  absl::Status s = CheckOnnxModel(broken);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("no_such_value"));
}

}  // namespace
}  // namespace headroom::graph
