#include "executor/fit_checkpoint.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "proto/headroom.pb.h"
#include "util/file_io.h"
#include "util/status_macros.h"

namespace headroom::executor {
namespace {

constexpr absl::string_view kMagic = "headroom-fit-checkpoint 1\n";

template <typename Int>
void PutInt(std::string& out, Int value) {
  for (size_t i = 0; i < sizeof(Int); ++i) out.push_back(static_cast<char>(value >> (8 * i)));
}

void PutRecord(std::string& out, absl::string_view key, absl::string_view payload) {
  PutInt<uint32_t>(out, static_cast<uint32_t>(key.size()));
  out.append(key.data(), key.size());
  PutInt<uint64_t>(out, payload.size());
  out.append(payload.data(), payload.size());
}

std::string Exact(double value) { return absl::StrFormat("%.17g", value); }

// Reads records from a checkpoint's bytes.
class RecordReader {
 public:
  RecordReader(const std::string& path, absl::string_view bytes) : path_(path), rest_(bytes) {}

  bool done() const { return rest_.empty(); }

  // Returns the next record's key and payload; InvalidArgument if the file ends in it.
  absl::StatusOr<std::pair<absl::string_view, absl::string_view>> Next() {
    ASSIGN_OR_RETURN(const uint64_t key_bytes, Int(4));
    ASSIGN_OR_RETURN(const absl::string_view key, Take(key_bytes));
    ASSIGN_OR_RETURN(const uint64_t payload_bytes, Int(8));
    ASSIGN_OR_RETURN(const absl::string_view payload, Take(payload_bytes));
    return std::make_pair(key, payload);
  }

 private:
  absl::StatusOr<uint64_t> Int(size_t bytes) {
    ASSIGN_OR_RETURN(const absl::string_view b, Take(bytes));
    uint64_t value = 0;
    for (size_t i = 0; i < bytes; ++i) value |= uint64_t{static_cast<uint8_t>(b[i])} << (8 * i);
    return value;
  }
  absl::StatusOr<absl::string_view> Take(uint64_t bytes) {
    if (bytes > rest_.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint '", path_, "' is cut short (a record runs past its end)"));
    }
    const absl::string_view taken = rest_.substr(0, bytes);
    rest_.remove_prefix(bytes);
    return taken;
  }

  const std::string& path_;
  absl::string_view rest_;
};

// Sets the position fields of `c` from the "position" record's lines.
absl::Status ReadPosition(const std::string& path, absl::string_view payload, FitCheckpoint& c) {
  for (absl::string_view line : absl::StrSplit(payload, '\n', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(line, absl::MaxSplits(' ', 1));
    const absl::string_view name = kv.first, value = kv.second;
    bool ok = true;
    if (name == "epoch")
      ok = absl::SimpleAtoi(value, &c.epoch);
    else if (name == "batch")
      ok = absl::SimpleAtoi(value, &c.batch);
    else if (name == "seed")
      ok = absl::SimpleAtoi(value, &c.seed);
    else if (name == "batch_size")
      ok = absl::SimpleAtoi(value, &c.batch_size);
    else if (name == "ranks")
      ok = absl::SimpleAtoi(value, &c.ranks);
    else if (name == "epoch_loss_sum")
      ok = absl::SimpleAtod(value, &c.epoch_loss_sum);
    else if (name == "epoch_steps")
      ok = absl::SimpleAtoi(value, &c.epoch_steps);
    else if (name == "stop_requested")
      ok = absl::SimpleAtob(value, &c.stop_requested);
    else if (name == "stop_reason")
      c.stop_reason = std::string(value);
    else if (name == "steps_run")
      ok = absl::SimpleAtoi(value, &c.steps_run);
    else
      ok = false;
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint '", path, "': bad position line '", line, "'"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteFitCheckpoint(const std::string& path, const FitCheckpoint& c) {
  std::string out(kMagic);
  PutRecord(out, "position",
            absl::StrCat("epoch ", c.epoch, "\nbatch ", c.batch, "\nseed ", c.seed, "\nbatch_size ",
                         c.batch_size, "\nranks ", c.ranks, "\nepoch_loss_sum ",
                         Exact(c.epoch_loss_sum), "\nepoch_steps ", c.epoch_steps,
                         "\nstop_requested ", c.stop_requested ? "true" : "false", "\nsteps_run ",
                         c.steps_run, "\nstop_reason ", c.stop_reason, "\n"));
  for (const HostTensor& t : c.tensors) {
    proto::TensorValue value;
    value.set_name(t.name);
    for (int64_t d : t.shape) value.add_shape(d);
    value.set_dtype(t.dtype);
    value.set_data(t.bytes.data(), t.bytes.size());
    PutRecord(out, "tensor", value.SerializeAsString());
  }
  for (const auto& [name, metric] : c.metrics) {
    PutRecord(out, absl::StrCat("metric ", name),
              absl::StrCat(Exact(metric.first), " ", metric.second));
  }
  for (const auto& [name, state] : c.callbacks) {
    PutRecord(out, absl::StrCat("callback ", name), state);
  }
  PutRecord(out, "end", "");
  const std::string temporary = absl::StrCat(path, ".tmp");
  RETURN_IF_ERROR(WriteFileContents(temporary, out, "checkpoint"));
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    return absl::UnavailableError(absl::StrCat("checkpoint: cannot rename '", temporary, "' to '",
                                               path, "': ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<FitCheckpoint> ReadFitCheckpoint(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string bytes, ReadFileContents(path, "checkpoint"));
  absl::string_view rest = bytes;
  if (!absl::ConsumePrefix(&rest, kMagic)) {
    return absl::InvalidArgumentError(absl::StrCat("'", path,
                                                   "' is not a headroom fit checkpoint (no '",
                                                   absl::StripSuffix(kMagic, "\n"), "' line)"));
  }
  FitCheckpoint c;
  RecordReader reader(path, rest);
  bool ended = false, positioned = false;
  while (!reader.done() && !ended) {
    ASSIGN_OR_RETURN(const auto record, reader.Next());
    const auto& [key, payload] = record;
    absl::string_view name = key;
    if (key == "end") {
      ended = true;
    } else if (key == "position") {
      RETURN_IF_ERROR(ReadPosition(path, payload, c));
      positioned = true;
    } else if (key == "tensor") {
      proto::TensorValue value;
      if (!value.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
        return absl::InvalidArgumentError(
            absl::StrCat("checkpoint '", path, "': tensor ", c.tensors.size(), " is malformed"));
      }
      c.tensors.push_back(HostTensorFromValue(value));
    } else if (absl::ConsumePrefix(&name, "metric ")) {
      std::pair<absl::string_view, absl::string_view> v = absl::StrSplit(payload, ' ');
      std::pair<double, int64_t> metric;
      if (!absl::SimpleAtod(v.first, &metric.first) ||
          !absl::SimpleAtoi(v.second, &metric.second)) {
        return absl::InvalidArgumentError(
            absl::StrCat("checkpoint '", path, "': metric '", name, "' is malformed"));
      }
      c.metrics[std::string(name)] = metric;
    } else if (absl::ConsumePrefix(&name, "callback ")) {
      c.callbacks.emplace_back(std::string(name), std::string(payload));
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint '", path, "': unknown record '", key, "'"));
    }
  }
  if (!ended || !positioned) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint '", path, "' is cut short (",
                                                   positioned ? "no end record" : "no position",
                                                   ")"));
  }
  return c;
}

}  // namespace headroom::executor
