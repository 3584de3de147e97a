// A labelled image set held in memory: N images of [C, H, W] pixels (unsigned bytes, read
// as byte / 255, or floats, read as they are) and one class label in [0, num_classes) each,
// as classification training reads them. Built from IDX files (Fashion-MNIST's, any
// MNIST-like set, or a dataset directory: docs/data.md), checked whole when built, so that
// a bad label or a count that does not match fails at load, naming the file and the item.
//
// Phases: Create()/LoadFashionMnist() once; then Read() any item, from any thread
// (immutable after creation).
#ifndef HEADROOM_DATA_IMAGE_DATASET_H_
#define HEADROOM_DATA_IMAGE_DATASET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "data/idx_file.h"

namespace headroom::data {

// Where Debian's dataset-fashion-mnist package puts the set.
inline constexpr char kFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";

enum class FashionMnistPart { kTrain, kTest };

// What a set holds, as its files' headers say: enough to check a model against it and to
// count its batches without reading its images (ImageDataset::Inspect*).
struct ImageSetShape {
  std::string name;
  int64_t size = 0;  // items
  int64_t channels = 0, height = 0, width = 0;
  int num_classes = 0;
  bool floats = false;  // float32 pixels; else bytes

  int64_t image_elements() const { return channels * height * width; }
  // Returns the bytes the set takes in memory once loaded: its pixels and labels.
  uint64_t memory_bytes() const {
    return static_cast<uint64_t>(size) * (image_elements() * (floats ? 4 : 1) + 1);
  }
};

class ImageDataset {
 public:
  // Returns the set of `images` ([N, H, W] for one channel, or [N, C, H, W]; bytes or
  // floats) and `labels` ([N] bytes, each below `num_classes`). InvalidArgument naming
  // `name` and the item where the counts differ, a label is out of range, a float is not
  // finite, or the shapes are not images.
  static absl::StatusOr<ImageDataset> Create(const std::string& name, IdxArray images,
                                             IdxArray labels, int num_classes);

  // Returns Fashion-MNIST's training (60,000) or test (10,000) part from `dir` (the
  // package's gzip-compressed IDX files): 28x28, one channel, 10 classes. NotFound naming
  // the file and the package to install where it is missing.
  static absl::StatusOr<ImageDataset> LoadFashionMnist(FashionMnistPart part,
                                                       const std::string& dir = kFashionMnistDir);

  // Returns the set in dataset directory `dir` (docs/data.md): an `index.txt` naming the
  // class count and the shards, each a pair of IDX files (images, labels), optionally
  // gzip-compressed, concatenated in the index's order. NotFound where `dir` has no
  // index; InvalidArgument naming the file and line for a malformed index, and the shard for
  // shards whose images differ in shape or element type.
  static absl::StatusOr<ImageDataset> LoadDirectory(const std::string& dir);

  // Returns the shape LoadFashionMnist(part, dir) and LoadDirectory(dir) would load, from
  // the IDX files' headers and the index alone: their errors about the index, the shapes,
  // types and counts of the shards and the class count, not those about the elements (a
  // label out of range, a float that is not finite, a file that ends early), which only a
  // load finds.
  static absl::StatusOr<ImageSetShape> InspectFashionMnist(
      FashionMnistPart part, const std::string& dir = kFashionMnistDir);
  static absl::StatusOr<ImageSetShape> InspectDirectory(const std::string& dir);

  ImageSetShape shape() const;
  const std::string& name() const { return name_; }
  int64_t size() const { return static_cast<int64_t>(labels_.size()); }
  int64_t channels() const { return channels_; }
  int64_t height() const { return height_; }
  int64_t width() const { return width_; }
  int num_classes() const { return num_classes_; }
  // Returns the elements of one image: channels() * height() * width().
  int64_t image_elements() const { return channels_ * height_ * width_; }

  // Writes image `index`'s pixels into `pixels` (bytes scaled to [0, 1] as byte / 255,
  // floats as they are) and returns its label. REQUIRES: 0 <= index < size(), pixels.size() ==
  // image_elements().
  int64_t Read(int64_t index, absl::Span<float> pixels) const;

  int64_t Label(int64_t index) const { return labels_[index]; }

 private:
  ImageDataset() = default;

  std::string name_;
  int64_t channels_ = 0, height_ = 0, width_ = 0;
  int num_classes_ = 0;
  // The images' elements: bytes, or floats where `floats_`.
  bool floats_ = false;
  std::vector<uint8_t> pixels_;
  std::vector<uint8_t> labels_;
};

}  // namespace headroom::data

#endif  // HEADROOM_DATA_IMAGE_DATASET_H_
