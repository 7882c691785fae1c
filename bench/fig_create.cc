// Figure 4: a sandbox's create and first exec against the runtime's own, in process.
#include <string>

#include "bench.h"

namespace sandstream::bench {

void Bench::CreateEcho() {
  const int n = options_.quick ? 15 : 100;
  RawRuntime& raw = Raw();
  Samples http, http_delete, base, base_destroy;
  double daemon_cpu = 0;
  for (int i = -2; i < n; ++i) {
    if (i == 0) daemon_cpu = -ProcessCpuSeconds(daemon_->pid());
    const int64_t t0 = MonotonicNs();
    const std::string sb = CreateSandbox();
    const std::string res =
        http_->Expect(200, "POST", "/v1/sandboxes/" + sb + "/exec", R"({"cmd":"echo hi"})");
    const int64_t t1 = MonotonicNs();
    DeleteSandbox(sb);
    const int64_t t2 = MonotonicNs();
    if (StringField(ParseObject(res), "stdout") != "hi\n")
      throw BenchError("echo hi answered " + res);
    double run_ms = 0, destroy_ms = 0;
    raw.CreateEchoDestroy(&run_ms, &destroy_ms);
    if (i < 0) continue;
    http.Add(static_cast<double>(t1 - t0) / 1e6);
    http_delete.Add(static_cast<double>(t2 - t1) / 1e6);
    base.Add(run_ms);
    base_destroy.Add(destroy_ms);
  }
  daemon_cpu += ProcessCpuSeconds(daemon_->pid());
  rows_.push_back({"4. POST /sandboxes + POST exec `echo hi` -> output",
                   Ms(http.P(.5)) + " (" + Ms(http.P(.9)) + ")",
                   options_.runtime + " runtime Create+Spawn+wait, in-process", Ms(base.P(.5)),
                   Ratio(http.P(.5), base.P(.5)), "p50 <= 10 ms" + Met(http.P(.5) <= 10)});
  rows_.push_back({"4b. DELETE /sandboxes/{id}",
                   Ms(http_delete.P(.5)) + " (" + Ms(http_delete.P(.9)) + ")",
                   options_.runtime + " runtime Destroy, in-process", Ms(base_destroy.P(.5)),
                   Ratio(http_delete.P(.5), base_destroy.P(.5)), "-"});
  Detail("4", "n=" + std::to_string(n) + " interleaved; sandstream " + Dist(http, Ms) +
                  "; baseline " + Dist(base, Ms) + "; delete " + Dist(http_delete, Ms) +
                  "; Destroy " + Dist(base_destroy, Ms) + "; daemon CPU per create+exec+delete " +
                  Ms(daemon_cpu * 1e3 / n));
}

}  // namespace sandstream::bench
