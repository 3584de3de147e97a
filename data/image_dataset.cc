#include "data/image_dataset.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "util/check.h"
#include "util/file_io.h"

namespace headroom::data {

absl::StatusOr<ImageDataset> ImageDataset::Create(const std::string& name, IdxArray images,
                                                  IdxArray labels, int num_classes) {
  auto fail = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("dataset '", name, "': ", what));
  };
  if (images.dims.size() != 3 && images.dims.size() != 4) {
    return fail(absl::StrCat("images have shape [", absl::StrJoin(images.dims, ","),
                             "]; need [N, H, W] or [N, C, H, W]"));
  }
  if (labels.type != kIdxUnsignedByte) return fail("labels must be unsigned bytes (IDX type 0x08)");
  if (images.type == kIdxFloat) {
    const float* v = reinterpret_cast<const float*>(images.bytes.data());
    for (int64_t i = 0; i < images.num_elements(); ++i) {
      if (!std::isfinite(v[i])) {
        return fail(absl::StrCat("item ", i / images.item_elements(), " holds ", v[i]));
      }
    }
  }
  if (labels.dims.size() != 1) {
    return fail(
        absl::StrCat("labels have shape [", absl::StrJoin(labels.dims, ","), "]; need [N]"));
  }
  if (labels.dims[0] != images.dims[0]) {
    return fail(absl::StrCat(images.dims[0], " images but ", labels.dims[0], " labels"));
  }
  if (num_classes < 2 || num_classes > 256) {
    return fail(absl::StrCat(num_classes, " classes; need 2 to 256"));
  }
  for (size_t i = 0; i < labels.bytes.size(); ++i) {
    if (labels.bytes[i] >= num_classes) {
      return fail(absl::StrCat("item ", i, " has label ", int{labels.bytes[i]}, ", outside [0, ",
                               num_classes, ")"));
    }
  }
  ImageDataset set;
  set.name_ = name;
  const bool one_channel = images.dims.size() == 3;
  set.channels_ = one_channel ? 1 : images.dims[1];
  set.height_ = images.dims[one_channel ? 1 : 2];
  set.width_ = images.dims[one_channel ? 2 : 3];
  set.num_classes_ = num_classes;
  set.floats_ = images.type == kIdxFloat;
  set.pixels_ = std::move(images.bytes);
  set.labels_ = std::move(labels.bytes);
  return set;
}

absl::StatusOr<ImageDataset> ImageDataset::LoadDirectory(const std::string& dir) {
  const std::string index_path = absl::StrCat(dir, "/index.txt");
  absl::StatusOr<std::string> index = ReadFileContents(index_path, "dataset index");
  if (!index.ok()) return index.status();
  int num_classes = 0;
  bool versioned = false;
  IdxArray images, labels;
  const std::vector<std::string> lines = absl::StrSplit(*index, '\n');
  for (size_t n = 0; n < lines.size(); ++n) {
    auto fail = [&](const std::string& what) {
      return absl::InvalidArgumentError(
          absl::StrCat("dataset index '", index_path, "' line ", n + 1, ": ", what));
    };
    const absl::string_view line = absl::StripAsciiWhitespace(lines[n]);
    if (line.empty() || line[0] == '#') continue;
    const std::vector<std::string> words = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (!versioned) {
      if (words != std::vector<std::string>{"headroom-dataset", "1"}) {
        return fail("the first line must be 'headroom-dataset 1'");
      }
      versioned = true;
    } else if (words[0] == "classes" && words.size() == 2) {
      if (!absl::SimpleAtoi(words[1], &num_classes)) return fail("'classes' needs a number");
    } else if (words[0] == "shard" && words.size() == 3) {
      absl::StatusOr<IdxArray> shard_images = ReadIdxFile(absl::StrCat(dir, "/", words[1]));
      if (!shard_images.ok()) return shard_images.status();
      absl::StatusOr<IdxArray> shard_labels = ReadIdxFile(absl::StrCat(dir, "/", words[2]));
      if (!shard_labels.ok()) return shard_labels.status();
      if (images.dims.empty()) {
        images.type = shard_images->type;
        images.dims = shard_images->dims;
        images.dims[0] = 0;
        labels.dims = {0};
      } else if (shard_images->type != images.type ||
                 std::vector<int64_t>(shard_images->dims.begin() + 1, shard_images->dims.end()) !=
                     std::vector<int64_t>(images.dims.begin() + 1, images.dims.end())) {
        return fail(absl::StrCat("shard '", words[1], "' holds [",
                                 absl::StrJoin(shard_images->dims, ","),
                                 "] items of another shape or type than the shards before it"));
      }
      if (shard_labels->type != kIdxUnsignedByte || shard_labels->dims.size() != 1 ||
          shard_labels->dims[0] != shard_images->dims[0]) {
        return fail(absl::StrCat("shard '", words[2], "' holds labels [",
                                 absl::StrJoin(shard_labels->dims, ","), "] for ",
                                 shard_images->dims[0], " images; needs one byte per image"));
      }
      images.dims[0] += shard_images->dims[0];
      labels.dims[0] += shard_labels->dims[0];
      images.bytes.insert(images.bytes.end(), shard_images->bytes.begin(),
                          shard_images->bytes.end());
      labels.bytes.insert(labels.bytes.end(), shard_labels->bytes.begin(),
                          shard_labels->bytes.end());
    } else {
      return fail(absl::StrCat("'", line, "' is neither 'classes N' nor 'shard IMAGES LABELS'"));
    }
  }
  if (!versioned || num_classes == 0 || images.dims.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("dataset index '", index_path,
                                                   "' needs 'headroom-dataset 1', 'classes N' "
                                                   "and at least one 'shard IMAGES LABELS'"));
  }
  return Create(dir, std::move(images), std::move(labels), num_classes);
}

absl::StatusOr<ImageDataset> ImageDataset::LoadFashionMnist(FashionMnistPart part,
                                                            const std::string& dir) {
  const std::string prefix = part == FashionMnistPart::kTrain ? "train" : "t10k";
  auto read = [&](const std::string& file) -> absl::StatusOr<IdxArray> {
    absl::StatusOr<IdxArray> array = ReadIdxFile(absl::StrCat(dir, "/", file));
    if (absl::IsNotFound(array.status())) {
      return absl::NotFoundError(
          absl::StrCat(array.status().message(), " (install Debian's dataset-fashion-mnist)"));
    }
    return array;
  };
  absl::StatusOr<IdxArray> images = read(prefix + "-images-idx3-ubyte.gz");
  if (!images.ok()) return images.status();
  absl::StatusOr<IdxArray> labels = read(prefix + "-labels-idx1-ubyte.gz");
  if (!labels.ok()) return labels.status();
  return Create(absl::StrCat("fashion-mnist ", part == FashionMnistPart::kTrain ? "train" : "test"),
                *std::move(images), *std::move(labels), /*num_classes=*/10);
}

int64_t ImageDataset::Read(int64_t index, absl::Span<float> pixels) const {
  CHECK(static_cast<int64_t>(pixels.size()) == image_elements());
  CHECK(index >= 0 && index < size());
  const int64_t n = image_elements();
  if (floats_) {
    const float* v = reinterpret_cast<const float*>(pixels_.data()) + index * n;
    std::copy(v, v + n, pixels.begin());
    return labels_[index];
  }
  const uint8_t* raw = pixels_.data() + index * n;
  // A division, as torchvision's ToTensor divides, so that both see the same floats.
  for (int64_t i = 0; i < n; ++i) pixels[i] = raw[i] / 255.0f;
  return labels_[index];
}

}  // namespace headroom::data
