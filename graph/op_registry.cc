#include "graph/op_registry.h"

#include <algorithm>
#include <memory>

#include "absl/container/flat_hash_map.h"
#include "util/check.h"
#include "absl/strings/str_cat.h"

namespace headroom::graph {

// Defined in op_set.cc: the schemas of every op.
std::vector<OpSchema> BuildOpSet();

namespace {

const absl::flat_hash_map<std::string, OpSchema>& Registry() {
  static const auto* registry = [] {
    auto* map = new absl::flat_hash_map<std::string, OpSchema>();
    for (OpSchema& schema : BuildOpSet()) {
      std::string name = schema.name;
      CHECK(map->emplace(name, std::move(schema)).second) << "op defined twice: " << name;
    }
    return map;
  }();
  return *registry;
}

}  // namespace

const char* AttrTypeName(AttrType type) {
  switch (type) {
    case AttrType::kInt:
      return "int";
    case AttrType::kFloat:
      return "float";
    case AttrType::kString:
      return "string";
    case AttrType::kBool:
      return "bool";
    case AttrType::kInts:
      return "list of ints";
    case AttrType::kFloats:
      return "list of floats";
  }
  return "unknown";
}

absl::StatusOr<AttrType> AttrTypeOf(const proto::AttrValue& value) {
  switch (value.value_case()) {
    case proto::AttrValue::kI:
      return AttrType::kInt;
    case proto::AttrValue::kF:
      return AttrType::kFloat;
    case proto::AttrValue::kS:
      return AttrType::kString;
    case proto::AttrValue::kB:
      return AttrType::kBool;
    case proto::AttrValue::kInts:
      return AttrType::kInts;
    case proto::AttrValue::kFloats:
      return AttrType::kFloats;
    case proto::AttrValue::VALUE_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError("attribute has no value");
}

const proto::AttrValue& Attrs::Get(const std::string& name) const {
  auto it = values_.find(name);
  CHECK(it != values_.end()) << "attribute '" << name << "' is not declared by the op";
  return it->second;
}

int64_t Attrs::Int(const std::string& name) const { return Get(name).i(); }
double Attrs::Float(const std::string& name) const { return Get(name).f(); }
bool Attrs::Bool(const std::string& name) const { return Get(name).b(); }
const std::string& Attrs::String(const std::string& name) const { return Get(name).s(); }

std::vector<int64_t> Attrs::Ints(const std::string& name) const {
  const auto& v = Get(name).ints().values();
  return std::vector<int64_t>(v.begin(), v.end());
}

std::vector<double> Attrs::Floats(const std::string& name) const {
  const auto& v = Get(name).floats().values();
  return std::vector<double>(v.begin(), v.end());
}

std::string InferenceContext::Input(int i) const {
  return absl::StrCat("input '", input_names[i], "'");
}

const OpSchema* FindOp(const std::string& op) {
  const auto& registry = Registry();
  auto it = registry.find(op);
  return it == registry.end() ? nullptr : &it->second;
}

std::vector<const OpSchema*> AllOps() {
  std::vector<const OpSchema*> ops;
  for (const auto& [name, schema] : Registry()) ops.push_back(&schema);
  std::sort(ops.begin(), ops.end(),
            [](const OpSchema* a, const OpSchema* b) { return a->name < b->name; });
  return ops;
}

}  // namespace headroom::graph
