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

namespace {

// Returns the shape of a set of `images` and `labels` (headers: type and dims) with
// `num_classes`; InvalidArgument naming `name` where they do not make a labelled image set.
absl::StatusOr<ImageSetShape> ShapeOf(const std::string& name, const IdxArray& images,
                                      const IdxArray& labels, int num_classes) {
  auto fail = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("dataset '", name, "': ", what));
  };
  if (images.dims.size() != 3 && images.dims.size() != 4) {
    return fail(absl::StrCat("images have shape [", absl::StrJoin(images.dims, ","),
                             "]; need [N, H, W] or [N, C, H, W]"));
  }
  if (labels.type != kIdxUnsignedByte) return fail("labels must be unsigned bytes (IDX type 0x08)");
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
  ImageSetShape shape;
  shape.name = name;
  shape.size = images.dims[0];
  const bool one_channel = images.dims.size() == 3;
  shape.channels = one_channel ? 1 : images.dims[1];
  shape.height = images.dims[one_channel ? 1 : 2];
  shape.width = images.dims[one_channel ? 2 : 3];
  shape.num_classes = num_classes;
  shape.floats = images.type == kIdxFloat;
  return shape;
}

}  // namespace

absl::StatusOr<ImageDataset> ImageDataset::Create(const std::string& name, IdxArray images,
                                                  IdxArray labels, int num_classes) {
  absl::StatusOr<ImageSetShape> shape = ShapeOf(name, images, labels, num_classes);
  if (!shape.ok()) return shape.status();
  auto fail = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("dataset '", name, "': ", what));
  };
  if (images.type == kIdxFloat) {
    const float* v = reinterpret_cast<const float*>(images.bytes.data());
    for (int64_t i = 0; i < images.num_elements(); ++i) {
      if (!std::isfinite(v[i])) {
        return fail(absl::StrCat("item ", i / images.item_elements(), " holds ", v[i]));
      }
    }
  }
  for (size_t i = 0; i < labels.bytes.size(); ++i) {
    if (labels.bytes[i] >= num_classes) {
      return fail(absl::StrCat("item ", i, " has label ", int{labels.bytes[i]}, ", outside [0, ",
                               num_classes, ")"));
    }
  }
  ImageDataset set;
  set.name_ = name;
  set.channels_ = shape->channels;
  set.height_ = shape->height;
  set.width_ = shape->width;
  set.num_classes_ = num_classes;
  set.floats_ = shape->floats;
  set.pixels_ = std::move(images.bytes);
  set.labels_ = std::move(labels.bytes);
  return set;
}

ImageSetShape ImageDataset::shape() const {
  ImageSetShape shape;
  shape.name = name_;
  shape.size = size();
  shape.channels = channels_;
  shape.height = height_;
  shape.width = width_;
  shape.num_classes = num_classes_;
  shape.floats = floats_;
  return shape;
}

namespace {

// A dataset directory's index.txt (docs/data.md), its shards not yet read.
struct DatasetIndex {
  std::string path;
  int num_classes = 0;
  struct Shard {
    size_t line = 0;                       // 1-based, for errors
    std::string images, labels;            // paths
    std::string images_name, labels_name;  // as the index names them
  };
  std::vector<Shard> shards;

  absl::Status Fail(size_t line, const std::string& what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset index '", path, "' line ", line, ": ", what));
  }
};

absl::StatusOr<DatasetIndex> ReadDatasetIndex(const std::string& dir) {
  DatasetIndex index;
  index.path = absl::StrCat(dir, "/index.txt");
  absl::StatusOr<std::string> text = ReadFileContents(index.path, "dataset index");
  if (!text.ok()) return text.status();
  bool versioned = false;
  const std::vector<std::string> lines = absl::StrSplit(*text, '\n');
  for (size_t n = 0; n < lines.size(); ++n) {
    const absl::string_view line = absl::StripAsciiWhitespace(lines[n]);
    if (line.empty() || line[0] == '#') continue;
    const std::vector<std::string> words = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (!versioned) {
      if (words != std::vector<std::string>{"headroom-dataset", "1"}) {
        return index.Fail(n + 1, "the first line must be 'headroom-dataset 1'");
      }
      versioned = true;
    } else if (words[0] == "classes" && words.size() == 2) {
      if (!absl::SimpleAtoi(words[1], &index.num_classes)) {
        return index.Fail(n + 1, "'classes' needs a number");
      }
    } else if (words[0] == "shard" && words.size() == 3) {
      index.shards.push_back({n + 1, absl::StrCat(dir, "/", words[1]),
                              absl::StrCat(dir, "/", words[2]), words[1], words[2]});
    } else {
      return index.Fail(
          n + 1, absl::StrCat("'", line, "' is neither 'classes N' nor 'shard IMAGES LABELS'"));
    }
  }
  if (!versioned || index.num_classes == 0 || index.shards.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("dataset index '", index.path,
                                                   "' needs 'headroom-dataset 1', 'classes N' "
                                                   "and at least one 'shard IMAGES LABELS'"));
  }
  return index;
}

// Checks one shard's images and labels (their headers) against the set so far, whose
// headers are `images` and `labels` (dims[0] the items so far; empty before the first
// shard), and adds the shard's items to them.
absl::Status AddShard(const DatasetIndex& index, const DatasetIndex::Shard& shard,
                      const IdxArray& shard_images, const IdxArray& shard_labels, IdxArray& images,
                      IdxArray& labels) {
  if (images.dims.empty()) {
    images.type = shard_images.type;
    images.dims = shard_images.dims;
    images.dims[0] = 0;
    labels.dims = {0};
  } else if (shard_images.type != images.type ||
             std::vector<int64_t>(shard_images.dims.begin() + 1, shard_images.dims.end()) !=
                 std::vector<int64_t>(images.dims.begin() + 1, images.dims.end())) {
    return index.Fail(shard.line,
                      absl::StrCat("shard '", shard.images_name, "' holds [",
                                   absl::StrJoin(shard_images.dims, ","),
                                   "] items of another shape or type than the shards before it"));
  }
  if (shard_labels.type != kIdxUnsignedByte || shard_labels.dims.size() != 1 ||
      shard_labels.dims[0] != shard_images.dims[0]) {
    return index.Fail(shard.line,
                      absl::StrCat("shard '", shard.labels_name, "' holds labels [",
                                   absl::StrJoin(shard_labels.dims, ","), "] for ",
                                   shard_images.dims[0], " images; needs one byte per image"));
  }
  images.dims[0] += shard_images.dims[0];
  labels.dims[0] += shard_labels.dims[0];
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ImageDataset> ImageDataset::LoadDirectory(const std::string& dir) {
  absl::StatusOr<DatasetIndex> index = ReadDatasetIndex(dir);
  if (!index.ok()) return index.status();
  IdxArray images, labels;
  for (const DatasetIndex::Shard& shard : index->shards) {
    absl::StatusOr<IdxArray> shard_images = ReadIdxFile(shard.images);
    if (!shard_images.ok()) return shard_images.status();
    absl::StatusOr<IdxArray> shard_labels = ReadIdxFile(shard.labels);
    if (!shard_labels.ok()) return shard_labels.status();
    if (absl::Status s = AddShard(*index, shard, *shard_images, *shard_labels, images, labels);
        !s.ok()) {
      return s;
    }
    images.bytes.insert(images.bytes.end(), shard_images->bytes.begin(), shard_images->bytes.end());
    labels.bytes.insert(labels.bytes.end(), shard_labels->bytes.begin(), shard_labels->bytes.end());
  }
  return Create(dir, std::move(images), std::move(labels), index->num_classes);
}

absl::StatusOr<ImageSetShape> ImageDataset::InspectDirectory(const std::string& dir) {
  absl::StatusOr<DatasetIndex> index = ReadDatasetIndex(dir);
  if (!index.ok()) return index.status();
  IdxArray images, labels;
  for (const DatasetIndex::Shard& shard : index->shards) {
    absl::StatusOr<IdxArray> shard_images = ReadIdxHeader(shard.images);
    if (!shard_images.ok()) return shard_images.status();
    absl::StatusOr<IdxArray> shard_labels = ReadIdxHeader(shard.labels);
    if (!shard_labels.ok()) return shard_labels.status();
    if (absl::Status s = AddShard(*index, shard, *shard_images, *shard_labels, images, labels);
        !s.ok()) {
      return s;
    }
  }
  return ShapeOf(dir, images, labels, index->num_classes);
}

namespace {

std::string FashionMnistName(FashionMnistPart part) {
  return absl::StrCat("fashion-mnist ", part == FashionMnistPart::kTrain ? "train" : "test");
}

// Reads Fashion-MNIST's `part` in `dir` with `read` (ReadIdxFile, or ReadIdxHeader for its
// headers alone) into `images` and `labels`.
absl::Status ReadFashionMnist(FashionMnistPart part, const std::string& dir,
                              absl::StatusOr<IdxArray> (*read)(const std::string&),
                              IdxArray& images, IdxArray& labels) {
  const std::string prefix = part == FashionMnistPart::kTrain ? "train" : "t10k";
  for (auto [file, array] : {std::pair<std::string, IdxArray*>{"-images-idx3-ubyte.gz", &images},
                             std::pair<std::string, IdxArray*>{"-labels-idx1-ubyte.gz", &labels}}) {
    absl::StatusOr<IdxArray> got = read(absl::StrCat(dir, "/", prefix, file));
    if (absl::IsNotFound(got.status())) {
      return absl::NotFoundError(
          absl::StrCat(got.status().message(), " (install Debian's dataset-fashion-mnist)"));
    }
    if (!got.ok()) return got.status();
    *array = *std::move(got);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ImageDataset> ImageDataset::LoadFashionMnist(FashionMnistPart part,
                                                            const std::string& dir) {
  IdxArray images, labels;
  if (absl::Status s = ReadFashionMnist(part, dir, &ReadIdxFile, images, labels); !s.ok()) {
    return s;
  }
  return Create(FashionMnistName(part), std::move(images), std::move(labels), /*num_classes=*/10);
}

absl::StatusOr<ImageSetShape> ImageDataset::InspectFashionMnist(FashionMnistPart part,
                                                                const std::string& dir) {
  IdxArray images, labels;
  if (absl::Status s = ReadFashionMnist(part, dir, &ReadIdxHeader, images, labels); !s.ok()) {
    return s;
  }
  return ShapeOf(FashionMnistName(part), images, labels, /*num_classes=*/10);
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
