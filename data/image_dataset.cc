#include "data/image_dataset.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "util/check.h"

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
  if (labels.dims.size() != 1) {
    return fail(absl::StrCat("labels have shape [", absl::StrJoin(labels.dims, ","),
                             "]; need [N]"));
  }
  if (labels.dims[0] != images.dims[0]) {
    return fail(absl::StrCat(images.dims[0], " images but ", labels.dims[0], " labels"));
  }
  if (num_classes < 2 || num_classes > 256) {
    return fail(absl::StrCat(num_classes, " classes; need 2 to 256"));
  }
  for (size_t i = 0; i < labels.bytes.size(); ++i) {
    if (labels.bytes[i] >= num_classes) {
      return fail(absl::StrCat("item ", i, " has label ", int{labels.bytes[i]},
                               ", outside [0, ", num_classes, ")"));
    }
  }
  ImageDataset set;
  set.name_ = name;
  const bool one_channel = images.dims.size() == 3;
  set.channels_ = one_channel ? 1 : images.dims[1];
  set.height_ = images.dims[one_channel ? 1 : 2];
  set.width_ = images.dims[one_channel ? 2 : 3];
  set.num_classes_ = num_classes;
  set.pixels_ = std::move(images.bytes);
  set.labels_ = std::move(labels.bytes);
  return set;
}

absl::StatusOr<ImageDataset> ImageDataset::LoadFashionMnist(FashionMnistPart part,
                                                            const std::string& dir) {
  const std::string prefix = part == FashionMnistPart::kTrain ? "train" : "t10k";
  auto read = [&](const std::string& file) -> absl::StatusOr<IdxArray> {
    absl::StatusOr<IdxArray> array = ReadIdxFile(absl::StrCat(dir, "/", file));
    if (absl::IsNotFound(array.status())) {
      return absl::NotFoundError(absl::StrCat(array.status().message(),
                                              " (install Debian's dataset-fashion-mnist)"));
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

absl::Span<const uint8_t> ImageDataset::Pixels(int64_t index) const {
  CHECK(index >= 0 && index < size());
  return absl::MakeConstSpan(pixels_).subspan(index * image_elements(), image_elements());
}

int64_t ImageDataset::Read(int64_t index, absl::Span<float> pixels) const {
  CHECK(static_cast<int64_t>(pixels.size()) == image_elements());
  absl::Span<const uint8_t> raw = Pixels(index);
  // A division, as torchvision's ToTensor divides, so that both see the same floats.
  for (size_t i = 0; i < raw.size(); ++i) pixels[i] = raw[i] / 255.0f;
  return labels_[index];
}

}  // namespace headroom::data
