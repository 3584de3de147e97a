// The op set: for each op its inputs, outputs, typed attributes with defaults, and its shape
// and dtype inference.
#ifndef HEADROOM_GRAPH_OP_REGISTRY_H_
#define HEADROOM_GRAPH_OP_REGISTRY_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "graph/shape.h"
#include "proto/headroom.pb.h"

namespace headroom::graph {

// The type an attribute must have.
enum class AttrType { kInt, kFloat, kString, kBool, kInts, kFloats };

// Returns "int", "float", ... for messages.
const char* AttrTypeName(AttrType type);

// Returns the type of a set attribute value, or InvalidArgument if no value is set.
absl::StatusOr<AttrType> AttrTypeOf(const proto::AttrValue& value);

// One attribute an op accepts.
struct AttrSpec {
  std::string name;
  AttrType type;
  // Whether the graph must set it; otherwise `default_value` fills it in.
  bool required = false;
  proto::AttrValue default_value;
};

// The attributes of one node after validation: every declared attribute is present (set by
// the graph or filled from its default) and has its declared type. Read-only and cheap to copy.
class Attrs {
 public:
  Attrs() = default;
  explicit Attrs(std::map<std::string, proto::AttrValue> values) : values_(std::move(values)) {}

  // Returns the value of an attribute. REQUIRES: the op declares `name` with that type.
  int64_t Int(const std::string& name) const;
  double Float(const std::string& name) const;
  bool Bool(const std::string& name) const;
  const std::string& String(const std::string& name) const;
  std::vector<int64_t> Ints(const std::string& name) const;
  std::vector<double> Floats(const std::string& name) const;

  const std::map<std::string, proto::AttrValue>& values() const { return values_; }

 private:
  const proto::AttrValue& Get(const std::string& name) const;
  std::map<std::string, proto::AttrValue> values_;
};

// What an inference function sees of one node: its inputs' names, shapes and dtypes, and its
// attributes; it fills in the outputs' shapes and dtypes.
struct InferenceContext {
  std::vector<std::string> input_names;
  std::vector<Shape> input_shapes;
  std::vector<proto::DType> input_dtypes;
  Attrs attrs;
  // Sized to the node's number of outputs before the call.
  std::vector<Shape> output_shapes;
  std::vector<proto::DType> output_dtypes;

  // Returns "input 'x'" for input i, for error messages.
  std::string Input(int i) const;
};

// Computes output shapes and dtypes; returns InvalidArgument naming the input at fault (the
// caller prefixes the node). Runs only after input and attribute counts and types are checked.
using InferFn = std::function<absl::Status(InferenceContext&)>;

// One op of the op set.
struct OpSchema {
  std::string name;
  // Inputs, in order; `num_optional_inputs` trailing ones may be omitted (e.g. a bias).
  // An op with `variadic_inputs` takes at least `input_names.size()` inputs, all alike.
  std::vector<std::string> input_names;
  int num_optional_inputs = 0;
  bool variadic_inputs = false;
  // Outputs, in order. With `variadic_outputs` the node decides the count (at least one).
  std::vector<std::string> output_names;
  bool variadic_outputs = false;
  std::vector<AttrSpec> attrs;
  InferFn infer;
  // One line for people, shown by `headroom ops`.
  std::string doc;
};

// Returns the schema of `op`, or nullptr if Headroom does not know it.
const OpSchema* FindOp(const std::string& op);

// Returns every op's schema, sorted by name.
std::vector<const OpSchema*> AllOps();

}  // namespace headroom::graph

#endif  // HEADROOM_GRAPH_OP_REGISTRY_H_
