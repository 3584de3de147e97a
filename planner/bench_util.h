// What the planner's benchmarks share: a StatusOr unwrapped or the process ends with its
// message, and a zoo model by name.
#ifndef HEADROOM_PLANNER_BENCH_UTIL_H_
#define HEADROOM_PLANNER_BENCH_UTIL_H_

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "graph/zoo.h"

namespace headroom::planner::bench {

// Returns `v`'s value; prints "`what`: message" and exits 1 if it holds an error.
template <typename T>
T OrDie(absl::StatusOr<T> v, const std::string& what) {
  if (!v.ok()) {
    std::fprintf(stderr, "%s: %s\n", what.c_str(), std::string(v.status().message()).c_str());
    std::exit(1);
  }
  return std::move(v).value();
}

// Returns zoo model `model` at `batch` with `options`, or exits.
inline graph::Graph Load(const std::string& model, uint64_t batch,
                         const std::map<std::string, int64_t>& options = {}) {
  return OrDie(graph::Graph::FromProto(
                   OrDie(graph::BuildZooModel(graph::ZooSpec(model, batch, options)), model)),
               model);
}

}  // namespace headroom::planner::bench

#endif  // HEADROOM_PLANNER_BENCH_UTIL_H_
