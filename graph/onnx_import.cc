#include "graph/onnx_import.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/node_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "graph/graph.h"
#include "graph/graph_builder.h"
#include "graph/onnx_export_mode.h"
#include "graph/onnx_fold.h"
#include "graph/onnx_patterns.h"
#include "graph/onnx_rebatch.h"
#include "graph/onnx_tensor.h"
#include "onnx/onnx_pb.h"
#include "util/status_macros.h"

namespace headroom::graph {
namespace {

using absl::InvalidArgumentError;
using absl::StrCat;

constexpr int64_t kMinOpset = 7;
constexpr int64_t kMaxOpset = 18;

// A value of the ONNX graph as the importer knows it.
struct Value {
  // The Headroom tensor that holds it; empty while it is only a constant, a pending pad, a
  // lazy transpose or unavailable.
  std::string tensor;
  Shape shape;
  proto::DType dtype = proto::DTYPE_UNSPECIFIED;
  // Its value, when known at import (initializers, Constant nodes, what was folded).
  std::shared_ptr<const OnnxTensor> constant;
  // A float initializer of more than one element: a parameter unless its reader asks for a
  // buffer (batch norm's running statistics). Never folded.
  bool weight = false;
  // A Pad's output not made yet: `padded` (a Headroom tensor) with zeros [top, left, bottom,
  // right] around its last two dims, for the pool or convolution that reads it.
  std::string padded;
  std::vector<int64_t> pad;
  // The [1, 0] transpose of this 2-D weight, made only if something but a MatMul reads it.
  std::string transpose_of;
  // Why it cannot be read: an output Headroom does not produce (batch norm's running
  // statistics in training mode, dropout's mask, max pool's indices).
  std::string unavailable;
  // Re-batching a fixed-batch export (Importer::rebatch_): where the batch is in this
  // computed value; `batch_lost` when an op moved it where no axis holds it whole.
  BatchAxis batch;
  bool batch_lost = false;
  // A known value computed from a Shape (so already at the imported batch), not a literal.
  bool from_shape = false;
};

// Returns the product of `shape`'s dims.
int64_t ElementsOf(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Returns the positive form of `axis` for a tensor of `rank` dims.
absl::StatusOr<int64_t> NormalAxis(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank) {
    return InvalidArgumentError(StrCat("axis ", axis, " is outside rank ", rank));
  }
  return axis < 0 ? axis + rank : axis;
}

// Imports one model. Call Run() once.
class Importer {
 public:
  Importer(const onnx::ModelProto& model, const OnnxImportOptions& options,
           std::string external_dir)
      : model_(model), graph_(model.graph()), options_(options),
        external_dir_(std::move(external_dir)) {}

  absl::StatusOr<ImportedModel> Run() {
    out_.graph.set_name(!options_.name.empty() ? options_.name
                        : !graph_.name().empty() ? graph_.name()
                                                 : "onnx");
    RETURN_IF_ERROR(ReadOpset());
    RETURN_IF_ERROR(CheckExportMode());
    RETURN_IF_ERROR(CheckOps());
    RETURN_IF_ERROR(CheckArity());
    RETURN_IF_ERROR(ReadInitializers());
    RETURN_IF_ERROR(DeclareInputs());
    RETURN_IF_ERROR(ImportNodes());
    RETURN_IF_ERROR(AttachLoss());
    out_.stats.onnx_nodes = graph_.node_size();
    return std::move(out_);
  }

  static const absl::flat_hash_map<std::string, absl::Status (Importer::*)(const onnx::NodeProto&)>&
  Converters();

 private:
  using Converter = absl::Status (Importer::*)(const onnx::NodeProto&);

  // ---- Phases ---------------------------------------------------------------------------

  absl::Status ReadOpset() {
    for (const onnx::OperatorSetIdProto& id : model_.opset_import()) {
      if (id.domain().empty() || id.domain() == "ai.onnx") opset_ = id.version();
    }
    if (opset_ < kMinOpset || opset_ > kMaxOpset) {
      return InvalidArgumentError(StrCat("ONNX model: opset ", opset_, " of the default domain; ",
                                         "Headroom imports opsets ", kMinOpset, " to ", kMaxOpset,
                                         " (re-export with opset_version=17)"));
    }
    out_.stats.opset = opset_;
    return absl::OkStatus();
  }

  // An export of the inference graph is named in warnings, or refused when strict.
  absl::Status CheckExportMode() {
    const OnnxExportMode mode = InspectOnnxExportMode(graph_, opset_);
    out_.inference_export = mode.inference();
    out_.warnings = mode.Warnings(out_.graph.name());
    if (out_.inference_export && options_.strict_training) {
      return absl::FailedPreconditionError(
          StrCat(absl::StrJoin(out_.warnings, "; "), " (refused: --strict-training)"));
    }
    return absl::OkStatus();
  }

  // Every op the importer does not know, with counts, in one error.
  absl::Status CheckOps() {
    std::map<std::string, int> unknown;
    for (const onnx::NodeProto& node : graph_.node()) {
      const bool default_domain = node.domain().empty() || node.domain() == "ai.onnx";
      if (!default_domain) {
        ++unknown[StrCat(node.domain(), "::", node.op_type())];
      } else if (!Converters().contains(node.op_type()) && !IsFoldableOnnxOp(node.op_type()) &&
                 node.op_type() != "Constant") {
        ++unknown[node.op_type()];
      }
    }
    if (unknown.empty()) return absl::OkStatus();
    std::vector<std::string> parts;
    int total = 0;
    for (const auto& [op, count] : unknown) {
      parts.push_back(StrCat(op, " x", count));
      total += count;
    }
    return InvalidArgumentError(StrCat("ONNX model '", out_.graph.name(), "' uses ", unknown.size(),
                                       " op type(s) Headroom cannot import (", total,
                                       " nodes): ", absl::StrJoin(parts, ", ")));
  }

  // Every node has the inputs its op cannot do without (ONNX's operator schemas, opsets 13
  // to 17) and an output, so no converter or pattern reads past a node's lists.
  absl::Status CheckArity() const {
    static const auto* required = new absl::flat_hash_map<std::string, int>{
        {"Add", 2},
        {"BatchNormalization", 5},
        {"Constant", 0},
        {"Conv", 2},
        {"ConvTranspose", 2},
        {"Div", 2},
        {"Equal", 2},
        {"Expand", 2},
        {"Gather", 2},
        {"Gemm", 2},
        {"Greater", 2},
        {"InstanceNormalization", 3},
        {"LayerNormalization", 2},
        {"Less", 2},
        {"MatMul", 2},
        {"Mul", 2},
        {"Pad", 2},
        {"Pow", 2},
        {"PRelu", 2},
        {"Range", 3},
        {"Resize", 1},
        {"Reshape", 2},
        {"Slice", 3},
        {"Sub", 2},
        {"Tile", 2},
        {"Where", 3},
    };
    for (const onnx::NodeProto& node : graph_.node()) {
      auto it = required->find(node.op_type());
      const int inputs = it == required->end() ? 1 : it->second;
      if (node.input_size() < inputs || node.output_size() < 1 || node.output(0).empty()) {
        return InvalidArgumentError(StrCat(
            "ONNX node '", node.name(), "' (", node.op_type(), ") has ", node.input_size(),
            " input(s) and ", node.output_size(), " output(s); the op needs at least ", inputs,
            " input(s) and a named output"));
      }
    }
    return absl::OkStatus();
  }

  // Returns the elements of an initializer's shape; InvalidArgument for a negative dimension
  // or more than 2^48 elements (checked before each product, so none wraps).
  static absl::StatusOr<int64_t> ElementCount(const onnx::TensorProto& init) {
    constexpr int64_t kMaxElements = int64_t{1} << 48;
    int64_t n = 1;
    for (int64_t d : init.dims()) {
      if (d < 0 || (d > 0 && n > kMaxElements / d)) {
        return InvalidArgumentError(StrCat("ONNX initializer '", init.name(), "': dimension ", d,
                                           " is negative or makes more than 2^48 elements"));
      }
      n *= d;
    }
    return n;
  }

  absl::Status ReadInitializers() {
    for (const onnx::TensorProto& init : graph_.initializer()) {
      // Float initializers of more than one element are weights; read their bytes only when
      // the caller keeps values.
      ASSIGN_OR_RETURN(const int64_t n, ElementCount(init));
      const bool floating = init.data_type() == onnx::TensorProto::FLOAT ||
                            init.data_type() == onnx::TensorProto::FLOAT16 ||
                            init.data_type() == onnx::TensorProto::BFLOAT16 ||
                            init.data_type() == onnx::TensorProto::DOUBLE;
      const bool weight = floating && n > 1;
      ASSIGN_OR_RETURN(OnnxTensor t, OnnxTensor::FromProto(init, external_dir_,
                                                           !weight || options_.keep_values));
      Value v;
      v.weight = weight;
      v.shape = t.shape();
      v.dtype = HeadroomDType(t.type()).value_or(proto::DTYPE_UNSPECIFIED);
      v.constant = std::make_shared<const OnnxTensor>(std::move(t));
      values_[init.name()] = std::move(v);
    }
    return absl::OkStatus();
  }

  // Whether the first dimension of `input` (a tensor) is given as a number.
  static bool FixedFirstDim(const onnx::ValueInfoProto& input) {
    const onnx::TensorShapeProto& shape = input.type().tensor_type().shape();
    return shape.dim_size() > 0 && shape.dim(0).has_dim_value() && shape.dim(0).dim_value() > 0;
  }

  // The data inputs: every graph input that no initializer gives a value. The first
  // dimension is the batch (--batch); but where some input's batch is symbolic (an export
  // with dynamic axes), an input whose first dimension is a number has no batch (a
  // transformer's positions) and keeps it.
  absl::Status DeclareInputs() {
    bool symbolic = false;
    for (const onnx::ValueInfoProto& input : graph_.input()) {
      if (values_.contains(input.name()) || !input.type().has_tensor_type()) continue;
      if (input.type().tensor_type().shape().dim_size() > 0 && !FixedFirstDim(input)) {
        symbolic = true;
      }
    }
    for (const onnx::ValueInfoProto& input : graph_.input()) {
      if (values_.contains(input.name())) continue;
      if (!input.type().has_tensor_type()) {
        return InvalidArgumentError(StrCat("ONNX input '", input.name(), "' is not a tensor"));
      }
      const onnx::TypeProto::Tensor& type = input.type().tensor_type();
      ASSIGN_OR_RETURN(proto::DType dtype, HeadroomDType(type.elem_type()));
      const bool unbatched = symbolic && FixedFirstDim(input);
      Shape shape;
      for (int d = 0; d < type.shape().dim_size(); ++d) {
        const onnx::TensorShapeProto::Dimension& dim = type.shape().dim(d);
        const bool numeric = dim.has_dim_value() && dim.dim_value() > 0;
        if (unbatched && d == 0) {
          shape.push_back(dim.dim_value());
          continue;
        }
        if (d == 0 && numeric && options_.batch > 0 &&
            dim.dim_value() != static_cast<int64_t>(options_.batch)) {
          // A fixed-batch export imported at another batch: its baked shapes are rewritten.
          if (rebatch_ && dim.dim_value() != export_batch_) {
            return InvalidArgumentError(
                StrCat("ONNX input '", input.name(), "' has a fixed batch of ", dim.dim_value(),
                       ", input '", first_input_, "' of ", export_batch_,
                       "; re-batching needs one export batch (export with dynamic_axes)"));
          }
          rebatch_ = true;
          export_batch_ = dim.dim_value();
          if (first_input_.empty()) first_input_ = input.name();
        }
        if (d == 0 && options_.batch > 0) {
          shape.push_back(static_cast<int64_t>(options_.batch));
        } else if (numeric) {
          shape.push_back(dim.dim_value());
        } else {
          return InvalidArgumentError(StrCat(
              "ONNX input '", input.name(), "' dim ", d, " is '",
              dim.has_dim_param() ? dim.dim_param() : "unknown", "'",
              d == 0 ? ": give the batch size (--batch N)"
                     : ": only the first (batch) dimension may be symbolic"));
        }
      }
      const std::string name = NewLeaf(input.name(), shape, dtype, proto::ROLE_INPUT);
      Value v;
      v.tensor = name;
      v.shape = shape;
      v.dtype = dtype;
      if (!unbatched) v.batch = BatchAxis{0, 1, 1};
      values_[input.name()] = std::move(v);
    }
    return absl::OkStatus();
  }

  absl::Status ImportNodes() {
    std::vector<const OnnxFusion*> anchored(graph_.node_size(), nullptr);
    std::vector<bool> covered(graph_.node_size(), false);
    const std::vector<OnnxFusion> fusions = FindOnnxFusions(graph_);
    for (const OnnxFusion& f : fusions) {
      anchored[f.nodes.front()] = &f;
      for (int n : f.nodes) covered[n] = true;
    }
    for (const onnx::NodeProto& node : graph_.node()) {
      for (const std::string& in : node.input()) ++readers_[in];
    }
    for (const onnx::ValueInfoProto& out : graph_.output()) ++readers_[out.name()];

    for (int i = 0; i < graph_.node_size(); ++i) {
      const onnx::NodeProto& node = graph_.node(i);
      if (anchored[i] != nullptr) {
        RETURN_IF_ERROR(EmitFusion(*anchored[i]));
        out_.stats.fused += static_cast<int>(anchored[i]->nodes.size()) - 1;
        // A fused op (GELU, LayerNorm) keeps its input's shape, and so its batch.
        Value& out = values_.at(anchored[i]->output);
        const Value& in = values_.at(anchored[i]->input);
        out.batch = in.batch;
        out.batch_lost = in.batch_lost;
        continue;
      }
      if (covered[i]) continue;
      absl::Status s = ImportNode(node);
      if (s.ok() && rebatch_) s = PropagateBatch(node);
      if (!s.ok() && rebatch_) {
        return absl::Status(s.code(), StrCat(s.message(), RebatchHint()));
      }
      RETURN_IF_ERROR(s);
    }
    return absl::OkStatus();
  }

  // Returns what a message adds while re-batching a fixed-batch export.
  std::string RebatchHint() const {
    return StrCat(" (the model was exported with a fixed batch of ", export_batch_,
                  " and is imported at --batch ", options_.batch,
                  "; where its shape arithmetic holds the export batch, export with "
                  "dynamic_axes={'",
                  first_input_, "': {0: 'batch'}} so that the batch is symbolic)");
  }

  // Returns an error naming `node` when it would combine different samples: a product
  // contracting over the batch, or operands holding the batch on different axes (a wrong
  // guess of where a batch of 1 went shows up here).
  absl::Status CheckSamplesApart(const onnx::NodeProto& node) {
    const std::string& op = node.op_type();
    struct Operand {
      std::string name;
      int64_t rank;
      BatchAxis batch;
    };
    std::vector<Operand> batched;
    int64_t rank = 0;
    for (const std::string& name : node.input()) {
      auto it = values_.find(name);
      if (name.empty() || it == values_.end()) continue;
      rank = std::max<int64_t>(rank, it->second.shape.size());
      if (it->second.batch.has_batch()) {
        batched.push_back({name, static_cast<int64_t>(it->second.shape.size()), it->second.batch});
      }
    }
    auto mixes = [&](const std::string& why) {
      return Fail(node, StrCat(why, ", which mixes samples"));
    };
    if (op == "MatMul" || op == "Gemm") {
      const bool gemm = op == "Gemm";
      for (const Operand& o : batched) {
        const bool is_b = o.name == node.input(1);
        const int64_t contraction =
            !is_b ? o.rank - 1
                  : (gemm ? (OnnxIntAttr(node, "transB", 0) != 0 ? 1 : 0) : o.rank - 2);
        if (o.batch.axis == contraction) {
          return mixes(StrCat("it contracts over the batch axis of '", o.name, "' (",
                              o.batch.DebugString(), ")"));
        }
      }
    } else if (op != "Add" && op != "Sub" && op != "Mul" && op != "Div" && op != "Where" &&
               op != "Concat") {
      return absl::OkStatus();
    }
    for (size_t k = 1; k < batched.size(); ++k) {
      const Operand &a = batched[0], &b = batched[k];
      if (a.batch.axis + rank - a.rank != b.batch.axis + rank - b.rank ||
          a.batch.outer != b.batch.outer || a.batch.inner != b.batch.inner) {
        return mixes(StrCat("it combines '", a.name, "' (batch on ", a.batch.DebugString(),
                            ") with '", b.name, "' (batch on ", b.batch.DebugString(), ")"));
      }
    }
    return absl::OkStatus();
  }

  // Sets where the batch is in each computed output of `node` (after its converter ran),
  // from its first input that holds the batch: moved by a Transpose's permutation, followed
  // through a reshape's layout, kept where the output has the input's dim at the same axis,
  // lost otherwise (an error only if a literal shape must later be re-batched through it).
  absl::Status PropagateBatch(const onnx::NodeProto& node) {
    const Value* in = nullptr;
    for (const std::string& name : node.input()) {
      auto it = values_.find(name);
      if (it != values_.end() && (it->second.batch.has_batch() || it->second.batch_lost)) {
        in = &it->second;
        break;
      }
    }
    if (in == nullptr) return absl::OkStatus();
    RETURN_IF_ERROR(CheckSamplesApart(node));
    const std::string& op = node.op_type();
    const BatchAxis b = in->batch;
    const Shape in_shape = in->shape;
    const bool lost = in->batch_lost;
    for (const std::string& name : node.output()) {
      auto it = values_.find(name);
      if (name.empty() || it == values_.end()) continue;
      Value& out = it->second;
      if (out.tensor.empty() && out.padded.empty()) continue;  // unavailable, or a constant
      if (out.batch.has_batch()) continue;  // set by the converter (or an alias of the input)
      out.batch_lost = true;
      if (lost) continue;
      if (op == "Transpose") {
        std::vector<int64_t> perm = OnnxIntsAttr(node, "perm");
        if (perm.empty()) {
          for (int64_t d = static_cast<int64_t>(in_shape.size()) - 1; d >= 0; --d) {
            perm.push_back(d);
          }
        }
        for (size_t p = 0; p < perm.size(); ++p) {
          if (perm[p] == b.axis) out.batch = BatchAxis{static_cast<int64_t>(p), b.outer, b.inner};
        }
      } else if (op == "Reshape" || op == "Flatten" || op == "Squeeze" || op == "Unsqueeze") {
        std::optional<BatchAxis> mapped =
            ReshapeBatchAxis(in_shape, b, static_cast<int64_t>(options_.batch), out.shape);
        if (!mapped) {
          return Fail(node,
                      StrCat("reshapes ", ShapeString(in_shape), " (batch on ", b.DebugString(),
                             ") to ", ShapeString(out.shape), ", which mixes samples"));
        }
        out.batch = *mapped;
      } else if (op == "Gather") {
        // The index's dims replace the gathered axis (swin's qkv[0] drops one before the batch).
        const int64_t rank = in_shape.size();
        int64_t g = OnnxIntAttr(node, "axis", 0);
        if (g < 0) g += rank;
        const int64_t index_rank = values_.at(node.input(1)).shape.size();
        const int64_t at = g < b.axis ? b.axis + index_rank - 1 : b.axis;
        if (g != b.axis && at < static_cast<int64_t>(out.shape.size()) &&
            out.shape[at] == in_shape[b.axis]) {
          out.batch = BatchAxis{at, b.outer, b.inner};
        }
      } else if (b.axis < static_cast<int64_t>(out.shape.size()) &&
                 out.shape[b.axis] == in_shape[b.axis]) {
        out.batch = b;
      }
      out.batch_lost = !out.batch.has_batch();
    }
    return absl::OkStatus();
  }

  absl::Status ImportNode(const onnx::NodeProto& node) {
    const std::string& op = node.op_type();
    if (op == "Constant") return FoldConstant(node);
    if (op == "Shape") return FoldShape(node);
    if (IsFoldableOnnxOp(op) && AllKnown(node)) return Fold(node);
    auto it = Converters().find(op);
    if (it == Converters().end()) {
      return Fail(node, "its inputs are computed tensors, which only the import-time "
                        "evaluation of this op can take; Headroom has no such op");
    }
    return (this->*(it->second))(node);
  }

  absl::Status AttachLoss() {
    if (options_.loss != "softmax_cross_entropy" && options_.loss != "pixel_cross_entropy") {
      return InvalidArgumentError(StrCat("loss '", options_.loss,
                                         "': Headroom attaches softmax_cross_entropy or "
                                         "pixel_cross_entropy"));
    }
    if (graph_.output_size() == 0) return InvalidArgumentError("ONNX model has no output");
    const std::string& output = graph_.output(0).name();
    ASSIGN_OR_RETURN(std::string logits, Tensor(output));
    const Value& v = values_.at(output);
    // A segmentation model's [N, C, H, W] logits take the loss per pixel, over the classes
    // on axis 1 (PyTorch's F.cross_entropy layout), as does any output under
    // pixel_cross_entropy.
    const bool pixel = options_.loss == "pixel_cross_entropy" || v.shape.size() == 4;
    if (v.shape.size() < (pixel ? 3u : 2u) || !IsFloating(v.dtype)) {
      return InvalidArgumentError(StrCat("ONNX output '", output, "' is ", DTypeName(v.dtype), " ",
                                         ShapeString(v.shape), "; ", options_.loss,
                                         " needs float logits ",
                                         pixel ? "[N, classes, ...]" : "[N, ..., classes]"));
    }
    if (rebatch_ && !(v.batch == BatchAxis{0, 1, 1})) {
      return InvalidArgumentError(
          StrCat("ONNX output '", output, "' ", ShapeString(v.shape), ": its batch is on ",
                 v.batch_lost ? std::string("no axis whole") : v.batch.DebugString(),
                 ", not the leading axis the loss reads", RebatchHint()));
    }
    const int64_t classes = pixel ? v.shape[1] : v.shape.back();
    if (options_.classes > 0 && static_cast<int64_t>(options_.classes) != classes) {
      return InvalidArgumentError(StrCat("--classes ", options_.classes, ", but ONNX output '",
                                         output, "' ", ShapeString(v.shape), " has ", classes));
    }
    Shape label_shape = v.shape;
    label_shape.erase(pixel ? label_shape.begin() + 1 : label_shape.end() - 1);
    const std::string labels =
        NewLeaf("labels", label_shape, proto::DTYPE_INT64, proto::ROLE_LABEL);
    std::vector<std::string> loss;
    if (pixel) {
      // Pixels labelled 255 (the void label of Pascal VOC and Cityscapes) are left out.
      ASSIGN_OR_RETURN(
          loss, Emit("PixelSoftmaxCrossEntropy", "loss", {logits, labels}, {UniqueTensor("loss")},
                     {{"ignore_index", IntAttr(kIgnoredPixelLabel)}}));
    } else {
      ASSIGN_OR_RETURN(
          loss, Emit("SoftmaxCrossEntropy", "loss", {logits, labels}, {UniqueTensor("loss")}));
    }
    out_.graph.set_loss(loss[0]);
    return absl::OkStatus();
  }

  // ---- Values ---------------------------------------------------------------------------

  absl::StatusOr<Value*> Find(const std::string& name) {
    auto it = values_.find(name);
    if (it == values_.end()) {
      return InvalidArgumentError(StrCat("value '", name, "' is read before anything writes it"));
    }
    return &it->second;
  }

  // Returns true if `name` is a value known now that may be folded (not a weight).
  bool Known(const std::string& name) const {
    auto it = values_.find(name);
    return it != values_.end() && it->second.constant != nullptr && !it->second.weight;
  }

  bool AllKnown(const onnx::NodeProto& node) const {
    for (const std::string& in : node.input()) {
      if (!in.empty() && !Known(in)) return false;
    }
    return node.input_size() > 0;
  }

  // Returns input i's known value; an error naming the node when it is computed.
  absl::StatusOr<std::shared_ptr<const OnnxTensor>> KnownInput(const onnx::NodeProto& node,
                                                               int i, const char* what) {
    if (i >= node.input_size() || node.input(i).empty() || !Known(node.input(i))) {
      return Fail(node, StrCat("its ", what, " (input ", i, ") must be known at import"));
    }
    return values_.at(node.input(i)).constant;
  }

  // Returns the Headroom tensor holding value `name`, making it first when it is a
  // constant (a leaf of `role`; default PARAMETER for weights, BUFFER for the rest) or a
  // lazy transpose.
  absl::StatusOr<std::string> Tensor(const std::string& name,
                                     proto::TensorRole role = proto::ROLE_UNSPECIFIED) {
    ASSIGN_OR_RETURN(Value * v, Find(name));
    if (!v->tensor.empty()) return v->tensor;
    if (!v->unavailable.empty()) {
      return InvalidArgumentError(StrCat("value '", name, "' is read, but it is ", v->unavailable));
    }
    if (!v->padded.empty()) {
      return InvalidArgumentError(StrCat("value '", name, "' is a zero Pad, which Headroom takes ",
                                         "only before a convolution or an average pool"));
    }
    if (!v->transpose_of.empty()) {
      ASSIGN_OR_RETURN(std::string source, Tensor(v->transpose_of));
      ASSIGN_OR_RETURN(std::vector<std::string> out,
                       Emit("Transpose", StrCat(name, ".transpose"), {source},
                            {UniqueTensor(name)}, {{"perm", IntsAttr({1, 0})}}));
      return v->tensor = out[0];
    }
    const OnnxTensor& c = *v->constant;
    if (role == proto::ROLE_UNSPECIFIED) role = v->weight ? proto::ROLE_PARAMETER : proto::ROLE_BUFFER;
    ASSIGN_OR_RETURN(proto::DType dtype, HeadroomDType(c.type()));
    Shape shape = c.shape();
    if (shape.empty()) shape = {1};  // Headroom's leaves are at least vectors
    v->tensor = NewLeaf(name, shape, dtype, role);
    if (role == proto::ROLE_PARAMETER) {
      ++out_.stats.parameters;
      out_.stats.parameter_elements += c.size();
    } else {
      ++out_.stats.buffers;
    }
    if (options_.keep_values) {
      ASSIGN_OR_RETURN(proto::TensorValue value, c.ToValue(v->tensor));
      value.clear_shape();
      for (int64_t d : shape) value.add_shape(d);
      out_.values.push_back(std::move(value));
    }
    return v->tensor;
  }

  // Returns a buffer holding `c` as float32 (a constant operand of arithmetic).
  absl::StatusOr<std::string> FloatConstant(const std::string& name, const OnnxTensor& c) {
    Value v;
    v.constant = std::make_shared<const OnnxTensor>(OnnxTensor::Floats(c.floats(), c.shape()));
    v.shape = c.shape();
    v.dtype = proto::DTYPE_FLOAT32;
    const std::string key = UniqueValue(name);
    values_[key] = std::move(v);
    return Tensor(key, proto::ROLE_BUFFER);
  }

  // Declares a leaf tensor; returns its (unique) name.
  std::string NewLeaf(const std::string& name, const Shape& shape, proto::DType dtype,
                      proto::TensorRole role) {
    const std::string unique = UniqueTensor(name);
    proto::TensorDef* t = out_.graph.add_tensors();
    t->set_name(unique);
    for (int64_t d : shape) t->add_shape(d);
    t->set_dtype(dtype);
    t->set_role(role);
    shapes_[unique] = {shape, dtype};
    return unique;
  }

  std::string UniqueTensor(const std::string& base) {
    std::string name = base;
    for (int k = 1; shapes_.contains(name) || reserved_.contains(name); ++k) {
      name = StrCat(base, ".", k);
    }
    reserved_.insert(name);
    return name;
  }

  std::string UniqueValue(const std::string& base) {
    std::string name = base;
    for (int k = 1; values_.contains(name); ++k) name = StrCat(base, ".", k);
    return name;
  }

  // Makes `output` stand for the same thing as `input` (an op that changes nothing).
  absl::Status Alias(const onnx::NodeProto& node, const std::string& input, int output = 0) {
    ASSIGN_OR_RETURN(Value * v, Find(input));
    values_[node.output(output)] = *v;
    ++out_.stats.elided;
    return absl::OkStatus();
  }

  void Unavailable(const onnx::NodeProto& node, int from, const std::string& why) {
    for (int k = from; k < node.output_size(); ++k) {
      if (node.output(k).empty()) continue;
      Value v;
      v.unavailable = why;
      values_[node.output(k)] = std::move(v);
    }
  }

  // ---- Folding --------------------------------------------------------------------------

  absl::Status FoldConstant(const onnx::NodeProto& node) {
    OnnxTensor t;
    if (const onnx::AttributeProto* a = FindOnnxAttr(node, "value")) {
      ASSIGN_OR_RETURN(t, OnnxTensor::FromProto(a->t(), external_dir_));
    } else if (const onnx::AttributeProto* a = FindOnnxAttr(node, "value_float")) {
      t = OnnxTensor::Floats({a->f()}, {});
    } else if (const onnx::AttributeProto* a = FindOnnxAttr(node, "value_floats")) {
      t = OnnxTensor::Floats(std::vector<double>(a->floats().begin(), a->floats().end()),
                             {a->floats_size()});
    } else if (const onnx::AttributeProto* a = FindOnnxAttr(node, "value_int")) {
      t = OnnxTensor::Ints({a->i()}, {});
    } else if (const onnx::AttributeProto* a = FindOnnxAttr(node, "value_ints")) {
      t = OnnxTensor::Ints(std::vector<int64_t>(a->ints().begin(), a->ints().end()),
                           {a->ints_size()});
    } else {
      return Fail(node, "has no value attribute Headroom reads (value, value_float(s), value_int(s))");
    }
    SetConstant(node.output(0), std::move(t));
    ++out_.stats.folded;
    return absl::OkStatus();
  }

  // Shape needs only the shape, which every value has.
  absl::Status FoldShape(const onnx::NodeProto& node) {
    ASSIGN_OR_RETURN(Value * x, Find(node.input(0)));
    const int64_t rank = x->shape.size();
    int64_t start = OnnxIntAttr(node, "start", 0), end = OnnxIntAttr(node, "end", rank);
    if (start < 0) start += rank;
    if (end < 0) end += rank;
    start = std::clamp<int64_t>(start, 0, rank);
    end = std::clamp<int64_t>(end, start, rank);
    std::vector<int64_t> dims(x->shape.begin() + start, x->shape.begin() + end);
    const int64_t n = dims.size();
    SetConstant(node.output(0), OnnxTensor::Ints(std::move(dims), {n}));
    values_.at(node.output(0)).from_shape = true;
    ++out_.stats.folded;
    return absl::OkStatus();
  }

  absl::Status Fold(const onnx::NodeProto& node) {
    std::vector<const OnnxTensor*> inputs;
    for (const std::string& in : node.input()) {
      inputs.push_back(in.empty() ? nullptr : values_.at(in).constant.get());
    }
    bool from_shape = false;
    for (const std::string& in : node.input()) {
      if (!in.empty()) from_shape |= values_.at(in).from_shape;
    }
    ASSIGN_OR_RETURN(std::vector<OnnxTensor> outputs, FoldOnnxNode(node, inputs, opset_));
    for (size_t k = 0; k < outputs.size() && k < static_cast<size_t>(node.output_size()); ++k) {
      SetConstant(node.output(k), std::move(outputs[k]));
      values_.at(node.output(k)).from_shape = from_shape;
    }
    ++out_.stats.folded;
    return absl::OkStatus();
  }

  void SetConstant(const std::string& name, OnnxTensor t) {
    Value v;
    v.shape = t.shape();
    v.dtype = HeadroomDType(t.type()).value_or(proto::DTYPE_UNSPECIFIED);
    v.constant = std::make_shared<const OnnxTensor>(std::move(t));
    values_[name] = std::move(v);
  }

  // ---- Emitting Headroom nodes ----------------------------------------------------------

  // Adds a Headroom node reading `inputs` (Headroom tensors) and writing `outputs` (new
  // tensor names); returns the outputs. Shapes come from the op set's inference.
  absl::StatusOr<std::vector<std::string>> Emit(const std::string& op, const std::string& name,
                                                const std::vector<std::string>& inputs,
                                                const std::vector<std::string>& outputs,
                                                const AttrList& attrs = {}) {
    proto::NodeDef def;
    std::string node_name = name;
    for (int k = 1; node_names_.contains(node_name); ++k) node_name = StrCat(name, ".", k);
    def.set_name(node_name);
    def.set_op(op);
    std::vector<Shape> shapes;
    std::vector<proto::DType> dtypes;
    for (const std::string& in : inputs) {
      def.add_inputs(in);
      const auto& [shape, dtype] = shapes_.at(in);
      shapes.push_back(shape);
      dtypes.push_back(dtype);
    }
    for (const std::string& out : outputs) def.add_outputs(out);
    for (const auto& [key, value] : attrs) (*def.mutable_attrs())[key] = value;
    ASSIGN_OR_RETURN(std::vector<InferredOutput> inferred, InferNodeOutputs(def, shapes, dtypes));
    for (size_t k = 0; k < outputs.size(); ++k) {
      shapes_[outputs[k]] = {inferred[k].shape, inferred[k].dtype};
    }
    node_names_.insert(node_name);
    *out_.graph.add_nodes() = std::move(def);
    ++out_.stats.headroom_nodes;
    return outputs;
  }

  // Emits `op` for ONNX `node`, its outputs bound to the node's first outputs.
  absl::Status EmitFor(const onnx::NodeProto& node, const std::string& op,
                       const std::vector<std::string>& inputs, const AttrList& attrs = {},
                       int num_outputs = 1) {
    std::vector<std::string> outputs;
    for (int k = 0; k < num_outputs; ++k) outputs.push_back(UniqueTensor(node.output(k)));
    // An error names the Headroom node, which carries the ONNX node's name.
    ASSIGN_OR_RETURN(std::vector<std::string> made, Emit(op, NodeName(node), inputs, outputs, attrs));
    for (int k = 0; k < num_outputs; ++k) Bind(node.output(k), made[k]);
    return absl::OkStatus();
  }

  void Bind(const std::string& value, const std::string& tensor) {
    Value v;
    v.tensor = tensor;
    std::tie(v.shape, v.dtype) = shapes_.at(tensor);
    values_[value] = std::move(v);
  }

  std::string NodeName(const onnx::NodeProto& node) const {
    return node.name().empty() ? StrCat(node.op_type(), ":", node.output(0)) : node.name();
  }

  absl::Status Fail(const onnx::NodeProto& node, absl::string_view message) const {
    return InvalidArgumentError(StrCat("ONNX ", OnnxNodeLabel(node), ": ", message));
  }

  // ---- Converters (one per ONNX op; each reads its inputs and binds its outputs) --------

  absl::Status EmitFusion(const OnnxFusion& f) {
    ASSIGN_OR_RETURN(std::string x, Tensor(f.input));
    const std::string name = StrCat(f.output, ".", f.op);
    std::vector<std::string> inputs = {x};
    AttrList attrs;
    if (f.op == "GELU") {
      attrs = {{"approximate", StringAttr(f.approximate)}};
    } else {  // LayerNorm over the last axis: its weight and bias, ones and zeros if absent
      const Shape& xs = shapes_.at(x).first;
      const int64_t dim = xs.back();
      for (const auto& [given, fill] : {std::pair{f.weight, 1.0}, std::pair{f.bias, 0.0}}) {
        if (!given.empty()) {
          ASSIGN_OR_RETURN(std::string t, Tensor(given, proto::ROLE_PARAMETER));
          inputs.push_back(t);
        } else {
          ASSIGN_OR_RETURN(std::string t, FloatConstant(StrCat(name, fill == 1.0 ? ".ones" : ".zeros"),
                                                        OnnxTensor::Floats(std::vector<double>(dim, fill), {dim})));
          inputs.push_back(t);
        }
      }
      attrs = {{"epsilon", FloatAttr(f.epsilon)}};
    }
    ASSIGN_OR_RETURN(std::vector<std::string> out,
                     Emit(f.op, name, inputs, {UniqueTensor(f.output)}, attrs));
    Bind(f.output, out[0]);
    return absl::OkStatus();
  }

  // Returns the ints attribute `name` of `n` (`fallback` when absent); an error naming the
  // node when it does not hold `length` values.
  absl::StatusOr<std::vector<int64_t>> IntsOfLength(const onnx::NodeProto& n,
                                                    const std::string& name, size_t length,
                                                    std::vector<int64_t> fallback) const {
    std::vector<int64_t> values = OnnxIntsAttr(n, name, std::move(fallback));
    if (values.size() != length) {
      return Fail(n, StrCat("attribute '", name, "' holds ", values.size(), " value(s), not ",
                            length, " (2-D windows only)"));
    }
    return values;
  }

  absl::Status Conv(const onnx::NodeProto& n) {
    ASSIGN_OR_RETURN(Value * x, Find(n.input(0)));
    if (x->shape.size() != 4) {
      return Fail(n, StrCat("input ", ShapeString(x->shape), ": Headroom has 2-D convolutions only"));
    }
    ASSIGN_OR_RETURN(std::vector<int64_t> pads, IntsOfLength(n, "pads", 4, {0, 0, 0, 0}));
    std::string input;
    if (!x->padded.empty()) {  // a zero Pad before it joins its padding
      input = x->padded;
      for (int k = 0; k < 4; ++k) pads[k] += x->pad[k];
    } else {
      ASSIGN_OR_RETURN(input, Tensor(n.input(0)));
    }
    ASSIGN_OR_RETURN(std::string w, Tensor(n.input(1)));
    const Shape& ws = shapes_.at(w).first;
    if (ws.size() != 4) return Fail(n, StrCat("weight ", ShapeString(ws), ": needs 4 dims"));
    ASSIGN_OR_RETURN(const std::vector<int64_t> strides, IntsOfLength(n, "strides", 2, {1, 1}));
    ASSIGN_OR_RETURN(const std::vector<int64_t> dilations,
                     IntsOfLength(n, "dilations", 2, {1, 1}));
    RETURN_IF_ERROR(AutoPad(n, shapes_.at(input).first, {ws[2], ws[3]}, strides, dilations, pads));
    std::vector<std::string> inputs = {input, w};
    if (n.input_size() > 2 && !n.input(2).empty()) {
      ASSIGN_OR_RETURN(std::string b, Tensor(n.input(2)));
      inputs.push_back(b);
    }
    return EmitFor(n, "Conv2D", inputs,
                   {{"stride", IntsAttr(strides)}, {"padding", IntsAttr(pads)},
                    {"dilation", IntsAttr(dilations)}, {"groups", IntAttr(OnnxIntAttr(n, "group", 1))}});
  }

  // ConvTranspose(x, w[C_in, C_out/group, kh, kw], bias) as torch exports nn.ConvTranspose2d:
  // pads, output_padding, strides, dilations and group carry over; an output_shape must be the
  // one they give, and auto_pad is refused (torch writes neither).
  absl::Status ConvTranspose(const onnx::NodeProto& n) {
    ASSIGN_OR_RETURN(std::string x, Tensor(n.input(0)));
    const Shape& xs = shapes_.at(x).first;
    if (xs.size() != 4) {
      return Fail(n, StrCat("input ", ShapeString(xs), ": Headroom has 2-D convolutions only"));
    }
    ASSIGN_OR_RETURN(std::string w, Tensor(n.input(1)));
    const Shape& ws = shapes_.at(w).first;
    if (ws.size() != 4) return Fail(n, StrCat("weight ", ShapeString(ws), ": needs 4 dims"));
    if (const std::string mode = OnnxStringAttr(n, "auto_pad", "NOTSET"); mode != "NOTSET") {
      return Fail(n, StrCat("auto_pad '", mode, "': give pads (as torch.onnx writes them)"));
    }
    ASSIGN_OR_RETURN(const std::vector<int64_t> pads, IntsOfLength(n, "pads", 4, {0, 0, 0, 0}));
    ASSIGN_OR_RETURN(const std::vector<int64_t> strides, IntsOfLength(n, "strides", 2, {1, 1}));
    ASSIGN_OR_RETURN(const std::vector<int64_t> dilations,
                     IntsOfLength(n, "dilations", 2, {1, 1}));
    ASSIGN_OR_RETURN(const std::vector<int64_t> out_pad,
                     IntsOfLength(n, "output_padding", 2, {0, 0}));
    const std::vector<int64_t> output_shape = OnnxIntsAttr(n, "output_shape", {});
    if (!output_shape.empty()) {
      for (int d = 0; d < 2; ++d) {
        const int64_t given =
            output_shape.size() >= 2 ? output_shape[output_shape.size() - 2 + d] : -1;
        const int64_t made = (xs[2 + d] - 1) * strides[d] - pads[d] - pads[d + 2] +
                             dilations[d] * (ws[2 + d] - 1) + out_pad[d] + 1;
        if (given != made) {
          return Fail(n, StrCat("output_shape [", absl::StrJoin(output_shape, ","),
                                "] differs from what its pads give (", made,
                                " in dim ", 2 + d, "); Headroom takes pads only"));
        }
      }
    }
    std::vector<std::string> inputs = {x, w};
    if (n.input_size() > 2 && !n.input(2).empty()) {
      ASSIGN_OR_RETURN(std::string b, Tensor(n.input(2)));
      inputs.push_back(b);
    }
    return EmitFor(n, "ConvTranspose2D", inputs,
                   {{"stride", IntsAttr(strides)},
                    {"padding", IntsAttr(pads)},
                    {"output_padding", IntsAttr(out_pad)},
                    {"dilation", IntsAttr(dilations)},
                    {"groups", IntAttr(OnnxIntAttr(n, "group", 1))}});
  }

  // Resize (opset 11 on) as torch 1.13 writes F.interpolate and nn.Upsample at opset 17:
  // mode 'nearest' with coordinate_transformation_mode 'asymmetric' and nearest_mode 'floor'
  // (PyTorch's nearest); 'linear' with 'half_pixel' or 'pytorch_half_pixel' (bilinear,
  // align_corners=False) or 'align_corners'. The output size comes from known sizes (often
  // folded from Shape, Gather, Slice and Concat) or known scales (scale_factor, which PyTorch
  // also uses for the coordinates). Anything else (cubic, other coordinate modes, a computed
  // size) is an error naming the node.
  absl::Status Resize(const onnx::NodeProto& n) {
    ASSIGN_OR_RETURN(std::string x, Tensor(n.input(0)));
    const Shape& xs = shapes_.at(x).first;
    if (xs.size() != 4) {
      return Fail(n, StrCat("input ", ShapeString(xs), ": Headroom resizes NCHW images only"));
    }
    const std::string mode = OnnxStringAttr(n, "mode", "nearest");
    const std::string coords = OnnxStringAttr(n, "coordinate_transformation_mode", "half_pixel");
    if (OnnxIntAttr(n, "antialias", 0) != 0) return Fail(n, "antialias is not supported");
    // Step 1: the output's height and width, and the scale factors if given.
    std::vector<int64_t> size(2);
    double scale[2] = {0, 0};
    if (n.input_size() > 3 && !n.input(3).empty()) {
      ASSIGN_OR_RETURN(auto c, KnownInput(n, 3, "sizes"));
      if (c->size() != 4 || c->int_at(1) != xs[1]) {
        return Fail(n, StrCat("sizes of ", c->size(), " values must be [N, ", xs[1],
                              ", H, W] for input ", ShapeString(xs)));
      }
      size = {c->int_at(2), c->int_at(3)};
    } else {
      ASSIGN_OR_RETURN(auto c, KnownInput(n, 2, "scales"));
      if (c->size() != 4 || c->float_at(0) != 1 || c->float_at(1) != 1) {
        return Fail(n, StrCat("scales of ", c->size(),
                              " values must be [1, 1, h, w]: only H and W are resized"));
      }
      for (int d = 0; d < 2; ++d) {
        scale[d] = c->float_at(2 + d);
        size[d] = static_cast<int64_t>(std::floor(xs[2 + d] * scale[d]));
      }
    }
    // Step 2: the mode, as PyTorch's.
    AttrList attrs = {{"size", IntsAttr(size)}};
    if (mode == "nearest") {
      const std::string rounding = OnnxStringAttr(n, "nearest_mode", "round_prefer_floor");
      if (coords != "asymmetric" || rounding != "floor") {
        return Fail(n, StrCat("mode 'nearest' with coordinate_transformation_mode '", coords,
                              "' and nearest_mode '", rounding,
                              "': Headroom's is PyTorch's nearest ('asymmetric', 'floor')"));
      }
      attrs.push_back({"mode", StringAttr("nearest")});
    } else if (mode == "linear") {
      if (coords != "align_corners" && coords != "half_pixel" && coords != "pytorch_half_pixel") {
        return Fail(n, StrCat("mode 'linear' with coordinate_transformation_mode '", coords,
                              "': Headroom's bilinear is PyTorch's ('half_pixel', ",
                              "'pytorch_half_pixel' or 'align_corners')"));
      }
      // pytorch_half_pixel reads pixel 0 for an output of one pixel; PyTorch (and
      // half_pixel) read the middle.
      for (int d = 0; coords == "pytorch_half_pixel" && d < 2; ++d) {
        if (size[d] == 1 && xs[2 + d] > 1) {
          return Fail(n, "coordinate_transformation_mode 'pytorch_half_pixel' to an output of "
                         "one pixel is not PyTorch's bilinear");
        }
      }
      attrs.push_back({"mode", StringAttr("bilinear")});
      attrs.push_back({"align_corners", BoolAttr(coords == "align_corners")});
    } else {
      return Fail(n, StrCat("mode '", mode, "': Headroom's Resize is 'nearest' or 'linear' ",
                            "(bilinear) only"));
    }
    if (scale[0] > 0) {
      attrs.push_back({"scale_h", FloatAttr(scale[0])});
      attrs.push_back({"scale_w", FloatAttr(scale[1])});
    }
    return EmitFor(n, "Resize", {x}, attrs);
  }

  // Upsample (opsets 7 to 9, deprecated): nearest only, with scales (an attribute before
  // opset 9, input 1 from it); its 'linear' is asymmetric, which no PyTorch mode is.
  absl::Status Upsample(const onnx::NodeProto& n) {
    ASSIGN_OR_RETURN(std::string x, Tensor(n.input(0)));
    const Shape& xs = shapes_.at(x).first;
    const std::string mode = OnnxStringAttr(n, "mode", "nearest");
    if (mode != "nearest") {
      return Fail(n, StrCat("mode '", mode, "': Upsample's is asymmetric, not PyTorch's ",
                            "bilinear; export at opset 11 or later for Resize"));
    }
    if (xs.size() != 4) {
      return Fail(n, StrCat("input ", ShapeString(xs), ": Headroom resizes NCHW images only"));
    }
    std::vector<double> scales;
    if (n.input_size() > 1 && !n.input(1).empty()) {
      ASSIGN_OR_RETURN(auto c, KnownInput(n, 1, "scales"));
      for (int64_t i = 0; i < c->size(); ++i) scales.push_back(c->float_at(i));
    } else {
      for (const onnx::AttributeProto& a : n.attribute()) {
        if (a.name() == "scales") scales.assign(a.floats().begin(), a.floats().end());
      }
    }
    if (scales.size() != 4 || scales[0] != 1 || scales[1] != 1) {
      return Fail(n, "scales must be [1, 1, h, w]: only H and W are resized");
    }
    const std::vector<int64_t> size = {static_cast<int64_t>(std::floor(xs[2] * scales[2])),
                                       static_cast<int64_t>(std::floor(xs[3] * scales[3]))};
    return EmitFor(n, "Resize", {x},
                   {{"size", IntsAttr(size)},
                    {"mode", StringAttr("nearest")},
                    {"scale_h", FloatAttr(scales[2])},
                    {"scale_w", FloatAttr(scales[3])}});
  }

  // Fills `pads` for auto_pad SAME_UPPER / SAME_LOWER / VALID.
  absl::Status AutoPad(const onnx::NodeProto& n, const Shape& x, const std::vector<int64_t>& kernel,
                       const std::vector<int64_t>& strides, const std::vector<int64_t>& dilations,
                       std::vector<int64_t>& pads) {
    const std::string mode = OnnxStringAttr(n, "auto_pad", "NOTSET");
    if (mode == "NOTSET") return absl::OkStatus();
    if (mode == "VALID") {
      pads = {0, 0, 0, 0};
      return absl::OkStatus();
    }
    if (mode != "SAME_UPPER" && mode != "SAME_LOWER") return Fail(n, StrCat("auto_pad '", mode, "'"));
    for (int d = 0; d < 2; ++d) {
      const int64_t out = (x[2 + d] + strides[d] - 1) / strides[d];
      const int64_t span = (kernel[d] - 1) * dilations[d] + 1;
      const int64_t total = std::max<int64_t>(0, (out - 1) * strides[d] + span - x[2 + d]);
      const int64_t small = total / 2, big = total - small;
      pads[d] = mode == "SAME_UPPER" ? small : big;
      pads[d + 2] = mode == "SAME_UPPER" ? big : small;
    }
    return absl::OkStatus();
  }

  absl::Status BatchNormalization(const onnx::NodeProto& n) {
    ASSIGN_OR_RETURN(std::string x, Tensor(n.input(0)));
    std::vector<std::string> inputs = {x};
    const proto::TensorRole roles[] = {proto::ROLE_PARAMETER, proto::ROLE_PARAMETER,
                                       proto::ROLE_BUFFER, proto::ROLE_BUFFER};
    for (int k = 1; k <= 4; ++k) {
      ASSIGN_OR_RETURN(std::string t, Tensor(n.input(k), roles[k - 1]));
      inputs.push_back(t);
    }
    Unavailable(n, 1, "a batch norm's running statistics, which Headroom updates in place");
    // ONNX's momentum weighs the running value (0.9); Headroom's, like PyTorch's, the batch's.
    return EmitFor(n, "BatchNorm", inputs,
                   {{"epsilon", FloatAttr(OnnxFloatAttr(n, "epsilon", 1e-5))},
                    {"momentum", FloatAttr(1.0 - OnnxFloatAttr(n, "momentum", 0.9))}});
  }

  absl::Status Elementwise(const onnx::NodeProto& n, const std::string& op, AttrList attrs = {}) {
    ASSIGN_OR_RETURN(std::string x, Tensor(n.input(0)));
    return EmitFor(n, op, {x}, attrs);
  }
  absl::Status Relu(const onnx::NodeProto& n) { return Elementwise(n, "ReLU"); }
  absl::Status Sigmoid(const onnx::NodeProto& n) { return Elementwise(n, "Sigmoid"); }
  absl::Status Tanh(const onnx::NodeProto& n) { return Elementwise(n, "Tanh"); }
  absl::Status HardSwish(const onnx::NodeProto& n) { return Elementwise(n, "HardSwish"); }
  // PRelu(x, slope): torch's nn.PReLU(C) exports its weight [C] through an Unsqueeze to
  // [C, 1, 1], which broadcasts over x[N, C, H, W]; the slope trains as a parameter, a
  // shared one too (nn.PReLU()'s single value, which the importer holds as a known value
  // and folds through the Unsqueeze, is no buffer).
  absl::Status PRelu(const onnx::NodeProto& n) {
    ASSIGN_OR_RETURN(std::string x, Tensor(n.input(0)));
    ASSIGN_OR_RETURN(std::string slope, Tensor(n.input(1), proto::ROLE_PARAMETER));
    return EmitFor(n, "PReLU", {x, slope});
  }
  // Pow(x, c) of a computed x: c must be one known value (torch's x ** 2.0, x.pow(0.5)); a
  // computed exponent is an error naming the node. (Pow of known values folds; GELU's and
  // layer norm's Pow join their patterns first.)
  absl::Status Pow(const onnx::NodeProto& n) {
    ASSIGN_OR_RETURN(auto c, KnownInput(n, 1, "exponent"));
    if (c->size() != 1) {
      return Fail(n, StrCat("its exponent has ", c->size(),
                            " values; Headroom's Pow takes one constant exponent"));
    }
    return Elementwise(n, "Pow", {{"exponent", FloatAttr(c->float_at(0))}});
  }
  absl::Status LeakyRelu(const onnx::NodeProto& n) {
    return Elementwise(n, "LeakyReLU", {{"alpha", FloatAttr(OnnxFloatAttr(n, "alpha", 0.01))}});
  }
  absl::Status Elu(const onnx::NodeProto& n) {
    return Elementwise(n, "ELU", {{"alpha", FloatAttr(OnnxFloatAttr(n, "alpha", 1.0))}});
  }
  // ONNX's defaults are the float32 roundings of PyTorch's (and Headroom's) constants.
  absl::Status Selu(const onnx::NodeProto& n) {
    return Elementwise(
        n, "SELU",
        {{"alpha", FloatAttr(OnnxFloatAttr(n, "alpha", 1.67326319217681884765625))},
         {"gamma", FloatAttr(OnnxFloatAttr(n, "gamma", 1.05070102214813232421875))}});
  }
  // ONNX's Softplus has no threshold; Headroom's returns x above 20, as PyTorch's, which
  // differs from log(1 + exp(x)) there by under exp(-20) (below float32's rounding of x).
  absl::Status Softplus(const onnx::NodeProto& n) { return Elementwise(n, "Softplus"); }
  absl::Status Sqrt(const onnx::NodeProto& n) { return Elementwise(n, "Sqrt"); }
  absl::Status Erf(const onnx::NodeProto& n) { return Elementwise(n, "Erf"); }
  absl::Status Mish(const onnx::NodeProto& n) { return Elementwise(n, "Mish"); }
  absl::Status HardSigmoid(const onnx::NodeProto& n) {
    return Elementwise(n, "HardSigmoid", {{"alpha", FloatAttr(OnnxFloatAttr(n, "alpha", 0.2))},
                                          {"beta", FloatAttr(OnnxFloatAttr(n, "beta", 0.5))}});
  }

  absl::Status Clip(const onnx::NodeProto& n) {
    double lo = -std::numeric_limits<double>::infinity(), hi = -lo;
    if (opset_ >= 11) {
      if (n.input_size() > 1 && !n.input(1).empty()) {
        ASSIGN_OR_RETURN(auto c, KnownInput(n, 1, "min"));
        lo = c->float_at(0);
      }
      if (n.input_size() > 2 && !n.input(2).empty()) {
        ASSIGN_OR_RETURN(auto c, KnownInput(n, 2, "max"));
        hi = c->float_at(0);
      }
    } else {
      lo = OnnxFloatAttr(n, "min", lo);
      hi = OnnxFloatAttr(n, "max", hi);
    }
    if (lo == 0 && hi == 6) return Elementwise(n, "ReLU6");
    if (lo == 0 && std::isinf(hi)) return Elementwise(n, "ReLU");
    return Fail(n, StrCat("clips to [", lo, ", ", hi, "]; Headroom has ReLU [0, inf) and ReLU6 [0, 6]"));
  }

  // Add, Sub, Mul, Div. A known operand becomes a float32 buffer (Sub and Div by a known
  // value become Add and Mul of its negation and reciprocal; a known value minus or over a
  // computed tensor stays Sub or Div); the four of two computed tensors are Headroom's own.
  absl::Status Arithmetic(const onnx::NodeProto& n) {
    const std::string& op = n.op_type();
    const bool known_a = Known(n.input(0)), known_b = Known(n.input(1));
    if (!known_a && !known_b) {
      if (op == "Add") {
        ASSIGN_OR_RETURN(bool fused, FuseBias(n));
        if (fused) return absl::OkStatus();
      }
      ASSIGN_OR_RETURN(std::string a, Tensor(n.input(0)));
      ASSIGN_OR_RETURN(std::string b, Tensor(n.input(1)));
      return EmitFor(n, op, {a, b});
    }
    if ((op == "Sub" || op == "Div") && known_a) {
      // A known value minus or over a computed tensor (torch's 1 - x, 1 / x): a float32
      // buffer and Headroom's Sub or Div.
      const std::string& data = n.input(1);
      const OnnxTensor& c = *values_.at(n.input(0)).constant;
      std::vector<double> values = c.floats();
      Shape c_shape = c.shape();
      ASSIGN_OR_RETURN(Value * d, Find(data));
      if (rebatch_) RETURN_IF_ERROR(RebatchOperand(n, *d, values, c_shape));
      ASSIGN_OR_RETURN(std::string x, Tensor(data));
      ASSIGN_OR_RETURN(std::string k, FloatConstant(StrCat(n.output(0), ".constant"),
                                                    OnnxTensor::Floats(values, c_shape)));
      return EmitFor(n, op, {k, x});
    }
    const std::string& data = known_a ? n.input(1) : n.input(0);
    const OnnxTensor& c = *values_.at(known_a ? n.input(0) : n.input(1)).constant;
    std::vector<double> values = c.floats();
    Shape c_shape = c.shape();
    ASSIGN_OR_RETURN(Value * d, Find(data));
    if (rebatch_) RETURN_IF_ERROR(RebatchOperand(n, *d, values, c_shape));
    for (double& v : values) {
      if (op == "Sub") v = -v;
      if (op == "Div") v = 1.0 / v;
    }
    const bool additive = op == "Add" || op == "Sub";
    const double identity = additive ? 0.0 : 1.0;
    ASSIGN_OR_RETURN(Shape out, OnnxBroadcastShapes({d->shape, c_shape}));
    if (out == d->shape &&
        std::all_of(values.begin(), values.end(), [&](double v) { return v == identity; })) {
      return Alias(n, data);
    }
    ASSIGN_OR_RETURN(std::string x, Tensor(data));
    ASSIGN_OR_RETURN(std::string k, FloatConstant(StrCat(n.output(0), ".constant"),
                                                  OnnxTensor::Floats(values, c_shape)));
    return EmitFor(n, additive ? "Add" : "Mul", {x, k});
  }

  // Re-batching a known operand `values` of `shape` beside `data`: where its dim over the
  // data's batch axis is the export batch (above 1: ConstantOfShape([2, C, 1, 1]) at batch 2),
  // equal slabs along it collapse to one, which broadcasts over any batch; differing slabs
  // are per-sample values that cannot be attributed, an error naming the node.
  absl::Status RebatchOperand(const onnx::NodeProto& n, const Value& data,
                              std::vector<double>& values, Shape& shape) {
    if (!data.batch.has_batch() || export_batch_ == 1) return absl::OkStatus();
    const int64_t k = data.batch.axis - (static_cast<int64_t>(data.shape.size()) -
                                         static_cast<int64_t>(shape.size()));
    if (k < 0 || shape[k] != export_batch_ || shape[k] == data.shape[data.batch.axis]) {
      return absl::OkStatus();
    }
    int64_t outer = 1, stride = 1;
    for (int64_t d = 0; d < k; ++d) outer *= shape[d];
    for (size_t d = k + 1; d < shape.size(); ++d) stride *= shape[d];
    std::vector<double> slab;
    for (int64_t o = 0; o < outer; ++o) {
      const int64_t base = o * export_batch_ * stride;
      for (int64_t j = 1; j < export_batch_; ++j) {
        if (!std::equal(values.begin() + base, values.begin() + base + stride,
                        values.begin() + base + j * stride)) {
          return Fail(n, StrCat("its known operand ", ShapeString(shape), " has ", export_batch_,
                                " different slabs over the batch axis of '", data.tensor,
                                "': values per sample of the export batch"));
        }
      }
      slab.insert(slab.end(), values.begin() + base, values.begin() + base + stride);
    }
    values = std::move(slab);
    shape[k] = 1;
    return absl::OkStatus();
  }

  // Add(MatMul(a, b), bias[N]) with the MatMul read only here: the bias joins the MatMul.
  absl::StatusOr<bool> FuseBias(const onnx::NodeProto& n) {
    for (int k = 0; k < 2; ++k) {
      const std::string& product = n.input(k);
      const std::string& bias = n.input(1 - k);
      auto mm = matmul_nodes_.find(product);
      auto b = values_.find(bias);
      if (mm == matmul_nodes_.end() || readers_[product] != 1 || b == values_.end() ||
          !b->second.weight || !b->second.tensor.empty() || b->second.shape.size() != 1) {
        continue;
      }
      proto::NodeDef* node = out_.graph.mutable_nodes(mm->second);
      const std::string& mm_out = node->outputs(0);
      if (node->inputs_size() != 2 || shapes_.at(mm_out).first.back() != b->second.shape[0]) {
        continue;
      }
      ASSIGN_OR_RETURN(std::string t, Tensor(bias));
      node->add_inputs(t);
      values_[n.output(0)] = values_.at(product);
      ++out_.stats.fused;
      return true;
    }
    return false;
  }

  absl::Status Gemm(const onnx::NodeProto& n) {
    if (OnnxFloatAttr(n, "alpha", 1.0) != 1.0 || OnnxIntAttr(n, "transA", 0) != 0 ||
        (n.input_size() > 2 && OnnxFloatAttr(n, "beta", 1.0) != 1.0)) {
      return Fail(n, "Headroom takes Gemm with alpha 1, beta 1 and transA 0");
    }
    ASSIGN_OR_RETURN(std::string a, Tensor(n.input(0)));
    bool transpose_b = OnnxIntAttr(n, "transB", 0) != 0;
    ASSIGN_OR_RETURN(std::string b, MatMulOperand(n.input(1), transpose_b));
    std::vector<std::string> inputs = {a, b};
    std::optional<std::string> separate_bias;
    if (n.input_size() > 2 && !n.input(2).empty()) {
      ASSIGN_OR_RETURN(Value * c, Find(n.input(2)));
      if (c->shape.size() == 1) {
        ASSIGN_OR_RETURN(std::string t, Tensor(n.input(2)));
        inputs.push_back(t);
      } else {
        separate_bias = n.input(2);
      }
    }
    const AttrList attrs = {{"transpose_b", BoolAttr(transpose_b)}};
    if (!separate_bias) return EmitFor(n, "MatMul", inputs, attrs);
    ASSIGN_OR_RETURN(std::vector<std::string> product,
                     Emit("MatMul", NodeName(n), inputs, {UniqueTensor(n.output(0) + ".product")}, attrs));
    ASSIGN_OR_RETURN(std::string c, Tensor(*separate_bias));
    ASSIGN_OR_RETURN(std::vector<std::string> sum,
                     Emit("Add", NodeName(n) + ".bias", {product[0], c}, {UniqueTensor(n.output(0))}));
    Bind(n.output(0), sum[0]);
    return absl::OkStatus();
  }

  // Returns the tensor for a MatMul's b: a lazily transposed weight is read untransposed
  // with transpose_b flipped.
  absl::StatusOr<std::string> MatMulOperand(const std::string& name, bool& transpose_b) {
    ASSIGN_OR_RETURN(Value * v, Find(name));
    if (v->tensor.empty() && !v->transpose_of.empty()) {
      transpose_b = !transpose_b;
      return Tensor(v->transpose_of);
    }
    return Tensor(name);
  }

  // numpy's matmul of a 1-D operand: a [K] is the row [1, K], b [K] the column [K, 1], and
  // the product drops the dim each added: Reshapes (views) around a MatMul.
  absl::Status VectorMatMul(const onnx::NodeProto& n) {
    ASSIGN_OR_RETURN(std::string a, Tensor(n.input(0)));
    ASSIGN_OR_RETURN(std::string b, Tensor(n.input(1)));
    const Shape as = shapes_.at(a).first, bs = shapes_.at(b).first;
    if (as.empty() || bs.empty()) return Fail(n, "a matrix product of a scalar");
    if (as.size() == 1 && bs.size() == 1) return Fail(n, "a dot product of two vectors (a scalar)");
    std::string* operands[2] = {&a, &b};
    const Shape matrices[2] = {as.size() == 1 ? Shape{1, as[0]} : as,
                               bs.size() == 1 ? Shape{bs[0], 1} : bs};
    for (int k = 0; k < 2; ++k) {
      if (matrices[k] == shapes_.at(*operands[k]).first) continue;
      ASSIGN_OR_RETURN(
          std::vector<std::string> out,
          Emit("Reshape", StrCat(NodeName(n), k == 0 ? ".row" : ".column"), {*operands[k]},
               {UniqueTensor(StrCat(n.input(k), ".matrix"))}, {{"shape", IntsAttr(matrices[k])}}));
      *operands[k] = out[0];
    }
    ASSIGN_OR_RETURN(
        std::vector<std::string> product,
        Emit("MatMul", NodeName(n), {a, b}, {UniqueTensor(StrCat(n.output(0), ".matrix"))}));
    Shape out = shapes_.at(product[0]).first;
    if (bs.size() == 1) out.erase(out.end() - 1);
    if (as.size() == 1) out.erase(out.end() - (bs.size() == 1 ? 1 : 2));
    return Reshaped(n, product[0], out);
  }

  absl::Status MatMul(const onnx::NodeProto& n) {
    ASSIGN_OR_RETURN(Value * av, Find(n.input(0)));
    ASSIGN_OR_RETURN(Value * bv, Find(n.input(1)));
    if (av->shape.size() < 2 || bv->shape.size() < 2) return VectorMatMul(n);
    ASSIGN_OR_RETURN(std::string a, Tensor(n.input(0)));
    bool transpose_b = false;
    ASSIGN_OR_RETURN(std::string b, MatMulOperand(n.input(1), transpose_b));
    RETURN_IF_ERROR(EmitFor(n, "MatMul", {a, b}, {{"transpose_b", BoolAttr(transpose_b)}}));
    matmul_nodes_[n.output(0)] = out_.graph.nodes_size() - 1;
    return absl::OkStatus();
  }

  // Einsum of a batched matrix product: "...ik,...kj->...ij" with either operand's last two
  // letters in either order (torchvision's maxvit writes "bghid,bghjd->bghij").
  absl::Status Einsum(const onnx::NodeProto& n) {
    std::string eq;
    for (char ch : OnnxStringAttr(n, "equation")) {
      if (ch != ' ') eq.push_back(ch);
    }
    const std::vector<std::string> sides = absl::StrSplit(eq, "->");
    const std::vector<std::string> ops =
        sides.size() == 2 ? absl::StrSplit(sides[0], ',') : std::vector<std::string>();
    if (ops.size() != 2 || n.input_size() != 2) return Fail(n, StrCat("equation '", eq, "'"));
    const std::string &a = ops[0], &b = ops[1], &o = sides[1];
    const size_t k = o.size() < 2 ? 0 : o.size() - 2;
    if (o.size() < 2 || a.size() != o.size() || b.size() != o.size() ||
        a.substr(0, k) != o.substr(0, k) || b.substr(0, k) != o.substr(0, k)) {
      return Fail(n, StrCat("equation '", eq, "' is not a batched matrix product"));
    }
    const char i = o[k], j = o[k + 1];
    const std::string ar = a.substr(k), br = b.substr(k);
    const bool transpose_a = ar[1] == i;
    const bool transpose_b = br[0] == j;
    const char ca = transpose_a ? ar[0] : ar[1], cb = transpose_b ? br[1] : br[0];
    if ((transpose_a ? ar[1] : ar[0]) != i || (transpose_b ? br[0] : br[1]) != j || ca != cb ||
        ca == i || ca == j) {
      return Fail(n, StrCat("equation '", eq, "' is not a batched matrix product"));
    }
    ASSIGN_OR_RETURN(std::string x, Tensor(n.input(0)));
    ASSIGN_OR_RETURN(std::string y, Tensor(n.input(1)));
    return EmitFor(n, "MatMul", {x, y},
                   {{"transpose_a", BoolAttr(transpose_a)}, {"transpose_b", BoolAttr(transpose_b)}});
  }

  absl::Status Pool(const onnx::NodeProto& n, const std::string& op) {
    const std::vector<int64_t> kernel = OnnxIntsAttr(n, "kernel_shape");
    const std::vector<int64_t> dilations = OnnxIntsAttr(n, "dilations", {1, 1});
    if (kernel.size() != 2) return Fail(n, "Headroom pools over 2-D windows only");
    if (dilations != std::vector<int64_t>{1, 1}) return Fail(n, "dilated pooling");
    if (OnnxIntAttr(n, "storage_order", 0) != 0) return Fail(n, "column-major storage_order");
    ASSIGN_OR_RETURN(Value * x, Find(n.input(0)));
    ASSIGN_OR_RETURN(std::vector<int64_t> pads, IntsOfLength(n, "pads", 4, {0, 0, 0, 0}));
    bool count_include_pad = OnnxIntAttr(n, "count_include_pad", 0) != 0;
    std::string input;
    if (!x->padded.empty() && op == "AvgPool") {
      // Pad then average: the zeros count, which is count_include_pad with the pads joined.
      if (!count_include_pad && pads != std::vector<int64_t>{0, 0, 0, 0}) {
        return Fail(n, "a zero Pad before an average pool that excludes its own padding");
      }
      for (int k = 0; k < 4; ++k) pads[k] += x->pad[k];
      count_include_pad = true;
      input = x->padded;
    } else {
      ASSIGN_OR_RETURN(input, Tensor(n.input(0)));
    }
    ASSIGN_OR_RETURN(std::vector<int64_t> strides, IntsOfLength(n, "strides", 2, {1, 1}));
    RETURN_IF_ERROR(AutoPad(n, shapes_.at(input).first, kernel, strides, dilations, pads));
    AttrList attrs = {{"kernel_size", IntsAttr(kernel)}, {"stride", IntsAttr(strides)},
                      {"padding", IntsAttr(pads)},
                      {"ceil_mode", BoolAttr(OnnxIntAttr(n, "ceil_mode", 0) != 0)}};
    if (op == "AvgPool") attrs.push_back({"count_include_pad", BoolAttr(count_include_pad)});
    Unavailable(n, 1, "a max pool's indices, which Headroom does not produce");
    return EmitFor(n, op, {input}, attrs);
  }
  absl::Status MaxPool(const onnx::NodeProto& n) { return Pool(n, "MaxPool"); }
  absl::Status AveragePool(const onnx::NodeProto& n) { return Pool(n, "AvgPool"); }
  absl::Status GlobalAveragePool(const onnx::NodeProto& n) { return Elementwise(n, "GlobalAvgPool"); }

  // ReduceMean over the two spatial dims of NCHW: a global average pool.
  absl::Status ReduceMean(const onnx::NodeProto& n) {
    ASSIGN_OR_RETURN(Value * x, Find(n.input(0)));
    ASSIGN_OR_RETURN(std::vector<int64_t> axes, Axes(n, 18, /*input_optional=*/true));
    for (int64_t& a : axes) {
      ASSIGN_OR_RETURN(a, NormalAxis(a, x->shape.size()));
    }
    std::sort(axes.begin(), axes.end());
    if (x->shape.size() != 4 || axes != std::vector<int64_t>{2, 3}) {
      return Fail(n, StrCat("a mean over axes [", absl::StrJoin(axes, ","), "] of ",
                            ShapeString(x->shape), "; Headroom averages NCHW over H and W only "
                            "(or as part of a LayerNorm)"));
    }
    ASSIGN_OR_RETURN(std::string input, Tensor(n.input(0)));
    if (OnnxIntAttr(n, "keepdims", 1) != 0) return EmitFor(n, "GlobalAvgPool", {input});
    ASSIGN_OR_RETURN(std::vector<std::string> pooled,
                     Emit("GlobalAvgPool", NodeName(n), {input}, {UniqueTensor(n.output(0) + ".pooled")}));
    return Reshaped(n, pooled[0], {x->shape[0], x->shape[1]});
  }

  // ReduceSum (axes an input from opset 13), ReduceMax and ReduceMin (from opset 18) of a
  // computed tensor: Headroom's reductions. No axes reduce all of them, unless
  // noop_with_empty_axes makes the node an identity.
  absl::Status Reduction(const onnx::NodeProto& n, const std::string& op, int axes_input_since) {
    ASSIGN_OR_RETURN(Value * x, Find(n.input(0)));
    ASSIGN_OR_RETURN(std::vector<int64_t> axes, Axes(n, axes_input_since, /*input_optional=*/true));
    if (axes.empty() && OnnxIntAttr(n, "noop_with_empty_axes", 0) != 0) {
      return Alias(n, n.input(0));
    }
    for (int64_t& a : axes) {
      ASSIGN_OR_RETURN(a, NormalAxis(a, x->shape.size()));
    }
    ASSIGN_OR_RETURN(std::string input, Tensor(n.input(0)));
    AttrList attrs = {{"keepdims", BoolAttr(OnnxIntAttr(n, "keepdims", 1) != 0)}};
    if (!axes.empty()) attrs.push_back({"axes", IntsAttr(axes)});  // Else the default: all.
    return EmitFor(n, op, {input}, attrs);
  }
  absl::Status ReduceSum(const onnx::NodeProto& n) { return Reduction(n, "ReduceSum", 13); }
  absl::Status ReduceMax(const onnx::NodeProto& n) { return Reduction(n, "ReduceMax", 18); }
  absl::Status ReduceMin(const onnx::NodeProto& n) { return Reduction(n, "ReduceMin", 18); }

  // Binds the node's output to `input` reshaped (a view), or to `input` when the shape holds.
  absl::Status Reshaped(const onnx::NodeProto& n, const std::string& input, const Shape& shape) {
    if (shapes_.at(input).first == shape) {
      Bind(n.output(0), input);
      ++out_.stats.elided;
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(std::vector<std::string> out,
                     Emit("Reshape", StrCat(NodeName(n), ".reshape"), {input},
                          {UniqueTensor(n.output(0))}, {{"shape", IntsAttr(shape)}}));
    Bind(n.output(0), out[0]);
    return absl::OkStatus();
  }

  absl::Status Flatten(const onnx::NodeProto& n) {
    ASSIGN_OR_RETURN(Value * x, Find(n.input(0)));
    ASSIGN_OR_RETURN(int64_t axis, NormalAxis(OnnxIntAttr(n, "axis", 1), x->shape.size() + 1));
    ASSIGN_OR_RETURN(std::string input, Tensor(n.input(0)));
    return EmitFor(n, "Flatten", {input}, {{"axis", IntAttr(axis)}});
  }

  absl::Status Reshape(const onnx::NodeProto& n) {
    ASSIGN_OR_RETURN(Value * x, Find(n.input(0)));
    std::vector<int64_t> target = OnnxIntsAttr(n, "shape");
    bool literal = true;
    if (opset_ >= 5) {
      ASSIGN_OR_RETURN(auto c, KnownInput(n, 1, "shape"));
      target = c->ints();
      literal = !values_.at(n.input(1)).from_shape;
    }
    const bool allow_zero = OnnxIntAttr(n, "allowzero", 0) != 0;
    if (rebatch_ && !literal && (x->batch.has_batch() || x->batch_lost)) {
      // Partly computed from shapes (swin's view(B, pad_H // 7, ...) after a Pad: B a literal,
      // pad_H from the padded tensor's Shape): taken as it is when it fits, else re-batched
      // as a literal, which holds when the computed elements do not depend on the batch.
      absl::StatusOr<Shape> as_is = OnnxReshapeTarget(x->shape, target, allow_zero);
      literal = !as_is.ok() || ElementsOf(*as_is) != ElementsOf(x->shape);
    }
    if (rebatch_ && literal && (x->batch.has_batch() || x->batch_lost)) {
      // A shape the exporter wrote for the export batch: scaled where the batch is.
      const BatchAxis b = x->batch;
      if (x->batch_lost) {
        return Fail(n, StrCat("its shape [", absl::StrJoin(target, ","), "] was exported for ",
                              "batch ", export_batch_, ", and its input '", n.input(0), "' ",
                              ShapeString(x->shape), " has no axis that holds the batch whole"));
      }
      absl::StatusOr<RebatchedReshape> r = RebatchReshape(
          x->shape, b, export_batch_, static_cast<int64_t>(options_.batch), target, allow_zero);
      if (!r.ok()) {
        return Fail(n, StrCat("its shape [", absl::StrJoin(target, ","), "] was exported for ",
                              "batch ", export_batch_, " and cannot be re-batched for input '",
                              n.input(0), "' ", ShapeString(x->shape), " (batch on ",
                              b.DebugString(), "): ", r.status().message()));
      }
      RETURN_IF_ERROR(ReshapeValue(n, r->shape));
      values_.at(n.output(0)).batch = r->batch;
      return absl::OkStatus();
    }
    absl::StatusOr<Shape> shape = OnnxReshapeTarget(x->shape, target, allow_zero);
    if (!shape.ok()) return Fail(n, shape.status().message());
    return ReshapeValue(n, *shape);
  }

  // Reshape of a value to `shape`; a weight keeps its own tensor.
  absl::Status ReshapeValue(const onnx::NodeProto& n, const Shape& shape) {
    ASSIGN_OR_RETURN(std::string input, Tensor(n.input(0)));
    return Reshaped(n, input, shape);
  }

  // Returns the node's axes: its attribute before opset `input_since`, from then on its input
  // 1 (which, when `input_optional`, may be left out to keep the attribute's).
  absl::StatusOr<std::vector<int64_t>> Axes(const onnx::NodeProto& n, int input_since,
                                            bool input_optional) {
    const bool has_input = n.input_size() > 1 && !n.input(1).empty();
    if (opset_ < input_since || (input_optional && !has_input)) return OnnxIntsAttr(n, "axes");
    ASSIGN_OR_RETURN(auto c, KnownInput(n, 1, "axes"));
    return c->ints();
  }

  // Reshapes input 0 to `shape_of(its shape, the node's axes)`: Squeeze and Unsqueeze.
  absl::Status ReshapeByAxes(const onnx::NodeProto& n, bool axes_input_optional,
                             absl::StatusOr<Shape> (*shape_of)(const Shape&,
                                                               std::vector<int64_t>)) {
    ASSIGN_OR_RETURN(Value * x, Find(n.input(0)));
    ASSIGN_OR_RETURN(std::vector<int64_t> axes, Axes(n, 13, axes_input_optional));
    absl::StatusOr<Shape> shape = shape_of(x->shape, std::move(axes));
    if (!shape.ok()) return Fail(n, shape.status().message());
    return ReshapeValue(n, *shape);
  }

  absl::Status Unsqueeze(const onnx::NodeProto& n) {
    return ReshapeByAxes(n, /*axes_input_optional=*/false, OnnxUnsqueezeShape);
  }

  absl::Status Squeeze(const onnx::NodeProto& n) {
    return ReshapeByAxes(n, /*axes_input_optional=*/true, OnnxSqueezeShape);
  }

  absl::Status Transpose(const onnx::NodeProto& n) {
    ASSIGN_OR_RETURN(Value * x, Find(n.input(0)));
    const int64_t rank = x->shape.size();
    std::vector<int64_t> perm = OnnxIntsAttr(n, "perm");
    if (perm.empty()) {
      for (int64_t d = rank - 1; d >= 0; --d) perm.push_back(d);
    }
    bool identity = true;
    for (int64_t d = 0; d < static_cast<int64_t>(perm.size()); ++d) identity &= perm[d] == d;
    if (identity) return Alias(n, n.input(0));
    if (x->weight && x->tensor.empty() && rank == 2) {
      // A transposed weight: a MatMul reads the weight with transpose_b instead.
      Value v;
      v.transpose_of = n.input(0);
      v.shape = {x->shape[1], x->shape[0]};
      v.dtype = x->dtype;
      values_[n.output(0)] = std::move(v);
      ++out_.stats.fused;
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(std::string input, Tensor(n.input(0)));
    return EmitFor(n, "Transpose", {input}, {{"perm", IntsAttr(perm)}});
  }

  absl::Status Concat(const onnx::NodeProto& n) {
    std::vector<std::string> inputs;
    for (const std::string& in : n.input()) {
      ASSIGN_OR_RETURN(std::string t, Tensor(in));
      inputs.push_back(t);
    }
    if (inputs.size() == 1) return Alias(n, n.input(0));
    ASSIGN_OR_RETURN(int64_t axis, NormalAxis(OnnxIntAttr(n, "axis", 0), shapes_.at(inputs[0]).first.size()));
    if (rebatch_) RETURN_IF_ERROR(RebatchConcatInputs(n, axis, inputs));
    return EmitFor(n, "Concat", inputs, {{"axis", IntAttr(axis)}});
  }

  // Re-batching: a Concat input without a batch (vit's class token, expanded to the export
  // batch of 1) beside one with it is broadcast over the batch; with an export batch above 1
  // its rows cannot be told from samples, an error naming the node.
  absl::Status RebatchConcatInputs(const onnx::NodeProto& n, int64_t axis,
                                   std::vector<std::string>& inputs) {
    const Value* batched = nullptr;
    for (const std::string& in : n.input()) {
      if (values_.at(in).batch.has_batch()) batched = &values_.at(in);
    }
    if (batched == nullptr) return absl::OkStatus();
    const BatchAxis b = batched->batch;
    if (b.axis == axis || b.outer != 1 || b.inner != 1) return absl::OkStatus();
    for (size_t k = 0; k < inputs.size(); ++k) {
      const Value& v = values_.at(n.input(k));
      const Shape& shape = shapes_.at(inputs[k]).first;
      if (v.batch.has_batch() || v.batch_lost || shape.size() != batched->shape.size() ||
          shape[b.axis] == batched->shape[b.axis]) {
        continue;
      }
      if (shape[b.axis] != export_batch_ || export_batch_ != 1) {
        return Fail(n, StrCat("input '", n.input(k), "' ", ShapeString(shape),
                              " holds no batch, but its axis ", b.axis, " is ", shape[b.axis],
                              " beside the batch of input ", ShapeString(batched->shape)));
      }
      Shape target = shape;
      target[b.axis] = batched->shape[b.axis];
      ASSIGN_OR_RETURN(
          std::vector<std::string> out,
          Emit("Expand", StrCat(NodeName(n), ".batch", k), {inputs[k]},
               {UniqueTensor(StrCat(n.input(k), ".batch"))}, {{"shape", IntsAttr(target)}}));
      inputs[k] = out[0];
    }
    return absl::OkStatus();
  }

  absl::Status Split(const onnx::NodeProto& n) {
    ASSIGN_OR_RETURN(Value * x, Find(n.input(0)));
    ASSIGN_OR_RETURN(int64_t axis, NormalAxis(OnnxIntAttr(n, "axis", 0), x->shape.size()));
    std::vector<int64_t> sizes = OnnxIntsAttr(n, "split");
    if (opset_ >= 13 && n.input_size() > 1 && !n.input(1).empty()) {
      ASSIGN_OR_RETURN(auto c, KnownInput(n, 1, "split"));
      sizes = c->ints();
    }
    const int64_t pieces = n.output_size(), dim = x->shape[axis];
    if (sizes.empty()) {
      const int64_t each = (dim + pieces - 1) / pieces;
      for (int64_t k = 0; k < pieces; ++k) sizes.push_back(std::min(each, dim - k * each));
    }
    if (pieces == 1) return Alias(n, n.input(0));
    ASSIGN_OR_RETURN(std::string input, Tensor(n.input(0)));
    return EmitFor(n, "Split", {input}, {{"axis", IntAttr(axis)}, {"sizes", IntsAttr(sizes)}},
                   static_cast<int>(pieces));
  }

  // Slice of a computed tensor (any nonzero steps; a negative one reverses, as torch.flip
  // and x[::-1] export): Headroom's Slice, or nothing when it keeps everything.
  absl::Status Slice(const onnx::NodeProto& n) {
    ASSIGN_OR_RETURN(Value * x, Find(n.input(0)));
    std::vector<const OnnxTensor*> bounds = {nullptr};
    for (int k = 1; k < n.input_size(); ++k) {
      if (n.input(k).empty()) {
        bounds.push_back(nullptr);
        continue;
      }
      ASSIGN_OR_RETURN(auto c, KnownInput(n, k, "bounds"));
      bounds.push_back(c.get());
    }
    absl::StatusOr<std::vector<SliceRange>> ranges = OnnxSliceRanges(n, bounds, x->shape, opset_);
    if (!ranges.ok()) return Fail(n, ranges.status().message());
    if (rebatch_ && x->batch.has_batch()) RETURN_IF_ERROR(RebatchSlice(n, *x, bounds, *ranges));
    std::vector<int64_t> out_axes, out_starts, out_ends, out_steps;
    for (int64_t axis = 0; axis < static_cast<int64_t>(ranges->size()); ++axis) {
      const SliceRange& r = (*ranges)[axis];
      if (r.count == 0) return Fail(n, "an empty slice");
      if (r.start == 0 && r.step == 1 && r.count == x->shape[axis]) continue;  // all of it
      out_axes.push_back(axis);
      out_starts.push_back(r.start);
      // Just past the last element taken, on the step's side: -1 for a reversal through 0.
      const int64_t last = r.start + (r.count - 1) * r.step;
      out_ends.push_back(r.step > 0 ? last + 1 : last - 1);
      out_steps.push_back(r.step);
    }
    if (out_axes.empty()) return Alias(n, n.input(0));
    ASSIGN_OR_RETURN(std::string input, Tensor(n.input(0)));
    return EmitFor(n, "Slice", {input},
                   {{"axes", IntsAttr(out_axes)}, {"starts", IntsAttr(out_starts)},
                    {"ends", IntsAttr(out_ends)}, {"steps", IntsAttr(out_steps)}});
  }

  // Re-batching a Slice over the batch axis: literal bounds that took all of the export
  // batch take all of the imported one; any other slice of the batch is an error.
  absl::Status RebatchSlice(const onnx::NodeProto& n, const Value& x,
                            const std::vector<const OnnxTensor*>& bounds,
                            std::vector<SliceRange>& ranges) {
    const int64_t a = x.batch.axis, dim = x.shape[a];
    SliceRange& r = ranges[a];
    if (r.start == 0 && r.step == 1 && r.count == dim) return absl::OkStatus();
    bool literal = true;
    for (int k = 1; k < n.input_size(); ++k) {
      if (!n.input(k).empty()) literal &= !values_.at(n.input(k)).from_shape;
    }
    const Shape exported =
        WithBatch(x.shape, x.batch, static_cast<int64_t>(options_.batch), export_batch_);
    absl::StatusOr<std::vector<SliceRange>> at_export =
        OnnxSliceRanges(n, bounds, exported, opset_);
    if (literal && at_export.ok()) {
      const SliceRange& e = (*at_export)[a];
      if (e.start == 0 && e.step == 1 && e.count == exported[a]) {
        r = SliceRange{0, 1, dim};
        return absl::OkStatus();
      }
    }
    return Fail(n, StrCat("slices axis ", a, " of input '", n.input(0), "' ", ShapeString(x.shape),
                          ", which holds the batch"));
  }

  // Gather rows of a weight table (an embedding), or known positions of a computed tensor
  // (vit's x[:, 0]).
  absl::Status Gather(const onnx::NodeProto& n) {
    ASSIGN_OR_RETURN(Value * data, Find(n.input(0)));
    ASSIGN_OR_RETURN(int64_t axis, NormalAxis(OnnxIntAttr(n, "axis", 0), data->shape.size()));
    if (data->weight && data->shape.size() == 2 && axis == 0) {
      ASSIGN_OR_RETURN(std::string ids, Tensor(n.input(1), proto::ROLE_BUFFER));
      ASSIGN_OR_RETURN(std::string table, Tensor(n.input(0)));
      return EmitFor(n, "Embedding", {ids, table});
    }
    if (!Known(n.input(1))) {
      return Fail(n, "gathers computed positions of a computed tensor; Headroom gathers rows "
                     "of a 2-D weight (an embedding) or known positions");
    }
    const OnnxTensor& idx = *values_.at(n.input(1)).constant;
    std::vector<int64_t> positions = idx.ints();
    const int64_t dim = data->shape[axis];
    for (int64_t& p : positions) p = p < 0 ? p + dim : p;
    for (size_t k = 1; k < positions.size(); ++k) {
      if (positions[k] != positions[0] + static_cast<int64_t>(k)) {
        return Fail(n, "gathers known positions that are not one ascending run");
      }
    }
    if (positions.empty() || positions[0] < 0 || positions.back() >= dim) {
      return Fail(n, StrCat("positions ", idx.DebugString(), " outside axis ", axis, " of ", dim));
    }
    ASSIGN_OR_RETURN(std::string input, Tensor(n.input(0)));
    Shape out = data->shape;
    out[axis] = positions.size();
    std::string piece = input;
    if (static_cast<int64_t>(positions.size()) != dim) {
      ASSIGN_OR_RETURN(std::vector<std::string> sliced,
                       Emit("Slice", NodeName(n), {input}, {UniqueTensor(n.output(0) + ".slice")},
                            {{"axes", IntsAttr({axis})}, {"starts", IntsAttr({positions[0]})},
                             {"ends", IntsAttr({positions.back() + 1})}, {"steps", IntsAttr({1})}}));
      piece = sliced[0];
    }
    // The index's own shape replaces the axis (a scalar index drops it).
    Shape final_shape(data->shape.begin(), data->shape.begin() + axis);
    final_shape.insert(final_shape.end(), idx.shape().begin(), idx.shape().end());
    final_shape.insert(final_shape.end(), data->shape.begin() + axis + 1, data->shape.end());
    return Reshaped(n, piece, final_shape);
  }

  absl::Status Softmax(const onnx::NodeProto& n) {
    ASSIGN_OR_RETURN(Value * x, Find(n.input(0)));
    const int64_t rank = x->shape.size();
    ASSIGN_OR_RETURN(int64_t axis, NormalAxis(OnnxIntAttr(n, "axis", opset_ >= 13 ? -1 : 1), rank));
    if (opset_ < 13 && axis != rank - 1) {
      return Fail(n, "softmax over flattened trailing dims (opset < 13, axis before the last)");
    }
    ASSIGN_OR_RETURN(std::string input, Tensor(n.input(0)));
    return EmitFor(n, "Softmax", {input}, {{"axis", IntAttr(axis)}});
  }

  // Headroom trains what it imports, so a Dropout keeps its ratio whatever training_mode
  // says; ratio 0 drops it.
  absl::Status Dropout(const onnx::NodeProto& n) {
    double ratio = OnnxFloatAttr(n, "ratio", 0.5);
    if (opset_ >= 12 && n.input_size() > 1 && !n.input(1).empty()) {
      ASSIGN_OR_RETURN(auto c, KnownInput(n, 1, "ratio"));
      ratio = c->float_at(0);
    }
    Unavailable(n, 1, "a dropout mask, which Headroom keeps to itself");
    if (ratio == 0) return Alias(n, n.input(0));
    ASSIGN_OR_RETURN(std::string input, Tensor(n.input(0)));
    return EmitFor(n, "Dropout", {input}, {{"rate", FloatAttr(ratio)}});
  }

  absl::Status LayerNormalization(const onnx::NodeProto& n) {
    ASSIGN_OR_RETURN(Value * x, Find(n.input(0)));
    const int64_t rank = x->shape.size();
    ASSIGN_OR_RETURN(int64_t axis, NormalAxis(OnnxIntAttr(n, "axis", -1), rank));
    if (axis != rank - 1) return Fail(n, "Headroom normalises over the last axis only");
    OnnxFusion f;
    f.op = "LayerNorm";
    f.input = n.input(0);
    f.output = n.output(0);
    f.epsilon = OnnxFloatAttr(n, "epsilon", 1e-5);
    f.weight = n.input(1);
    f.bias = n.input_size() > 2 ? n.input(2) : "";
    Unavailable(n, 1, "a layer norm's saved statistics, which Headroom keeps to itself");
    return EmitFusion(f);
  }

  // InstanceNormalization(x[N, C, ...], scale[C], B[C]) normalises each sample's channel:
  // GroupNorm with a group per channel. torch's nn.InstanceNorm2d(affine=True) exports its
  // weight and bias as scale and B (parameters); nn.GroupNorm(G, C) exports a Reshape to
  // [N, G, -1], an InstanceNormalization of that with constant ones and zeros (buffers), a
  // Reshape back and the affine Mul and Add: each imports as itself, which is GroupNorm's
  // arithmetic exactly.
  absl::Status InstanceNormalization(const onnx::NodeProto& n) {
    ASSIGN_OR_RETURN(Value * x, Find(n.input(0)));
    if (x->shape.size() < 3) {
      return Fail(n, StrCat("its input ", ShapeString(x->shape), " needs [N, C, ...] with at ",
                            "least one dimension after the channels"));
    }
    const int64_t channels = x->shape[1];
    ASSIGN_OR_RETURN(std::string input, Tensor(n.input(0)));
    ASSIGN_OR_RETURN(std::string scale, Tensor(n.input(1)));
    ASSIGN_OR_RETURN(std::string bias, Tensor(n.input(2)));
    return EmitFor(n, "GroupNorm", {input, scale, bias},
                   {{"num_groups", IntAttr(channels)},
                    {"epsilon", FloatAttr(OnnxFloatAttr(n, "epsilon", 1e-5))}});
  }

  absl::Status Pad(const onnx::NodeProto& n) {
    if (OnnxStringAttr(n, "mode", "constant") != "constant") return Fail(n, "a non-constant Pad mode");
    ASSIGN_OR_RETURN(Value * x, Find(n.input(0)));
    const int64_t rank = x->shape.size();
    std::vector<int64_t> pads = OnnxIntsAttr(n, "pads");
    double fill = OnnxFloatAttr(n, "value", 0.0);
    std::vector<int64_t> axes;
    if (opset_ >= 11) {
      ASSIGN_OR_RETURN(auto p, KnownInput(n, 1, "pads"));
      pads = p->ints();
      if (n.input_size() > 2 && !n.input(2).empty()) {
        ASSIGN_OR_RETURN(auto v, KnownInput(n, 2, "constant_value"));
        fill = v->float_at(0);
      }
      if (n.input_size() > 3 && !n.input(3).empty()) {
        ASSIGN_OR_RETURN(auto a, KnownInput(n, 3, "axes"));
        axes = a->ints();
      }
    }
    if (axes.empty()) {
      for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
    }
    std::vector<int64_t> begin(rank, 0), end(rank, 0);
    if (pads.size() != 2 * axes.size()) return Fail(n, "pads do not match the axes");
    for (size_t k = 0; k < axes.size(); ++k) {
      ASSIGN_OR_RETURN(int64_t axis, NormalAxis(axes[k], rank));
      begin[axis] = pads[k];
      end[axis] = pads[k + axes.size()];
    }
    const bool none = std::all_of(pads.begin(), pads.end(), [](int64_t p) { return p == 0; });
    if (none) return Alias(n, n.input(0));
    const bool spatial = rank == 4 && begin[0] == 0 && begin[1] == 0 && end[0] == 0 && end[1] == 0;
    if (!spatial || fill != 0 ||
        std::any_of(pads.begin(), pads.end(), [](int64_t p) { return p < 0; })) {
      return Fail(n, "Headroom takes a Pad only as zeros around H and W of NCHW, before a "
                     "convolution or an average pool");
    }
    ASSIGN_OR_RETURN(std::string input, Tensor(n.input(0)));
    Value v;
    v.padded = input;
    v.pad = {begin[2], begin[3], end[2], end[3]};
    v.shape = x->shape;
    v.shape[2] += begin[2] + end[2];
    v.shape[3] += begin[3] + end[3];
    v.dtype = x->dtype;
    values_[n.output(0)] = std::move(v);
    ++out_.stats.fused;
    return absl::OkStatus();
  }

  absl::Status Expand(const onnx::NodeProto& n) {
    ASSIGN_OR_RETURN(Value * x, Find(n.input(0)));
    ASSIGN_OR_RETURN(auto c, KnownInput(n, 1, "shape"));
    std::vector<int64_t> shape = c->ints();
    BatchAxis out_batch;
    if (rebatch_ && !values_.at(n.input(1)).from_shape) {
      ASSIGN_OR_RETURN(out_batch, RebatchExpandShape(n, *x, shape));
    }
    absl::StatusOr<Shape> target = OnnxBroadcastShapes({x->shape, shape});
    if (!target.ok()) return Fail(n, target.status().message());
    if (*target == x->shape) return Alias(n, n.input(0));
    ASSIGN_OR_RETURN(std::string input, Tensor(n.input(0)));
    RETURN_IF_ERROR(EmitFor(n, "Expand", {input}, {{"shape", IntsAttr(*target)}}));
    if (out_batch.has_batch()) values_.at(n.output(0)).batch = out_batch;
    return absl::OkStatus();
  }

  // Rewrites an Expand's literal `shape`, written for the export batch: the element over the
  // input's batch axis when it is the axis's export size; for an input without a batch (a
  // class token), a leading element equal to an export batch above 1 (a batch of 1 is a
  // broadcast, which the consumer re-batches). Returns where the batch is in the output (no
  // batch when nothing was attributed to it).
  absl::StatusOr<BatchAxis> RebatchExpandShape(const onnx::NodeProto& n, const Value& x,
                                               std::vector<int64_t>& shape) {
    const int64_t batch = static_cast<int64_t>(options_.batch);
    const int64_t rank = std::max<int64_t>(shape.size(), x.shape.size());
    const int64_t shift = rank - static_cast<int64_t>(shape.size());
    if (x.batch.has_batch()) {
      const int64_t at = x.batch.axis + rank - static_cast<int64_t>(x.shape.size()) - shift;
      const int64_t exported = x.shape[x.batch.axis] / batch * export_batch_;
      if (at >= 0 && shape[at] == exported && exported != x.shape[x.batch.axis]) {
        shape[at] = x.shape[x.batch.axis];
      }
      return BatchAxis{};
    }
    if (x.batch_lost || export_batch_ == 1 || shift != 0 || shape.empty() ||
        shape[0] != export_batch_) {
      return BatchAxis{};
    }
    const int64_t x_shift = rank - static_cast<int64_t>(x.shape.size());
    if (x_shift == 0 && x.shape[0] != 1) {
      return Fail(n, StrCat("expands ", ShapeString(x.shape), " to [", absl::StrJoin(shape, ","),
                            "], whose first dim is the export batch ", export_batch_,
                            ", but the input's is not 1, so the batch cannot be attributed"));
    }
    shape[0] = batch;
    return BatchAxis{0, 1, 1};
  }

  // Tile of size-1 axes (repeating one row is broadcasting it): an Expand. Re-batching, a
  // literal repeat of the export batch (above 1) over the leading size-1 axis of a tensor
  // without a batch becomes the imported batch, as Expand's shape does.
  absl::Status Tile(const onnx::NodeProto& n) {
    ASSIGN_OR_RETURN(Value * x, Find(n.input(0)));
    ASSIGN_OR_RETURN(auto c, KnownInput(n, 1, "repeats"));
    std::vector<int64_t> repeats = c->ints();
    if (repeats.size() != x->shape.size()) {
      return Fail(n, StrCat(repeats.size(), " repeats for input ", ShapeString(x->shape)));
    }
    BatchAxis out_batch;
    if (rebatch_ && !values_.at(n.input(1)).from_shape) {
      if (x->batch.has_batch() && repeats[x->batch.axis] != 1) {
        return Fail(n, StrCat("repeats axis ", x->batch.axis, " of input '", n.input(0), "' ",
                              ShapeString(x->shape), ", which holds the batch"));
      }
      if (!x->batch.has_batch() && !x->batch_lost && export_batch_ > 1 &&
          repeats[0] == export_batch_ && x->shape[0] == 1) {
        repeats[0] = static_cast<int64_t>(options_.batch);
        out_batch = BatchAxis{0, 1, 1};
      }
    }
    Shape target = x->shape;
    for (size_t d = 0; d < repeats.size(); ++d) {
      if (repeats[d] == 1) continue;
      if (x->shape[d] != 1 || repeats[d] < 1) {
        return Fail(n, StrCat("repeats axis ", d, " of ", ShapeString(x->shape), " ", repeats[d],
                              " times; Headroom tiles only axes of size 1 (an Expand)"));
      }
      target[d] = repeats[d];
    }
    if (target == x->shape) return Alias(n, n.input(0));
    ASSIGN_OR_RETURN(std::string input, Tensor(n.input(0)));
    RETURN_IF_ERROR(EmitFor(n, "Expand", {input}, {{"shape", IntsAttr(target)}}));
    if (out_batch.has_batch()) values_.at(n.output(0)).batch = out_batch;
    return absl::OkStatus();
  }

  // Where(known condition, x, known value) with one operand computed (GPT-2's causal mask):
  // x * m + b, with m 1 where x is taken and b the known value elsewhere.
  absl::Status Where(const onnx::NodeProto& n) {
    const bool x_known = Known(n.input(1)), y_known = Known(n.input(2));
    if (!Known(n.input(0)) || x_known == y_known) {
      return Fail(n, "Headroom takes Where with a known condition and exactly one computed "
                     "operand");
    }
    const OnnxTensor& cond = *values_.at(n.input(0)).constant;
    const OnnxTensor& other = *values_.at(n.input(x_known ? 1 : 2)).constant;
    const OnnxTensor one = OnnxTensor::Floats({1.0}, {}), zero = OnnxTensor::Floats({0.0}, {});
    const OnnxTensor floats = OnnxTensor::Floats(other.floats(), other.shape());
    onnx::NodeProto where;
    where.set_op_type("Where");
    where.set_name(n.name());
    where.add_output("m");
    // Taking the computed operand where the condition is true (x) or false (y).
    const OnnxTensor* take_data[2] = {x_known ? &zero : &one, x_known ? &one : &zero};
    ASSIGN_OR_RETURN(std::vector<OnnxTensor> mask,
                     FoldOnnxNode(where, {&cond, take_data[0], take_data[1]}, opset_));
    ASSIGN_OR_RETURN(std::vector<OnnxTensor> fill,
                     FoldOnnxNode(where, {&cond, x_known ? &floats : &zero, x_known ? &zero : &floats},
                                  opset_));
    ASSIGN_OR_RETURN(std::string x, Tensor(n.input(x_known ? 2 : 1)));
    ASSIGN_OR_RETURN(std::string m, FloatConstant(StrCat(n.output(0), ".keep"), mask[0]));
    ASSIGN_OR_RETURN(std::string b, FloatConstant(StrCat(n.output(0), ".fill"), fill[0]));
    ASSIGN_OR_RETURN(std::vector<std::string> kept,
                     Emit("Mul", NodeName(n), {x, m}, {UniqueTensor(n.output(0) + ".kept")}));
    ASSIGN_OR_RETURN(std::vector<std::string> out,
                     Emit("Add", NodeName(n) + ".fill", {kept[0], b}, {UniqueTensor(n.output(0))}));
    Bind(n.output(0), out[0]);
    return absl::OkStatus();
  }

  absl::Status Identity(const onnx::NodeProto& n) {
    ASSIGN_OR_RETURN(Value * x, Find(n.input(0)));
    if (x->constant != nullptr && x->tensor.empty()) {
      // An exporter's alias of an initializer (eval-mode exports merge equal ones): a tensor
      // of its own under this name.
      Value v = *x;
      values_[n.output(0)] = std::move(v);
      return absl::OkStatus();
    }
    return Alias(n, n.input(0));
  }

  absl::Status Cast(const onnx::NodeProto& n) {
    ASSIGN_OR_RETURN(Value * x, Find(n.input(0)));
    absl::StatusOr<proto::DType> to =
        HeadroomDType(static_cast<OnnxDType>(OnnxIntAttr(n, "to", onnx::TensorProto::FLOAT)));
    if (!to.ok() || *to != x->dtype) {
      return Fail(n, "casts a computed tensor to another type; Headroom keeps each tensor's dtype");
    }
    return Alias(n, n.input(0));
  }

  const onnx::ModelProto& model_;
  const onnx::GraphProto& graph_;
  const OnnxImportOptions& options_;
  const std::string external_dir_;
  int64_t opset_ = 0;
  // Re-batching: the inputs have a fixed first dimension, export_batch_, other than
  // options_.batch (the first such input named for messages).
  bool rebatch_ = false;
  int64_t export_batch_ = 0;
  std::string first_input_;
  ImportedModel out_;
  absl::node_hash_map<std::string, Value> values_;
  // Every Headroom tensor made so far, with its shape and dtype.
  absl::flat_hash_map<std::string, std::pair<Shape, proto::DType>> shapes_;
  absl::flat_hash_set<std::string> reserved_;
  absl::flat_hash_set<std::string> node_names_;
  // Readers of each ONNX value (graph outputs count).
  absl::flat_hash_map<std::string, int> readers_;
  // ONNX MatMul outputs -> index of their Headroom MatMul node (for bias fusion).
  absl::flat_hash_map<std::string, int> matmul_nodes_;
};

const absl::flat_hash_map<std::string, Importer::Converter>& Importer::Converters() {
  static const auto* converters = new absl::flat_hash_map<std::string, Converter>{
      {"Add", &Importer::Arithmetic},
      {"AveragePool", &Importer::AveragePool},
      {"BatchNormalization", &Importer::BatchNormalization},
      {"Cast", &Importer::Cast},
      {"Clip", &Importer::Clip},
      {"Concat", &Importer::Concat},
      {"Conv", &Importer::Conv},
      {"ConvTranspose", &Importer::ConvTranspose},
      {"Div", &Importer::Arithmetic},
      {"Dropout", &Importer::Dropout},
      {"Einsum", &Importer::Einsum},
      {"Elu", &Importer::Elu},
      {"Erf", &Importer::Erf},
      {"Expand", &Importer::Expand},
      {"Flatten", &Importer::Flatten},
      {"Gather", &Importer::Gather},
      {"Gemm", &Importer::Gemm},
      {"GlobalAveragePool", &Importer::GlobalAveragePool},
      {"HardSigmoid", &Importer::HardSigmoid},
      {"HardSwish", &Importer::HardSwish},
      {"Identity", &Importer::Identity},
      {"InstanceNormalization", &Importer::InstanceNormalization},
      {"LayerNormalization", &Importer::LayerNormalization},
      {"LeakyRelu", &Importer::LeakyRelu},
      {"PRelu", &Importer::PRelu},
      {"Pow", &Importer::Pow},
      {"MatMul", &Importer::MatMul},
      {"MaxPool", &Importer::MaxPool},
      {"Mish", &Importer::Mish},
      {"Mul", &Importer::Arithmetic},
      {"Pad", &Importer::Pad},
      {"ReduceMean", &Importer::ReduceMean},
      {"ReduceSum", &Importer::ReduceSum},
      {"ReduceMax", &Importer::ReduceMax},
      {"ReduceMin", &Importer::ReduceMin},
      {"Relu", &Importer::Relu},
      {"Resize", &Importer::Resize},
      {"Reshape", &Importer::Reshape},
      {"Selu", &Importer::Selu},
      {"Sigmoid", &Importer::Sigmoid},
      {"Slice", &Importer::Slice},
      {"Softmax", &Importer::Softmax},
      {"Softplus", &Importer::Softplus},
      {"Split", &Importer::Split},
      {"Sqrt", &Importer::Sqrt},
      {"Squeeze", &Importer::Squeeze},
      {"Sub", &Importer::Arithmetic},
      {"Tanh", &Importer::Tanh},
      {"Tile", &Importer::Tile},
      {"Transpose", &Importer::Transpose},
      {"Unsqueeze", &Importer::Unsqueeze},
      {"Upsample", &Importer::Upsample},
      {"Where", &Importer::Where},
  };
  return *converters;
}

}  // namespace

std::string OnnxImportStats::DebugString() const {
  return StrCat("opset ", opset, ": ", onnx_nodes, " ONNX nodes -> ", headroom_nodes,
                " Headroom nodes (", folded, " folded, ", fused, " fused, ", elided,
                " elided); ", parameters, " parameters (", parameter_elements, " elements), ",
                buffers, " buffers");
}

absl::StatusOr<ImportedModel> ImportOnnx(const std::string& model_bytes,
                                         const OnnxImportOptions& options,
                                         const std::string& external_dir) {
  onnx::ModelProto model;
  if (!model.ParseFromString(model_bytes)) {
    return InvalidArgumentError(StrCat("not an ONNX model: ", model_bytes.size(),
                                       " bytes that do not parse as onnx.ModelProto"));
  }
  return Importer(model, options, external_dir).Run();
}

absl::StatusOr<ImportedModel> ImportOnnxFile(const std::string& path,
                                             const OnnxImportOptions& options) {
  // 1. Parse straight from the mapped file: a model is up to 2 GiB, and reading it into a
  //    string first costs as much again as parsing it.
  const int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return absl::NotFoundError(StrCat("cannot open ONNX model '", path, "'"));
  struct stat st {};
  fstat(fd, &st);
  if (st.st_size > std::numeric_limits<int>::max()) {
    close(fd);
    return InvalidArgumentError(StrCat(path, ": ", st.st_size, " bytes, over protobuf's 2 GiB; ",
                                       "export the weights as external data"));
  }
  onnx::ModelProto model;
  bool parsed = false;
  if (st.st_size > 0) {
    void* data = mmap(nullptr, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (data != MAP_FAILED) {
      parsed = model.ParseFromArray(data, static_cast<int>(st.st_size));
      munmap(data, st.st_size);
    }
  }
  close(fd);
  if (!parsed) {
    return InvalidArgumentError(StrCat(path, ": not an ONNX model (", st.st_size,
                                       " bytes that do not parse as onnx.ModelProto)"));
  }
  // 2. Import it, named after the file and reading external data beside it.
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  OnnxImportOptions named = options;
  if (named.name.empty()) {  // the file's stem: "resnet18" for .../resnet18.onnx
    std::string stem = slash == std::string::npos ? path : path.substr(slash + 1);
    if (stem == "model.onnx" && slash != std::string::npos) {  // DIR/<model>/model.onnx
      const size_t up = dir.rfind('/');
      stem = up == std::string::npos ? dir : dir.substr(up + 1);
    }
    named.name = stem.substr(0, stem.rfind(".onnx"));
  }
  absl::StatusOr<ImportedModel> imported = Importer(model, named, dir).Run();
  if (!imported.ok()) {
    return absl::Status(imported.status().code(), StrCat(path, ": ", imported.status().message()));
  }
  return imported;
}

std::vector<std::string> OnnxImportableOps() {
  std::vector<std::string> ops;
  for (const auto& [op, converter] : Importer::Converters()) ops.push_back(op);
  for (const char* op : {"Constant", "Shape", "ConstantOfShape", "Range", "ScatterND", "Equal",
                         "Not", "Mod", "Pow", "Erf", "Sqrt", "Neg", "Less", "Greater"}) {
    ops.push_back(op);
  }
  std::sort(ops.begin(), ops.end());
  ops.erase(std::unique(ops.begin(), ops.end()), ops.end());
  return ops;
}

}  // namespace headroom::graph
