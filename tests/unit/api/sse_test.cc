// Unit tests of the SSE writer: framing and both event encodings (pandastack and cloudflare)
// exactly as spec/events.md shows them. No sockets; the process is a finished one restored from
// its record, so nothing is spawned.
#include "api/sse.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/json.hpp>

#include "base/base64.h"
#include "base/clock.h"
#include "base/utf8.h"

namespace sandstream::sse {
namespace {
namespace json = boost::json;

// 2026-12-02T14:18:01.123Z
constexpr int64_t kMillis = 1796221081123;

struct Event {
  std::optional<std::string> id;
  std::string event;
  std::string data;
};

// Splits exactly one event; fails the test if the framing is anything else.
Event ParseOne(std::string_view text) {
  Event e;
  EXPECT_TRUE(text.ends_with("\n\n")) << text;
  if (text.starts_with("id: ")) {
    const size_t nl = text.find('\n');
    e.id = std::string(text.substr(4, nl - 4));
    text.remove_prefix(nl + 1);
  }
  EXPECT_TRUE(text.starts_with("event: ")) << text;
  size_t nl = text.find('\n');
  e.event = std::string(text.substr(7, nl - 7));
  text.remove_prefix(nl + 1);
  EXPECT_TRUE(text.starts_with("data: ")) << text;
  nl = text.find('\n');
  e.data = std::string(text.substr(6, nl - 6));
  EXPECT_EQ(text.substr(nl), "\n\n") << "data must be one line";
  return e;
}

json::object ParseData(const std::string& data) {
  boost::system::error_code ec;
  json::value v = json::parse(data, ec);
  EXPECT_FALSE(ec) << data;
  EXPECT_TRUE(v.is_object()) << data;
  return v.is_object() ? v.as_object() : json::object{};
}

class SseTest : public ::testing::Test {
 protected:
  std::shared_ptr<Process> MakeProcess(std::string cmd, std::vector<std::string> argv,
                                       ExitRecord exit = {}) {
    CommandSpec spec;
    spec.id = "proc_1a2b3c4d5e6f7a8b";
    spec.sandbox_id = "sb_6f1c2a9e0b7d4e3a";
    spec.cmd = std::move(cmd);
    spec.argv = std::move(argv);
    return Process::Restore(io_.get_executor(), std::move(spec), FromUnixMillis(kMillis), 4242,
                            exit, {}, 0, 0);
  }

  static LogEntry MakeEntry(uint64_t seq, EntryKind kind, const std::string& data = {}) {
    LogEntry e;
    e.seq = seq;
    e.kind = kind;
    e.data = data;
    e.time = FromUnixMillis(kMillis);
    return e;
  }

  std::string Render(Format format, Encoding encoding, const Process& process,
                     const LogEntry& entry, Kind kind = Kind::kExec) {
    std::string out;
    AppendEntry(out, format, kind, encoding, process, entry);
    return out;
  }

  boost::asio::io_context io_;
};

TEST(SseFramingTest, EventWithAndWithoutId) {
  std::string out;
  AppendEvent(out, 7, "stdout", "{\"chunk\":\"x\"}");
  EXPECT_EQ(out, "id: 7\nevent: stdout\ndata: {\"chunk\":\"x\"}\n\n");
  AppendEvent(out, 0, "error", "{}");
  EXPECT_EQ(out,
            "id: 7\nevent: stdout\ndata: {\"chunk\":\"x\"}\n\n"
            "event: error\ndata: {}\n\n");
  out.clear();
  AppendEvent(out, 18446744073709551ull, "gap", "{}");
  EXPECT_EQ(out, "id: 18446744073709551\nevent: gap\ndata: {}\n\n");
}

TEST(SseFramingTest, KeepaliveComment) {
  std::string out = "x";
  AppendComment(out, "keepalive");
  EXPECT_EQ(out, "x: keepalive\n\n");
}

TEST_F(SseTest, PandastackStartIsExactlyAsSpecified) {
  auto p = MakeProcess("npm run build", {"sh", "-c", "npm run build"});
  EXPECT_EQ(Render(Format::kPandastack, Encoding::kUtf8, *p, MakeEntry(1, EntryKind::kStart)),
            "id: 1\nevent: start\ndata: {\"process_id\":\"proc_1a2b3c4d5e6f7a8b\","
            "\"sandbox_id\":\"sb_6f1c2a9e0b7d4e3a\",\"pid\":4242}\n\n");
}

TEST_F(SseTest, PandastackChunksAreExactlyAsSpecified) {
  auto p = MakeProcess("pip install flask", {});
  EXPECT_EQ(Render(Format::kPandastack, Encoding::kUtf8, *p,
                   MakeEntry(2, EntryKind::kStdout, "Collecting flask\n")),
            "id: 2\nevent: stdout\ndata: {\"chunk\":\"Collecting flask\\n\"}\n\n");
  EXPECT_EQ(Render(Format::kPandastack, Encoding::kUtf8, *p,
                   MakeEntry(3, EntryKind::kStderr, "warning\n")),
            "id: 3\nevent: stderr\ndata: {\"chunk\":\"warning\\n\"}\n\n");
  EXPECT_EQ(
      Render(Format::kPandastack, Encoding::kBase64, *p, MakeEntry(4, EntryKind::kStdout, "hi")),
      "id: 4\nevent: stdout\ndata: {\"chunk\":\"aGk=\"}\n\n");
  EXPECT_EQ(Render(Format::kPandastack, Encoding::kBase64, *p,
                   MakeEntry(5, EntryKind::kStderr, std::string("\xff", 1))),
            "id: 5\nevent: stderr\ndata: {\"chunk\":\"/w==\"}\n\n");
}

TEST_F(SseTest, PandastackExitIsExactlyAsSpecified) {
  ExitRecord exit;
  exit.exit_code = 0;
  exit.reason = ExitReason::kExited;
  exit.duration_ms = 12;
  auto p = MakeProcess("true", {}, exit);
  EXPECT_EQ(Render(Format::kPandastack, Encoding::kUtf8, *p, MakeEntry(4, EntryKind::kExit)),
            "id: 4\nevent: exit\ndata: {\"exit_code\":0,\"signal\":null,\"reason\":\"exited\","
            "\"duration_ms\":12}\n\n");
}

TEST_F(SseTest, ExitNamesTheSignalAndReason) {
  ExitRecord exit;
  exit.exit_code = 137;
  exit.signal = 9;
  exit.reason = ExitReason::kTimeout;
  exit.duration_ms = 30001;
  auto p = MakeProcess("sleep 100", {}, exit);
  EXPECT_EQ(Render(Format::kPandastack, Encoding::kBase64, *p, MakeEntry(2, EntryKind::kExit)),
            "id: 2\nevent: exit\ndata: {\"exit_code\":137,\"signal\":\"SIGKILL\","
            "\"reason\":\"timeout\",\"duration_ms\":30001}\n\n");
  EXPECT_EQ(Render(Format::kCloudflare, Encoding::kUtf8, *p, MakeEntry(2, EntryKind::kExit)),
            "id: 2\nevent: complete\ndata: {\"type\":\"complete\","
            "\"timestamp\":\"2026-12-02T14:18:01.123Z\",\"exitCode\":137,\"signal\":\"SIGKILL\","
            "\"reason\":\"timeout\",\"durationMs\":30001}\n\n");
}

TEST_F(SseTest, ExitReasonsUseTheirWireNames) {
  const std::pair<ExitReason, const char*> reasons[] = {
      {ExitReason::kExited, "exited"},   {ExitReason::kSignaled, "signaled"},
      {ExitReason::kTimeout, "timeout"}, {ExitReason::kIdleTimeout, "idle_timeout"},
      {ExitReason::kKilled, "killed"},   {ExitReason::kOom, "oom"}};
  for (const auto& [reason, name] : reasons) {
    ExitRecord exit;
    exit.exit_code = 143;
    exit.signal = 15;
    exit.reason = reason;
    auto p = MakeProcess("x", {}, exit);
    for (Format format : {Format::kPandastack, Format::kCloudflare}) {
      const Event e = ParseOne(Render(format, Encoding::kUtf8, *p, MakeEntry(3, EntryKind::kExit)));
      const json::object data = ParseData(e.data);
      ASSERT_TRUE(data.contains("reason"));
      EXPECT_EQ(data.at("reason"), json::value(name));
      EXPECT_EQ(data.at("signal"), json::value("SIGTERM"));
    }
  }
}

TEST_F(SseTest, CloudflareEventsAreExactlyAsSpecified) {
  ExitRecord exit;
  exit.exit_code = 0;
  exit.duration_ms = 12;
  auto p = MakeProcess("npm run build", {"sh", "-c", "npm run build"}, exit);
  EXPECT_EQ(
      Render(Format::kCloudflare, Encoding::kUtf8, *p, MakeEntry(1, EntryKind::kStart)),
      "id: 1\nevent: start\ndata: {\"type\":\"start\",\"timestamp\":"
      "\"2026-12-02T14:18:01.123Z\",\"data\":\"\",\"processId\":\"proc_1a2b3c4d5e6f7a8b\","
      "\"sandboxId\":\"sb_6f1c2a9e0b7d4e3a\",\"pid\":4242,\"command\":\"npm run build\"}\n\n");
  EXPECT_EQ(
      Render(Format::kCloudflare, Encoding::kUtf8, *p, MakeEntry(2, EntryKind::kStdout, "built\n")),
      "id: 2\nevent: stdout\ndata: {\"type\":\"stdout\",\"timestamp\":"
      "\"2026-12-02T14:18:01.123Z\",\"data\":\"built\\n\"}\n\n");
  EXPECT_EQ(
      Render(Format::kCloudflare, Encoding::kBase64, *p, MakeEntry(3, EntryKind::kStderr, "hi")),
      "id: 3\nevent: stderr\ndata: {\"type\":\"stderr\",\"timestamp\":"
      "\"2026-12-02T14:18:01.123Z\",\"data\":\"aGk=\"}\n\n");
  EXPECT_EQ(Render(Format::kCloudflare, Encoding::kUtf8, *p, MakeEntry(4, EntryKind::kExit)),
            "id: 4\nevent: complete\ndata: {\"type\":\"complete\",\"timestamp\":"
            "\"2026-12-02T14:18:01.123Z\",\"exitCode\":0,\"signal\":null,\"reason\":\"exited\","
            "\"durationMs\":12}\n\n");
}

// A process's log stream, as Cloudflare's LogEvent readers (waitForExit, waitForLog) expect
// it: every event names its process and carries a string `data`; the last one is `exit`.
TEST_F(SseTest, CloudflareLogStreamEventsAreExactlyAsSpecified) {
  ExitRecord exit;
  exit.exit_code = 3;
  exit.duration_ms = 12;
  auto p = MakeProcess("npm run build", {"sh", "-c", "npm run build"}, exit);
  EXPECT_EQ(
      Render(Format::kCloudflare, Encoding::kUtf8, *p, MakeEntry(1, EntryKind::kStart), Kind::kLog),
      "id: 1\nevent: start\ndata: {\"type\":\"start\",\"timestamp\":"
      "\"2026-12-02T14:18:01.123Z\",\"processId\":\"proc_1a2b3c4d5e6f7a8b\",\"data\":\"\","
      "\"sandboxId\":\"sb_6f1c2a9e0b7d4e3a\",\"pid\":4242,\"command\":\"npm run build\"}\n\n");
  EXPECT_EQ(Render(Format::kCloudflare, Encoding::kUtf8, *p,
                   MakeEntry(2, EntryKind::kStdout, "built\n"), Kind::kLog),
            "id: 2\nevent: stdout\ndata: {\"type\":\"stdout\",\"timestamp\":"
            "\"2026-12-02T14:18:01.123Z\",\"processId\":\"proc_1a2b3c4d5e6f7a8b\","
            "\"data\":\"built\\n\"}\n\n");
  EXPECT_EQ(
      Render(Format::kCloudflare, Encoding::kUtf8, *p, MakeEntry(3, EntryKind::kExit), Kind::kLog),
      "id: 3\nevent: exit\ndata: {\"type\":\"exit\",\"timestamp\":"
      "\"2026-12-02T14:18:01.123Z\",\"processId\":\"proc_1a2b3c4d5e6f7a8b\","
      "\"data\":\"Process failed with exit code 3\",\"exitCode\":3,\"signal\":null,"
      "\"reason\":\"exited\",\"durationMs\":12}\n\n");
  // The pandastack encoding is the same on both streams.
  EXPECT_EQ(
      Render(Format::kPandastack, Encoding::kUtf8, *p, MakeEntry(3, EntryKind::kExit), Kind::kLog),
      Render(Format::kPandastack, Encoding::kUtf8, *p, MakeEntry(3, EntryKind::kExit)));
}

TEST_F(SseTest, CloudflareLogStreamExitSaysHowTheProcessEnded) {
  const std::tuple<int, ExitReason, const char*> cases[] = {
      {0, ExitReason::kExited, "Process completed with exit code 0"},
      {1, ExitReason::kExited, "Process failed with exit code 1"},
      {143, ExitReason::kKilled, "Process killed with exit code 143"},
      {137, ExitReason::kTimeout, "Process failed with exit code 137"}};
  for (const auto& [code, reason, sentence] : cases) {
    ExitRecord exit;
    exit.exit_code = code;
    exit.reason = reason;
    auto p = MakeProcess("x", {}, exit);
    const Event e = ParseOne(Render(Format::kCloudflare, Encoding::kUtf8, *p,
                                    MakeEntry(2, EntryKind::kExit), Kind::kLog));
    EXPECT_EQ(e.event, "exit");
    const json::object data = ParseData(e.data);
    EXPECT_EQ(data.at("data"), json::value(sentence));
    EXPECT_EQ(data.at("exitCode"), json::value(code));
  }
}

TEST_F(SseTest, CloudflareStartCommandComesFromArgvWhenThereIsNoCmd) {
  auto p = MakeProcess("", {"python3", "-c", "print(\"hi\")"});
  const Event e =
      ParseOne(Render(Format::kCloudflare, Encoding::kUtf8, *p, MakeEntry(1, EntryKind::kStart)));
  EXPECT_EQ(e.id, std::optional<std::string>("1"));
  EXPECT_EQ(e.event, "start");
  const json::object data = ParseData(e.data);
  EXPECT_EQ(data.at("command"), json::value("python3 -c print(\"hi\")"));
  EXPECT_EQ(data.at("pid"), json::value(4242));
}

TEST_F(SseTest, CloudflareStartEscapesTheCommand) {
  auto p = MakeProcess("printf 'a\\tb\"\n'", {"sh", "-c", "ignored"});
  const Event e =
      ParseOne(Render(Format::kCloudflare, Encoding::kUtf8, *p, MakeEntry(1, EntryKind::kStart)));
  const json::object data = ParseData(e.data);
  EXPECT_EQ(data.at("command"), json::value("printf 'a\\tb\"\n'"));
}

TEST_F(SseTest, Utf8ChunksReplaceInvalidBytesAndBase64KeepsThemExactly) {
  auto p = MakeProcess("x", {});
  const std::string bytes("ok\xff\xc3(\n\0\"", 8);
  for (Format format : {Format::kPandastack, Format::kCloudflare}) {
    const char* field = format == Format::kPandastack ? "chunk" : "data";

    Event e =
        ParseOne(Render(format, Encoding::kUtf8, *p, MakeEntry(2, EntryKind::kStdout, bytes)));
    json::object data = ParseData(e.data);
    EXPECT_EQ(data.at(field),
              json::value("ok\xEF\xBF\xBD\xEF\xBF\xBD(\n" + std::string(1, '\0') + "\""));

    e = ParseOne(Render(format, Encoding::kBase64, *p, MakeEntry(2, EntryKind::kStdout, bytes)));
    data = ParseData(e.data);
    ASSERT_TRUE(data.at(field).is_string());
    EXPECT_EQ(DecodeBase64(data.at(field).as_string()), std::optional<std::string>(bytes));
  }
}

TEST_F(SseTest, RandomChunksAreOneEventWithOneDataLine) {
  auto p = MakeProcess("x", {});
  std::mt19937 rng(21);
  std::uniform_int_distribution<int> byte(0, 255);
  for (int trial = 0; trial < 500; ++trial) {
    std::string bytes(1 + rng() % 200, '\0');
    for (char& c : bytes) c = static_cast<char>(byte(rng));
    const uint64_t seq = 2 + rng() % 100000;
    const EntryKind kind = rng() % 2 ? EntryKind::kStdout : EntryKind::kStderr;
    const char* name = kind == EntryKind::kStdout ? "stdout" : "stderr";
    for (Format format : {Format::kPandastack, Format::kCloudflare}) {
      const char* field = format == Format::kPandastack ? "chunk" : "data";
      for (Encoding encoding : {Encoding::kUtf8, Encoding::kBase64}) {
        const Event e = ParseOne(Render(format, encoding, *p, MakeEntry(seq, kind, bytes)));
        ASSERT_EQ(e.id, std::optional<std::string>(std::to_string(seq)));
        ASSERT_EQ(e.event, name);
        const json::object data = ParseData(e.data);
        ASSERT_TRUE(data.at(field).is_string());
        const std::string value(data.at(field).as_string());
        if (encoding == Encoding::kBase64) {
          ASSERT_EQ(DecodeBase64(value), std::optional<std::string>(bytes));
        } else {
          std::string expected;
          AppendSanitizedUtf8(expected, bytes);
          ASSERT_EQ(value, expected);
        }
        if (format == Format::kCloudflare) {
          ASSERT_EQ(data.at("type"), json::value(name));
          ASSERT_EQ(data.size(), 3u);
        } else {
          ASSERT_EQ(data.size(), 1u);
        }
      }
    }
  }
}

TEST(SseGapTest, PandastackGapIsExactlyAsSpecified) {
  std::string out;
  AppendGap(out, Format::kPandastack, Gap{5, 9, 1048576});
  EXPECT_EQ(out, "id: 9\nevent: gap\ndata: {\"from_seq\":5,\"to_seq\":9,\"bytes\":1048576}\n\n");
  out.clear();
  AppendGap(out, Format::kPandastack, Gap{3, 3, 0});
  EXPECT_EQ(out, "id: 3\nevent: gap\ndata: {\"from_seq\":3,\"to_seq\":3,\"bytes\":0}\n\n");
}

TEST(SseGapTest, CloudflareGapCarriesTypeTimestampAndEmptyData) {
  const std::string before = FormatRfc3339(SystemNow());
  std::string out;
  AppendGap(out, Format::kCloudflare, Gap{5, 9, 1048576});
  const std::string after = FormatRfc3339(SystemNow());
  const Event e = ParseOne(out);
  EXPECT_EQ(e.id, std::optional<std::string>("9"));
  EXPECT_EQ(e.event, "gap");
  const json::object data = ParseData(e.data);
  ASSERT_TRUE(data.contains("timestamp") && data.at("timestamp").is_string());
  const std::string ts(data.at("timestamp").as_string());
  EXPECT_GE(ts, before);
  EXPECT_LE(ts, after);
  EXPECT_EQ(e.data, "{\"type\":\"gap\",\"timestamp\":\"" + ts +
                        "\",\"data\":\"\",\"fromSeq\":5,\"toSeq\":9,\"bytes\":1048576}");
}

TEST(SseGapTest, UnknownByteCountIsStillValidJson) {
  for (Format format : {Format::kPandastack, Format::kCloudflare}) {
    std::string out;
    AppendGap(out, format, Gap{1, 4, std::nullopt});
    const Event e = ParseOne(out);
    EXPECT_EQ(e.id, std::optional<std::string>("4"));
    const json::object data = ParseData(e.data);
    EXPECT_EQ(data.at(format == Format::kPandastack ? "from_seq" : "fromSeq"), json::value(1));
    EXPECT_EQ(data.at(format == Format::kPandastack ? "to_seq" : "toSeq"), json::value(4));
  }
}

TEST(SseErrorTest, PandastackErrorIsExactlyAsSpecified) {
  std::string out;
  AppendError(out, Format::kPandastack, ErrorCode::kShuttingDown, "sandstreamd is shutting down");
  EXPECT_EQ(out,
            "event: error\ndata: {\"code\":\"shutting_down\","
            "\"message\":\"sandstreamd is shutting down\"}\n\n");
}

TEST(SseErrorTest, CloudflareErrorCarriesTypeTimestampDataMessageAndCode) {
  const std::string before = FormatRfc3339(SystemNow());
  std::string out;
  AppendError(out, Format::kCloudflare, ErrorCode::kSandboxSetupFailed, "mounts: EPERM");
  const std::string after = FormatRfc3339(SystemNow());
  const Event e = ParseOne(out);
  EXPECT_FALSE(e.id.has_value());
  EXPECT_EQ(e.event, "error");
  const json::object data = ParseData(e.data);
  ASSERT_TRUE(data.contains("timestamp") && data.at("timestamp").is_string());
  const std::string ts(data.at("timestamp").as_string());
  EXPECT_GE(ts, before);
  EXPECT_LE(ts, after);
  EXPECT_EQ(e.data, "{\"type\":\"error\",\"timestamp\":\"" + ts +
                        "\",\"data\":\"mounts: EPERM\",\"error\":\"mounts: EPERM\","
                        "\"code\":\"sandbox_setup_failed\"}");
}

TEST(SseErrorTest, MessagesAreEscapedInBothFormats) {
  const std::string message = "step \"x\": line1\nline2\t\xff";
  for (Format format : {Format::kPandastack, Format::kCloudflare}) {
    std::string out;
    AppendError(out, format, ErrorCode::kInternal, message);
    const Event e = ParseOne(out);
    EXPECT_FALSE(e.id.has_value());
    const json::object data = ParseData(e.data);
    EXPECT_EQ(data.at(format == Format::kPandastack ? "message" : "error"),
              json::value("step \"x\": line1\nline2\t\xEF\xBF\xBD"));
    EXPECT_EQ(data.at("code"), json::value("internal"));
  }
}

}  // namespace
}  // namespace sandstream::sse
