// Each system library behind @system links and works: later layers build on all of them.
#include <sqlite3.h>

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "prometheus/counter.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"

namespace {

TEST(SystemLibsTest, PrometheusSerializesACounter) {
  prometheus::Registry registry;
  auto& family = prometheus::BuildCounter()
                     .Name("headroom_probe_total")
                     .Help("probe")
                     .Register(registry);
  family.Add({{"device", "cpu"}}).Increment(3);
  const std::string text = prometheus::TextSerializer().Serialize(registry.Collect());
  EXPECT_NE(text.find("headroom_probe_total{device=\"cpu\"} 3"), std::string::npos) << text;
}

TEST(SystemLibsTest, OneDnnRunsAReluOnTheCpu) {
  // oneDNN 2.6 API: eltwise_forward::desc, then primitive_desc.
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  std::vector<float> x = {-2.0f, -0.5f, 0.0f, 1.5f};
  std::vector<float> y(4, 42.0f);
  dnnl::memory::desc md({4}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::a);
  dnnl::memory src(md, engine, x.data());
  dnnl::memory dst(md, engine, y.data());
  dnnl::eltwise_forward::desc desc(dnnl::prop_kind::forward_inference,
                                   dnnl::algorithm::eltwise_relu, md, 0.0f);
  dnnl::eltwise_forward relu(dnnl::eltwise_forward::primitive_desc(desc, engine));
  relu.execute(stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}});
  stream.wait();
  EXPECT_EQ(y, (std::vector<float>{0.0f, 0.0f, 0.0f, 1.5f}));
}

TEST(SystemLibsTest, SqliteStoresAndCounts) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(":memory:", &db), SQLITE_OK);
  std::unique_ptr<sqlite3, decltype(&sqlite3_close)> closer(db, sqlite3_close);
  ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE jobs(id TEXT); INSERT INTO jobs VALUES('a'),('b');",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  int count = -1;
  ASSERT_EQ(sqlite3_exec(
                db, "SELECT COUNT(*) FROM jobs;",
                [](void* out, int, char** values, char**) {
                  *static_cast<int*>(out) = std::stoi(values[0]);
                  return 0;
                },
                &count, nullptr),
            SQLITE_OK);
  EXPECT_EQ(count, 2);
}

}  // namespace
