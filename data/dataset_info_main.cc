// dataset_info DIR: loads a dataset directory (docs/data.md) as training would and prints
// what it read, one "key value" per line: items, classes, shape, the sum of every pixel as
// Read() gives it and the sum of the labels. tools/npy_to_dataset_test checks a converted
// directory with it against NumPy's own sums.
#include <cstdio>
#include <vector>

#include "data/image_dataset.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: dataset_info DIR\n");
    return 2;
  }
  absl::StatusOr<headroom::data::ImageDataset> set =
      headroom::data::ImageDataset::LoadDirectory(argv[1]);
  if (!set.ok()) {
    std::fprintf(stderr, "dataset_info: %s\n", std::string(set.status().message()).c_str());
    return 1;
  }
  std::vector<float> pixels(set->image_elements());
  double pixel_sum = 0;
  int64_t label_sum = 0;
  for (int64_t i = 0; i < set->size(); ++i) {
    label_sum += set->Read(i, absl::MakeSpan(pixels));
    for (float p : pixels) pixel_sum += p;
  }
  std::printf("items %ld\nclasses %d\nshape %ld %ld %ld\npixel_sum %.9g\nlabel_sum %ld\n",
              static_cast<long>(set->size()), set->num_classes(),
              static_cast<long>(set->channels()), static_cast<long>(set->height()),
              static_cast<long>(set->width()), pixel_sum, static_cast<long>(label_sum));
  return 0;
}
