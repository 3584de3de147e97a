// UploadJob's stream (proto/headroom.proto, SubmitJobChunk) joined into the JobSpec that
// SubmitJob takes: the checks on each message, the model's size against --max-upload-bytes,
// and the bytes all uploads in flight hold together.
//
// A JobUpload takes one stream's messages in order: Add() for each, then Finish(), which
// returns the spec with its model's bytes joined. Its bytes (reserved from the shared
// UploadBudget when the first message declares the model's size) are given back when it is
// destroyed, so a stream abandoned at any point frees what it held.
//
// Limits: a chunk at most kMaxUploadChunkBytes; a model at most the budget's limit, which
// is also what every upload in flight may hold together. The daemon's --max-upload-bytes
// is at most kMaxUploadBytesLimit.
//
// Thread-safety: an UploadBudget is thread-safe and outlives its uploads; a JobUpload is
// used by one thread.
#ifndef HEADROOM_SERVER_JOB_UPLOAD_H_
#define HEADROOM_SERVER_JOB_UPLOAD_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/headroom.pb.h"

namespace headroom::server {

// The most bytes one SubmitJobChunk.onnx_model_chunk may hold: 4 MiB.
inline constexpr uint64_t kMaxUploadChunkBytes = 4ull << 20;
// The chunk size clients send: 512 KiB, below any --max-message-bytes a daemon is likely to
// have (gRPC's own default is 4 MiB).
inline constexpr uint64_t kUploadChunkBytes = 512ull << 10;
// headroomd's --max-upload-bytes default: 512 MiB.
inline constexpr uint64_t kDefaultMaxUploadBytes = 512ull << 20;
// The most --max-upload-bytes may be: 768 MiB. The job is stored as one JobInfo row holding
// the model (SQLite's blob limit is 1e9 bytes, protobuf parses at most 2 GiB).
inline constexpr uint64_t kMaxUploadBytesLimit = 768ull << 20;

// The model bytes that uploads in flight hold, against one limit (--max-upload-bytes).
class UploadBudget {
 public:
  explicit UploadBudget(uint64_t limit_bytes) : limit_bytes_(limit_bytes) {}

  // Returns OK once `bytes` are reserved. ResourceExhausted naming --max-upload-bytes and
  // its value when `bytes` alone exceed it, or when the uploads in flight hold too much of it
  // for `bytes` more.
  absl::Status Reserve(uint64_t bytes);
  // Gives back `bytes` reserved before.
  void Release(uint64_t bytes);

  // The limit.
  uint64_t limit_bytes() const { return limit_bytes_; }
  // Returns the bytes reserved now.
  uint64_t held_bytes() const;

 private:
  const uint64_t limit_bytes_;
  mutable absl::Mutex mu_;
  uint64_t held_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

class JobUpload {
 public:
  // An upload reserving from `budget` (borrowed; it must outlive this).
  explicit JobUpload(UploadBudget* budget) : budget_(budget) {}
  // Gives back its reservation.
  ~JobUpload();
  JobUpload(const JobUpload&) = delete;
  JobUpload& operator=(const JobUpload&) = delete;

  // Returns OK after taking the stream's next message. InvalidArgument, naming the message
  // by its position from 1, for a first message without a spec or size, a spec whose model
  // is not an ONNX model or carries bytes inline, a later spec or size, a message with
  // neither, a chunk over kMaxUploadChunkBytes, or chunks beyond the declared size;
  // ResourceExhausted from the budget for the declared size. After an error the upload is
  // abandoned: do not call Add() or Finish() again.
  absl::Status Add(const proto::SubmitJobChunk& message);

  // Returns the spec with its model's onnx_model set to the joined chunks. InvalidArgument
  // for a stream without a spec, or whose chunks fall short of the declared size.
  // REQUIRES: called once, after the last Add().
  absl::StatusOr<proto::JobSpec> Finish();

  // The model bytes received so far.
  uint64_t received_bytes() const { return model_.size(); }

 private:
  // Returns OK for the first message's spec and size, reserving the size.
  absl::Status Start(const proto::SubmitJobChunk& message);

  UploadBudget* const budget_;
  // Messages taken, counting the one being added.
  uint64_t messages_ = 0;
  std::optional<proto::JobSpec> spec_;
  uint64_t declared_bytes_ = 0;
  uint64_t reserved_bytes_ = 0;
  std::string model_;
};

}  // namespace headroom::server

#endif  // HEADROOM_SERVER_JOB_UPLOAD_H_
