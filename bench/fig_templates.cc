// Figure 10: sandboxes made from an imported image and from a snapshot, and the snapshot.
#include <string>
#include <string_view>

#include "bench.h"
#include "image.h"

namespace sandstream::bench {

// Figure 10: sandboxes made from an imported image and from a snapshot, and the snapshot.
void Bench::Templates() {
  const int n = options_.quick ? 10 : 100;
  const int mib = options_.quick ? 16 : 100;
  const std::string archive = ShellImageArchive();
  int64_t t0 = MonotonicNs();
  http_->Expect(201, "POST", "/v1/templates?name=bench-image", archive, "application/x-tar");
  const double import_ms = static_cast<double>(MonotonicNs() - t0) / 1e6;

  // A create + `echo hi` + delete from `body`; the create and exec are timed.
  auto create_echo = [&](std::string_view body) {
    const int64_t start = MonotonicNs();
    const std::string sb = CreateSandbox(body);
    const std::string res =
        http_->Expect(200, "POST", "/v1/sandboxes/" + sb + "/exec", R"({"cmd":"echo hi"})");
    const int64_t end = MonotonicNs();
    if (StringField(ParseObject(res), "stdout") != "hi\n") {
      throw BenchError("echo hi answered " + res);
    }
    DeleteSandbox(sb);
    return static_cast<double>(end - start) / 1e6;
  };
  Samples image, base;
  for (int i = -2; i < n; ++i) {
    const double from_image = create_echo(R"({"template":"bench-image"})");
    const double from_base = create_echo("{}");
    if (i < 0) continue;
    image.Add(from_image);
    base.Add(from_base);
  }
  rows_.push_back({"10a. create from a 3-layer imported image + `echo hi`",
                   Ms(image.P(.5)) + " (" + Ms(image.P(.9)) + ")",
                   "figure 4 from template base, interleaved", Ms(base.P(.5)),
                   Ratio(image.P(.5), base.P(.5)), "p50 <= 10 ms" + Met(image.P(.5) <= 10)});

  // 10b: a snapshot of a sandbox that wrote `mib` MiB, against the same bytes copied on the
  // host from a tmpfs into the data dir's filesystem and synced (what a snapshot must do).
  const std::string writer =
      CreateSandbox(R"({"template":"bench-image","disk_mb":)" + std::to_string(mib + 64) +
                    R"(,"memory_mb":)" + std::to_string(mib * 2 + 256) + "}");
  const std::string fill = "head -c " + std::to_string(mib) + "M /dev/urandom > /opt/data";
  const json::object wrote =
      ParseObject(http_->Expect(200, "POST", "/v1/sandboxes/" + writer + "/exec",
                                json::serialize(json::object{{"cmd", fill}})));
  if (wrote.at("exit_code") != json::value(0)) {
    throw BenchError("writing " + std::to_string(mib) + " MiB answered " + json::serialize(wrote));
  }
  const int rounds = options_.quick ? 1 : 3;
  Samples snapshot, copy;
  std::string snap;
  for (int i = 0; i < rounds; ++i) {
    if (!snap.empty()) http_->Expect(204, "DELETE", "/v1/templates/" + snap);
    snap = "bench-snap-" + std::to_string(i);
    t0 = MonotonicNs();
    http_->Expect(201, "POST", "/v1/sandboxes/" + writer + "/snapshot",
                  json::serialize(json::object{{"name", snap}}));
    snapshot.Add(static_cast<double>(MonotonicNs() - t0) / 1e6);
    copy.Add(CopyAndSync(static_cast<size_t>(mib) << 20, daemon_->data_dir()));
  }
  DeleteSandbox(writer);
  rows_.push_back({"10b. snapshot of a sandbox with " + std::to_string(mib) + " MiB written",
                   Ms(snapshot.P(.5)), "the bytes copied tmpfs -> data dir + fsync", Ms(copy.P(.5)),
                   Ratio(snapshot.P(.5), copy.P(.5)), "measured"});

  // 10c: create + `echo hi` from that snapshot (four layers), against 10a's image.
  Samples from_snapshot, from_image;
  const std::string snap_body = json::serialize(json::object{{"template", snap}});
  for (int i = -2; i < n; ++i) {
    const double a = create_echo(snap_body);
    const double b = create_echo(R"({"template":"bench-image"})");
    if (i < 0) continue;
    from_snapshot.Add(a);
    from_image.Add(b);
  }
  rows_.push_back({"10c. create from that snapshot + `echo hi`",
                   Ms(from_snapshot.P(.5)) + " (" + Ms(from_snapshot.P(.9)) + ")",
                   "10a's image, interleaved", Ms(from_image.P(.5)),
                   Ratio(from_snapshot.P(.5), from_image.P(.5)), "measured"});
  http_->Expect(204, "DELETE", "/v1/templates/" + snap);
  http_->Expect(204, "DELETE", "/v1/templates/bench-image");
  Detail("10", "n=" + std::to_string(n) + " interleaved; image " + Dist(image, Ms) + "; base " +
                   Dist(base, Ms) + "; from the snapshot " + Dist(from_snapshot, Ms) +
                   "; import of the image (" + std::to_string(archive.size() >> 10) +
                   " KiB, once) " + Ms(import_ms) + "; snapshot rounds " + std::to_string(rounds) +
                   ", copy " + Dist(copy, Ms));
}

}  // namespace sandstream::bench
