// Microbenchmark of the native core alone (no XLA, no Python): Select and the
// CPU gather for 256 windows of 20 x 17 float32 from a 1000 x 200-step table,
// with the caches warm and cold (a 96 MiB sweep before every batch), for the
// Uniform, Timestep and Recent strategies. It shows what the core costs
// against the whole jitted call that scripts/bench_sample.py measures.
//
// Build and run from the repository root:
//   g++ -std=c++20 -O2 -Ixla_ffi scripts/bench_core.cc \
//       $(find xla_ffi/core -name '*.cc' ! -name '*_test.cc') -o /tmp/bench_core
//   /tmp/bench_core
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>
#include "core/gather_cpu.h"
#include "core/table/table.h"
using namespace gearjax;
int main() {
  TableSpec spec; spec.columns.push_back({"obs", 68, std::vector<uint8_t>(68, 0)});
  spec.capacity = 1000; spec.max_length = 200;
  Table t(spec);
  std::vector<float> data(200 * 17, 1.0f);
  for (int i = 0; i < 1000; ++i) t.Insert({data.data()}, 200, 1.0);
  std::vector<uint8_t> flush(96 << 20, 1);
  const int B = 256, W = 20;
  std::vector<Draw> draws(B);
  std::vector<int64_t> keys(B), sizes(B); std::vector<int32_t> start(B); std::vector<float> prob(B);
  std::vector<int32_t> valid(B); std::vector<uint8_t> obs(B * W * 68);
  SampleOutputs out{keys.data(), start.data(), prob.data(), sizes.data(), valid.data(), {obs.data()}};
  for (int strat : {0, 1, 4}) for (int cold : {0, 1}) {  // Uniform, Timestep, Recent(10)
    SampleRequest r{(Strategy)strat, 0.0, 10, B, W};
    double sel = 0, gat = 0; int n = 50; uint64_t sink = 0;
    for (int it = 0; it < n; ++it) {
      if (cold) for (size_t i = 0; i < flush.size(); i += 64) sink += ++flush[i];
      uint32_t seed[2] = {uint32_t(it), 7};
      auto a = std::chrono::steady_clock::now();
      const uint64_t ticket = t.Select(r, seed, draws.data());
      auto b = std::chrono::steady_clock::now();
      GatherRows(t, draws.data(), 0, B, W, true, out);
      auto c = std::chrono::steady_clock::now();
      t.EndSample(ticket);
      sel += std::chrono::duration<double>(b - a).count(); gat += std::chrono::duration<double>(c - b).count();
    }
    printf("strategy=%d %s: select %.1f us, gather %.1f us per batch (sweep checksum %lu)\n", strat,
           cold ? "cold" : "warm", sel / n * 1e6, gat / n * 1e6, static_cast<unsigned long>(sink % 2));
  }
}
