#include "server/job_upload.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "graph/summary.h"
#include "util/status_macros.h"

namespace headroom::server {
namespace {

// Returns "N bytes (H)", H the size for people.
std::string Bytes(uint64_t bytes) {
  return absl::StrCat(bytes, " bytes (", graph::HumanBytes(bytes), ")");
}

// Returns InvalidArgument "UploadJob: message N: <what>".
absl::Status BadMessage(uint64_t position, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("UploadJob: message ", position, ": ", what));
}

// Returns OK when `model` is an ONNX model to be uploaded: import options, no bytes inline.
absl::Status CheckUploadedModel(const proto::ModelSource& model) {
  switch (model.source_case()) {
    case proto::ModelSource::kGraph:
      return absl::InvalidArgumentError(
          "spec.model is a graph description; UploadJob uploads ONNX models (send a "
          "description with SubmitJob)");
    case proto::ModelSource::kZoo:
      return absl::InvalidArgumentError(
          "spec.model is a zoo model; UploadJob uploads ONNX models (send a zoo model with "
          "SubmitJob)");
    case proto::ModelSource::kOnnxModel:
      if (!model.onnx_model().empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "spec.model.onnx_model carries ", model.onnx_model().size(),
            " bytes inline; leave it empty and send the model as onnx_model_chunk messages"));
      }
      return absl::OkStatus();
    case proto::ModelSource::SOURCE_NOT_SET:
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status UploadBudget::Reserve(uint64_t bytes) {
  if (bytes > limit_bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat("UploadJob: the model is ", Bytes(bytes),
                                                     ", over headroomd's --max-upload-bytes of ",
                                                     Bytes(limit_bytes_)));
  }
  absl::MutexLock lock(&mu_);
  if (bytes > limit_bytes_ - held_bytes_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("UploadJob: uploads in flight hold ", Bytes(held_bytes_), "; this model's ",
                     Bytes(bytes), " more would pass headroomd's --max-upload-bytes of ",
                     Bytes(limit_bytes_), " (try again when they end)"));
  }
  held_bytes_ += bytes;
  return absl::OkStatus();
}

void UploadBudget::Release(uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  held_bytes_ -= std::min(bytes, held_bytes_);
}

uint64_t UploadBudget::held_bytes() const {
  absl::MutexLock lock(&mu_);
  return held_bytes_;
}

JobUpload::~JobUpload() { budget_->Release(reserved_bytes_); }

absl::Status JobUpload::Start(const proto::SubmitJobChunk& message) {
  if (message.part_case() != proto::SubmitJobChunk::kSpec) {
    return BadMessage(1, "the first message must carry the job's spec (and onnx_model_bytes)");
  }
  if (message.onnx_model_bytes() == 0) {
    return BadMessage(1, "onnx_model_bytes, the model's size, must be given (more than 0)");
  }
  if (absl::Status s = CheckUploadedModel(message.spec().model()); !s.ok()) {
    return BadMessage(1, s.message());
  }
  RETURN_IF_ERROR(budget_->Reserve(message.onnx_model_bytes()));
  reserved_bytes_ = declared_bytes_ = message.onnx_model_bytes();
  // Room for the whole model at once: growing by doubling would copy it and, for a moment,
  // hold up to twice its size. The pages are touched only as chunks fill them.
  model_.reserve(declared_bytes_);
  spec_ = message.spec();
  return absl::OkStatus();
}

absl::Status JobUpload::Add(const proto::SubmitJobChunk& message) {
  ++messages_;
  if (messages_ == 1) return Start(message);
  switch (message.part_case()) {
    case proto::SubmitJobChunk::kSpec:
      return BadMessage(messages_, "a second spec; only the first message carries one");
    case proto::SubmitJobChunk::PART_NOT_SET:
      return BadMessage(messages_, "carries neither a spec nor an onnx_model_chunk");
    case proto::SubmitJobChunk::kOnnxModelChunk:
      break;
  }
  if (message.onnx_model_bytes() != 0) {
    return BadMessage(messages_, "only the first message gives onnx_model_bytes");
  }
  const uint64_t bytes = message.onnx_model_chunk().size();
  if (bytes > kMaxUploadChunkBytes) {
    return BadMessage(messages_, absl::StrCat("the chunk is ", Bytes(bytes), ", over the ",
                                              Bytes(kMaxUploadChunkBytes), " a chunk may hold"));
  }
  if (bytes > declared_bytes_ - model_.size()) {
    return BadMessage(messages_, absl::StrCat("the chunks carry more than the ", declared_bytes_,
                                              " bytes of onnx_model_bytes"));
  }
  model_.append(message.onnx_model_chunk());
  return absl::OkStatus();
}

absl::StatusOr<proto::JobSpec> JobUpload::Finish() {
  if (!spec_.has_value()) {
    return absl::InvalidArgumentError("UploadJob: the stream ended without a spec");
  }
  if (model_.size() != declared_bytes_) {
    return absl::InvalidArgumentError(absl::StrCat("UploadJob: the stream ended after ",
                                                   model_.size(), " of the ", declared_bytes_,
                                                   " bytes of onnx_model_bytes"));
  }
  proto::JobSpec spec = *std::move(spec_);
  spec_.reset();
  spec.mutable_model()->set_onnx_model(std::move(model_));
  model_.clear();
  return spec;
}

}  // namespace headroom::server
