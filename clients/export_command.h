// `headroom export`: a trained model as an ONNX model to serve (graph/onnx_export.h: the
// forward graph in inference form with its weights).
//
//   headroom export --job ID --out model.onnx [--server ADDR]   a daemon job's trained model
//   headroom export --model small_cnn --batch 8 --checkpoint PATH --out model.onnx
//   headroom export --model small_cnn --batch 8 [--seed N] --out model.onnx  (untrained)
//
// --checkpoint reads a checkpoint file (a serialized headroom.proto.Checkpoint, the message
// headroomd keeps for a job) or the directory `headroom train --export DIR` wrote (its
// final_state.bin, laid out by headroom.json). Every parameter and buffer of the model must
// be in it, with the model's shape and dtype: a checkpoint of another model is an error
// naming the tensor.
#ifndef HEADROOM_CLIENTS_EXPORT_COMMAND_H_
#define HEADROOM_CLIENTS_EXPORT_COMMAND_H_

#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "clients/cli.h"
#include "graph/graph.h"
#include "proto/headroom.pb.h"

namespace headroom::clients {

// Returns the tensors of the checkpoint at `path` for `forward`: a serialized
// proto::Checkpoint file, or a `headroom train --export` directory (whose tensors take their
// shapes and dtypes from `forward`). NotFound for a missing path; InvalidArgument naming the
// file for one that does not parse, holds no tensors, or whose tensor sizes do not fit
// `forward`.
absl::StatusOr<std::vector<proto::TensorValue>> ReadCheckpoint(const std::string& path,
                                                               const graph::Graph& forward);

Command AddExportCommand(CLI::App& headroom, const CommandIo& io);

}  // namespace headroom::clients

#endif  // HEADROOM_CLIENTS_EXPORT_COMMAND_H_
