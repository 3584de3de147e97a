#include "clients/export_command.h"

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "clients/command_flags.h"
#include "clients/remote_commands.h"
#include "executor/host_tensor.h"
#include "executor/synthetic_data.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "graph/onnx_export.h"
#include "util/file_io.h"
#include "util/json_writer.h"
#include "util/status_macros.h"

namespace headroom::clients {
namespace {

using absl::StrCat;

// How long an export from headroomd may take (it builds the model, then streams it).
constexpr std::chrono::minutes kExportTimeout(10);

// Returns the tensors of a serialized proto::Checkpoint.
absl::StatusOr<std::vector<proto::TensorValue>> ReadCheckpointFile(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string bytes, ReadFileContents(path, "checkpoint"));
  proto::Checkpoint checkpoint;
  if (!checkpoint.ParseFromString(bytes)) {
    return absl::InvalidArgumentError(
        StrCat("--checkpoint ", path, ": not a Headroom checkpoint (a serialized ",
               "headroom.proto.Checkpoint, or the directory `headroom train --export` writes)"));
  }
  if (checkpoint.tensors_size() == 0) {
    return absl::InvalidArgumentError(StrCat("--checkpoint ", path, ": holds no tensors"));
  }
  return std::vector<proto::TensorValue>(checkpoint.tensors().begin(), checkpoint.tensors().end());
}

// Returns the final state `headroom train --export DIR` wrote: DIR/headroom.json's
// "final_state" ({name, offset_bytes, bytes} each) over DIR/final_state.bin, shapes and
// dtypes from `forward`.
absl::StatusOr<std::vector<proto::TensorValue>> ReadTrainExport(const std::string& dir,
                                                                const graph::Graph& forward) {
  const std::string json_path = dir + "/headroom.json", bin_path = dir + "/final_state.bin";
  ASSIGN_OR_RETURN(const std::string json, ReadFileContents(json_path, "training results"));
  ASSIGN_OR_RETURN(const std::string blob, ReadFileContents(bin_path, "final state"));
  google::protobuf::Struct results;
  if (!google::protobuf::util::JsonStringToMessage(json, &results).ok() ||
      !results.fields().contains("final_state")) {
    return absl::InvalidArgumentError(StrCat("--checkpoint ", json_path,
                                             ": not the results `headroom train --export` writes ",
                                             "(no \"final_state\")"));
  }
  std::vector<proto::TensorValue> values;
  for (const google::protobuf::Value& entry :
       results.fields().at("final_state").list_value().values()) {
    const auto& f = entry.struct_value().fields();
    if (!f.contains("name") || !f.contains("offset_bytes") || !f.contains("bytes")) {
      return absl::InvalidArgumentError(StrCat(
          "--checkpoint ", json_path, ": a final_state entry lacks name, offset_bytes or bytes"));
    }
    const std::string& name = f.at("name").string_value();
    const uint64_t offset = static_cast<uint64_t>(f.at("offset_bytes").number_value());
    const uint64_t bytes = static_cast<uint64_t>(f.at("bytes").number_value());
    const graph::TensorId t = forward.FindTensor(name);
    if (t == -1) {
      return absl::InvalidArgumentError(StrCat("--checkpoint ", dir, ": tensor '", name,
                                               "' is not in graph '", forward.name(),
                                               "': the checkpoint is of another model"));
    }
    const graph::Tensor& tensor = forward.tensor(t);
    if (bytes != tensor.bytes() || offset > blob.size() || bytes > blob.size() - offset) {
      return absl::InvalidArgumentError(
          StrCat("--checkpoint ", dir, ": tensor '", name, "' has ", bytes, " bytes at offset ",
                 offset, " of ", blob.size(), "; graph '", forward.name(), "' has it ",
                 graph::DTypeName(tensor.dtype), " ", graph::ShapeString(tensor.shape), " (",
                 tensor.bytes(), " bytes)"));
    }
    proto::TensorValue v;
    v.set_name(name);
    for (int64_t d : tensor.shape) v.add_shape(d);
    v.set_dtype(tensor.dtype);
    v.set_data(blob.substr(offset, bytes));
    values.push_back(std::move(v));
  }
  if (values.empty())
    return absl::InvalidArgumentError(StrCat("--checkpoint ", dir, ": holds no tensors"));
  return values;
}

proto::TensorValue ValueOf(const executor::HostTensor& t) {
  proto::TensorValue v;
  v.set_name(t.name);
  for (int64_t d : t.shape) v.add_shape(d);
  v.set_dtype(t.dtype);
  v.set_data(std::string(t.bytes.begin(), t.bytes.end()));
  return v;
}

struct ExportCommand {
  ModelFlags model;
  std::string checkpoint;
  int64_t seed = 1;
  std::string out;
  bool fixed_batch = false;
  std::string job;
  ServiceFlags service;
  const CLI::App* app = nullptr;

  absl::Status Run(const CommandIo& io) {
    if (out.empty()) return absl::InvalidArgumentError("--out FILE is required");
    if (!job.empty()) return RunRemote(io);
    if (!checkpoint.empty() && app->count("--seed") > 0) {
      return absl::InvalidArgumentError(
          "--seed initialises an untrained model; --checkpoint gives the weights");
    }
    // 1. The model and its weights: the checkpoint's, an ONNX model's own, or seeded.
    ASSIGN_OR_RETURN(LoadedModel loaded, LoadModel(model, /*with_values=*/checkpoint.empty()));
    ASSIGN_OR_RETURN(graph::Graph g, graph::Graph::FromProto(loaded.graph));
    std::vector<proto::TensorValue> values;
    std::string weights;
    if (!checkpoint.empty()) {
      ASSIGN_OR_RETURN(values, ReadCheckpoint(checkpoint, g));
      weights = StrCat("the weights of ", checkpoint);
    } else if (!loaded.values.empty()) {
      values = std::move(loaded.values);
      weights = "the ONNX model's own weights";
    } else {
      for (const executor::HostTensor& t : executor::InitialState(g, static_cast<uint64_t>(seed))) {
        values.push_back(ValueOf(t));
      }
      weights = StrCat("untrained weights (seed ", seed, ")");
    }
    // 2. The export, checked by ONNX's checker, to the file.
    graph::OnnxExportOptions options;
    options.dynamic_batch = !fixed_batch;
    if (!checkpoint.empty()) options.metadata.push_back({"headroom.checkpoint", checkpoint});
    ASSIGN_OR_RETURN(graph::OnnxExport e, graph::ExportOnnx(g, values, options));
    values.clear();
    const std::string bytes = e.model.SerializeAsString();
    RETURN_IF_ERROR(WriteFileContents(out, bytes, "ONNX model"));
    Report(io, bytes.size(), e.stats.DebugString(), weights);
    return absl::OkStatus();
  }

  absl::Status RunRemote(const CommandIo& io) {
    if (!model.model.empty() || !model.graph.empty() || !model.onnx.empty() ||
        !checkpoint.empty()) {
      return absl::InvalidArgumentError(
          "--job exports the job's own model and weights: give no --model, --graph, --onnx or "
          "--checkpoint");
    }
    ASSIGN_OR_RETURN(std::unique_ptr<proto::Headroom::StubInterface> stub,
                     Connect(service, io, "cpu"));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + kExportTimeout);
    proto::ExportModelRequest request;
    request.set_job_id(job);
    request.set_fixed_batch(fixed_batch);
    std::unique_ptr<grpc::ClientReaderInterface<proto::ExportModelChunk>> reader =
        stub->ExportModel(&context, request);
    proto::ExportModelChunk chunk;
    std::optional<proto::ExportModelChunk> first;
    std::string bytes;
    while (reader->Read(&chunk)) {
      if (!first.has_value()) {
        first = chunk;
        bytes.reserve(chunk.onnx_model_bytes());
      }
      bytes += chunk.onnx_model_chunk();
    }
    if (grpc::Status status = reader->Finish(); !status.ok()) {
      return FromRpc(status, AddressOf(service));
    }
    if (!first.has_value() || bytes.size() != first->onnx_model_bytes()) {
      return absl::DataLossError(StrCat("job '", job, "': received ", bytes.size(),
                                        " bytes of a model of ",
                                        first.has_value() ? first->onnx_model_bytes() : 0));
    }
    onnx::ModelProto model_proto;
    if (!model_proto.ParseFromString(bytes)) {
      return absl::DataLossError(StrCat("job '", job, "': the model received does not parse"));
    }
    RETURN_IF_ERROR(graph::CheckOnnxModel(model_proto));
    RETURN_IF_ERROR(WriteFileContents(out, bytes, "ONNX model"));
    Report(io, bytes.size(), first->summary(),
           StrCat("job ", job, "'s weights at step ", first->step()));
    return absl::OkStatus();
  }

  void Report(const CommandIo& io, uint64_t bytes, const std::string& summary,
              const std::string& weights) const {
    if (service.json) {
      JsonWriter w;
      w.BeginObject()
          .Key("out")
          .String(out)
          .Key("bytes")
          .Uint(bytes)
          .Key("weights")
          .String(weights)
          .Key("summary")
          .String(summary)
          .Key("symbolic_batch")
          .Bool(!fixed_batch)
          .EndObject();
      io.out << w.str() << "\n";
      return;
    }
    io.out << "wrote " << out << " (" << bytes << " bytes, ONNX opset " << graph::kOnnxExportOpset
           << ", inference form) with " << weights << "\n"
           << "  " << summary << "\n";
  }
};

}  // namespace

absl::StatusOr<std::vector<proto::TensorValue>> ReadCheckpoint(const std::string& path,
                                                               const graph::Graph& forward) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) return ReadTrainExport(path, forward);
  if (!std::filesystem::exists(path, error)) {
    return absl::NotFoundError(StrCat("--checkpoint ", path, ": no such file or directory"));
  }
  return ReadCheckpointFile(path);
}

Command AddExportCommand(CLI::App& headroom, const CommandIo& io) {
  auto state = std::make_shared<ExportCommand>();
  CLI::App* app = headroom.add_subcommand(
      "export",
      "write a trained model as an ONNX model to serve: the forward graph in inference form "
      "with its weights (a daemon job's, a checkpoint's, or untrained)");
  state->app = app;
  AddModelFlags(*app, state->model);
  app->add_option("--checkpoint", state->checkpoint,
                  "the weights: a checkpoint file (headroom.proto.Checkpoint) or the directory "
                  "`headroom train --export DIR` wrote")
      ->type_name("PATH");
  app->add_option("--seed", state->seed, "without --checkpoint: seed of the untrained weights")
      ->type_name("N");
  app->add_option("--out", state->out, "the ONNX file to write (required)")->type_name("FILE");
  app->add_flag("--fixed-batch", state->fixed_batch,
                "keep the model's own batch instead of a symbolic first dimension");
  app->add_option("--job", state->job, "export headroomd's job ID (its model and trained weights)")
      ->type_name("ID");
  AddServiceFlags(*app, state->service, /*local_without_server=*/false);
  return {app, [state, &io] { return state->Run(io); }};
}

}  // namespace headroom::clients
