#include "executor/reference_export.h"

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "graph/shape.h"
#include "util/json_writer.h"
#include "util/file_io.h"

namespace headroom::executor {
namespace {

absl::Status WriteFile(const std::string& path, const std::string& contents) {
  return WriteFileContents(path, contents, "reference file");
}

absl::Status MakeDir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("cannot create '", dir, "': ", ec.message()));
  return absl::OkStatus();
}

// Appends each tensor's bytes to `blob` and its entry to the open JSON array.
void AppendTensors(const std::vector<HostTensor>& tensors, int64_t step, std::string* blob,
                   JsonWriter& w) {
  for (const HostTensor& t : tensors) {
    w.BeginObject();
    if (step >= 0) w.Key("step").Int(step);
    w.Key("name").String(t.name)
        .Key("offset_bytes").Uint(blob->size())
        .Key("bytes").Uint(t.bytes.size())
        .EndObject();
    blob->append(reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size());
  }
}

void AttrJson(const proto::AttrValue& v, JsonWriter& w) {
  switch (v.value_case()) {
    case proto::AttrValue::kI: w.Int(v.i()); break;
    case proto::AttrValue::kF: w.Double(v.f()); break;
    case proto::AttrValue::kS: w.String(v.s()); break;
    case proto::AttrValue::kB: w.Bool(v.b()); break;
    case proto::AttrValue::kInts:
      w.BeginArray();
      for (int64_t i : v.ints().values()) w.Int(i);
      w.EndArray();
      break;
    case proto::AttrValue::kFloats:
      w.BeginArray();
      for (double f : v.floats().values()) w.Double(f);
      w.EndArray();
      break;
    default: w.Null(); break;
  }
}

}  // namespace

absl::Status WriteReferenceInputs(const std::string& dir, const graph::Graph& forward,
                                  const ReferenceRun& run) {
  if (absl::Status s = MakeDir(dir); !s.ok()) return s;
  JsonWriter w;
  w.BeginObject()
      .Key("name").String(forward.name())
      .Key("loss").String(forward.tensor(forward.loss()).name)
      .Key("tensors").BeginArray();
  for (const graph::Tensor& t : forward.tensors()) {
    w.BeginObject().Key("name").String(t.name).Key("shape").BeginArray();
    for (int64_t d : t.shape) w.Int(d);
    w.EndArray()
        .Key("dtype").String(graph::DTypeName(t.dtype))
        .Key("role").String(graph::RoleName(t.role))
        .EndObject();
  }
  w.EndArray().Key("nodes").BeginArray();
  for (const graph::Node& n : forward.nodes()) {
    w.BeginObject().Key("name").String(n.name).Key("op").String(n.op->name).Key("inputs").BeginArray();
    for (graph::TensorId t : n.inputs) w.String(forward.tensor(t).name);
    w.EndArray().Key("outputs").BeginArray();
    for (graph::TensorId t : n.outputs) w.String(forward.tensor(t).name);
    w.EndArray().Key("attrs").BeginObject();
    for (const auto& [name, value] : n.attrs.values()) {
      w.Key(name);
      AttrJson(value, w);
    }
    w.EndObject().EndObject();
  }
  const OptimizerParams& o = run.optimizer_params;
  w.EndArray()
      .Key("optimizer").BeginObject()
      .Key("kind").String(run.optimizer == proto::Optimizer::KIND_ADAM ? "adam" : "sgd_momentum")
      .Key("learning_rate").Double(o.learning_rate)
      .Key("momentum").Double(o.momentum)
      .Key("beta1").Double(o.beta1)
      .Key("beta2").Double(o.beta2)
      .Key("epsilon").Double(o.epsilon)
      .Key("weight_decay").Double(o.weight_decay)
      .EndObject()
      .Key("steps").Uint(run.batches.size());
  std::string state_blob, batch_blob;
  w.Key("state").BeginArray();
  AppendTensors(run.initial_state, -1, &state_blob, w);
  w.EndArray().Key("batches").BeginArray();
  for (size_t s = 0; s < run.batches.size(); ++s) {
    AppendTensors(run.batches[s], static_cast<int64_t>(s), &batch_blob, w);
  }
  w.EndArray().EndObject();
  if (absl::Status s = WriteFile(dir + "/graph.json", w.str() + "\n"); !s.ok()) return s;
  if (absl::Status s = WriteFile(dir + "/state.bin", state_blob); !s.ok()) return s;
  return WriteFile(dir + "/batches.bin", batch_blob);
}

absl::Status WriteReferenceResults(const std::string& dir, const std::vector<double>& losses,
                                   const std::vector<double>& step_seconds,
                                   const std::vector<HostTensor>& final_state) {
  JsonWriter w;
  w.BeginObject().Key("losses").BeginArray();
  for (double l : losses) w.Double(l);
  w.EndArray().Key("step_seconds").BeginArray();
  for (double s : step_seconds) w.Double(s);
  std::string blob;
  w.EndArray().Key("final_state").BeginArray();
  AppendTensors(final_state, -1, &blob, w);
  w.EndArray().EndObject();
  if (absl::Status s = WriteFile(dir + "/headroom.json", w.str() + "\n"); !s.ok()) return s;
  return WriteFile(dir + "/final_state.bin", blob);
}

}  // namespace headroom::executor
