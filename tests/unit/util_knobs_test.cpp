#include <gtest/gtest.h>

#include <cstdlib>

#include "util/knobs.h"
#include "util/status.h"

namespace lmf {
namespace {

TEST(Knobs, TriStateFromEnvAndOverrides) {
  setenv("LMFUSE_QKV_FUSION", "0", 1);
  setenv("LMFUSE_LN_FUSION", "1", 1);
  unsetenv("LMFUSE_GATEUP_FUSION");
  Knobs k = Knobs::from_env();
  EXPECT_EQ(k.qkv_fusion, Tri::Off);
  EXPECT_EQ(k.ln_fusion, Tri::On);
  EXPECT_EQ(k.gateup_fusion, Tri::Auto);
  k.set("qkv_fusion", "auto");
  EXPECT_EQ(k.qkv_fusion, Tri::Auto);
  k.set("LMFUSE_CUDA_GRAPH", "0");
  EXPECT_EQ(k.get("cuda_graph"), Tri::Off);
  EXPECT_TRUE(tri_resolve(Tri::Auto, true));
  EXPECT_FALSE(tri_resolve(Tri::Off, true));
  EXPECT_TRUE(tri_resolve(Tri::On, false));
  unsetenv("LMFUSE_QKV_FUSION");
  unsetenv("LMFUSE_LN_FUSION");
}

TEST(Knobs, BadValuesAndNamesAreClearErrors) {
  Knobs k;
  try {
    k.set("qkv_fusion", "maybe");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected 0, 1 or auto, got 'maybe'"), std::string::npos);
  }
  try {
    k.set("warp_drive", "1");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown knob 'warp_drive'"), std::string::npos);
  }
  setenv("LMFUSE_CUDA_GRAPH", "yes please", 1);
  EXPECT_THROW(Knobs::from_env(), Error);
  unsetenv("LMFUSE_CUDA_GRAPH");
}

TEST(Knobs, EveryKnobHasAnEnvNameAndHelp) {
  for (const auto& k : knob_table()) {
    EXPECT_EQ(std::string(k.env_name).rfind("LMFUSE_", 0), 0u);
    EXPECT_GT(std::string(k.help).size(), 5u);
  }
}

}  // namespace
}  // namespace lmf
