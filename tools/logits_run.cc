#include "tools/logits_run.h"

#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "executor/backends.h"
#include "executor/trainer.h"
#include "util/status_macros.h"

namespace headroom::tools {

absl::Status WriteLogits(const graph::Graph& g, const std::vector<proto::TensorValue>& values,
                         const std::string& inputs_path, const std::string& out_path) {
  executor::TrainerOptions options;
  for (const proto::TensorValue& v : values) {
    options.initial_values.push_back(executor::HostTensorFromValue(v));
  }
  const graph::Tensor& loss = g.tensor(g.loss());
  options.capture = {g.tensor(g.node(loss.producer).inputs[0]).name};
  ASSIGN_OR_RETURN(std::unique_ptr<executor::Backend> backend, executor::MakeBackend("cpu"));
  ASSIGN_OR_RETURN(std::unique_ptr<executor::Trainer> trainer,
                   executor::Trainer::Create(g, backend.get(), options));
  std::ifstream in(inputs_path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", inputs_path));
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                   std::istreambuf_iterator<char>());
  std::vector<executor::HostTensor> batch;
  for (const graph::Tensor& t : g.tensors()) {
    if (t.role == proto::ROLE_INPUT) {
      executor::HostTensor input = executor::MakeHostTensor(t.name, t.shape, t.dtype);
      if (bytes.size() != input.bytes.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat(inputs_path, ": ", bytes.size(), " bytes; input '", t.name, "' ",
                         graph::ShapeString(t.shape), " takes ", input.bytes.size()));
      }
      input.bytes = bytes;
      batch.push_back(std::move(input));
    } else if (t.role == proto::ROLE_LABEL) {
      batch.push_back(executor::MakeHostTensor(t.name, t.shape, t.dtype));
    }
  }
  ASSIGN_OR_RETURN(executor::StepResult step, trainer->StepOn(batch));
  if (step.captured.size() != 1) {
    return absl::InternalError(absl::StrCat("captured ", step.captured.size(), " tensors"));
  }
  const executor::HostTensor& out = step.captured[0];
  std::ofstream file(out_path, std::ios::binary);
  file.write(reinterpret_cast<const char*>(out.bytes.data()),
             static_cast<std::streamsize>(out.bytes.size()));
  if (!file) return absl::InternalError(absl::StrCat("cannot write ", out_path));
  std::cout << "logits " << graph::ShapeString(out.shape) << " -> " << out_path << "\n";
  return absl::OkStatus();
}

}  // namespace headroom::tools
