// Unit tests of the CLI's SSE parser and process-stream decoder: framing split at every byte,
// last-event-id bookkeeping for resuming, and the reconnect loop of FollowProcess.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli/process_stream.h"
#include "base/sse_parser.h"

namespace sandstream::cli {
namespace {

std::vector<SseEvent> FeedAll(SseParser& parser, const std::vector<std::string>& pieces) {
  std::vector<SseEvent> events;
  for (const std::string& piece : pieces) {
    for (SseEvent& event : parser.Feed(piece)) events.push_back(std::move(event));
  }
  return events;
}

constexpr std::string_view kStream =
    "id: 1\nevent: start\ndata: {\"process_id\":\"proc_1\",\"sandbox_id\":\"sb_1\",\"pid\":7}\n\n"
    ": keepalive\n\n"
    "id: 2\nevent: stdout\ndata: {\"chunk\":\"aGk=\"}\n\n"
    "id: 3\r\nevent: stderr\r\ndata: {\"chunk\":\"/w==\"}\r\n\r\n"
    "id: 4\revent: exit\rdata: {\"exit_code\":3,\"signal\":null,\"reason\":\"exited\","
    "\"duration_ms\":12}\r\r";

TEST(SseParserTest, ParsesEventsWithEveryLineEnding) {
  SseParser parser;
  std::vector<SseEvent> events = parser.Feed(kStream);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].type, "start");
  EXPECT_EQ(events[0].id, "1");
  EXPECT_EQ(events[1].type, "stdout");
  EXPECT_EQ(events[1].data, "{\"chunk\":\"aGk=\"}");
  EXPECT_EQ(events[2].type, "stderr");
  EXPECT_EQ(events[2].id, "3");
  EXPECT_EQ(events[3].type, "exit");
  EXPECT_EQ(events[3].id, "4");
  EXPECT_EQ(parser.last_event_id(), "4");
}

TEST(SseParserTest, SameEventsWhateverTheSplit) {
  SseParser whole;
  std::vector<SseEvent> expected = whole.Feed(kStream);
  for (size_t cut = 0; cut <= kStream.size(); ++cut) {
    SseParser parser;
    std::vector<SseEvent> events =
        FeedAll(parser, {std::string(kStream.substr(0, cut)), std::string(kStream.substr(cut))});
    ASSERT_EQ(events.size(), expected.size()) << "cut at " << cut;
    for (size_t i = 0; i < events.size(); ++i) {
      EXPECT_EQ(events[i].type, expected[i].type) << "cut at " << cut;
      EXPECT_EQ(events[i].data, expected[i].data) << "cut at " << cut;
      EXPECT_EQ(events[i].id, expected[i].id) << "cut at " << cut;
    }
  }
  SseParser bytewise;
  std::vector<std::string> bytes;
  for (char c : kStream) bytes.emplace_back(1, c);
  EXPECT_EQ(FeedAll(bytewise, bytes).size(), expected.size());
}

TEST(SseParserTest, JoinsDataLinesAndDefaultsTheType) {
  SseParser parser;
  std::vector<SseEvent> events = parser.Feed("data: a\ndata:b\ndata\n\n");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].type, "message");
  EXPECT_EQ(events[0].data, "a\nb\n");
}

TEST(SseParserTest, IgnoresCommentsUnknownFieldsAndEventsWithoutData) {
  SseParser parser;
  std::vector<SseEvent> events =
      parser.Feed(": keepalive\nretry: 10\nfoo: bar\n\nevent: lonely\n\nevent: x\ndata: 1\n\n");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].type, "x");
  EXPECT_EQ(events[0].data, "1");
}

TEST(SseParserTest, KeepsOnlyOneLeadingSpaceOfAValue) {
  SseParser parser;
  std::vector<SseEvent> events = parser.Feed("data:  two\n\n");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].data, " two");
}

TEST(SseParserTest, StripsALeadingByteOrderMarkEvenWhenSplit) {
  SseParser parser;
  std::vector<SseEvent> events = FeedAll(parser, {"\xEF", "\xBB",
                                                  "\xBF"
                                                  "data: x\n\n"});
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].data, "x");
}

TEST(SseParserTest, LastEventIdPersistsAcrossEventsWithoutAnId) {
  SseParser parser;
  std::vector<SseEvent> events =
      parser.Feed("id: 9\nevent: gap\ndata: {}\n\nevent: error\ndata: {}\n\n");
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].id, "9");
  EXPECT_EQ(parser.last_event_id(), "9");
}

TEST(SseParserTest, AnIdWithNulIsIgnored) {
  SseParser parser;
  parser.Feed(std::string("id: 5\n\nid: 6\0x\ndata: y\n\n", 24));
  EXPECT_EQ(parser.last_event_id(), "5");
}

// Resuming must send the id of the last event fully received: an `id:` line of an event cut
// off by the drop would skip that event.
TEST(SseParserTest, ACutOffEventDoesNotAdvanceTheLastEventId) {
  SseParser parser;
  std::vector<SseEvent> events = parser.Feed("id: 2\nevent: stdout\ndata: {}\n\nid: 3\nevent: std");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(parser.last_event_id(), "2");
  parser.Reset();
  events = parser.Feed("out\ndata: {}\n\n");
  // After Reset the orphaned tail is a field line of a fresh event with no `event:`.
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].type, "message");
  EXPECT_EQ(parser.last_event_id(), "2");
  events = parser.Feed("id: 3\nevent: stdout\ndata: {}\n\n");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].id, "3");
}

struct Captured {
  std::string out;
  std::string err;
  std::vector<int64_t> gaps;
};

ProcessStreamCallbacks Capture(Captured* captured) {
  ProcessStreamCallbacks callbacks;
  callbacks.on_output = [captured](Channel channel, std::string_view bytes) {
    (channel == Channel::kStdout ? captured->out : captured->err).append(bytes);
    return true;
  };
  callbacks.on_gap = [captured](int64_t from, int64_t to, int64_t bytes) {
    captured->gaps.insert(captured->gaps.end(), {from, to, bytes});
  };
  return callbacks;
}

TEST(ProcessStreamTest, DecodesOutputAndExit) {
  Captured captured;
  ProcessStream stream(Capture(&captured));
  EXPECT_FALSE(stream.Feed(kStream));
  EXPECT_EQ(stream.process_id(), "proc_1");
  EXPECT_EQ(captured.out, "hi");
  EXPECT_EQ(captured.err, "\xFF");
  ASSERT_TRUE(stream.exit().has_value());
  EXPECT_EQ(stream.exit()->exit_code, 3);
  EXPECT_EQ(stream.exit()->reason, "exited");
  EXPECT_EQ(stream.exit()->duration_ms, 12);
  EXPECT_TRUE(stream.done());
  EXPECT_FALSE(stream.error().has_value());
}

TEST(ProcessStreamTest, SignalExitKeepsTheShellStatusAndName) {
  ProcessStream stream({});
  stream.Feed(
      "id: 2\nevent: exit\ndata: {\"exit_code\":137,\"signal\":\"SIGKILL\",\"reason\":"
      "\"timeout\",\"duration_ms\":1000}\n\n");
  ASSERT_TRUE(stream.exit().has_value());
  EXPECT_EQ(stream.exit()->exit_code, 137);
  EXPECT_EQ(stream.exit()->signal, "SIGKILL");
  EXPECT_EQ(stream.exit()->reason, "timeout");
}

TEST(ProcessStreamTest, ErrorEventEndsTheStreamWithoutAnExit) {
  ProcessStream stream({});
  EXPECT_FALSE(stream.Feed(
      "event: error\ndata: {\"code\":\"shutting_down\",\"message\":\"sandstreamd is shutting "
      "down\"}\n\n"));
  ASSERT_TRUE(stream.error().has_value());
  EXPECT_EQ(stream.error()->code, "shutting_down");
  EXPECT_FALSE(stream.exit().has_value());
}

TEST(ProcessStreamTest, MalformedEventsAreErrorsNotExits) {
  for (std::string_view bad :
       {"event: exit\ndata: {\"exit_code\":null}\n\n", "event: exit\ndata: nope\n\n",
        "event: stdout\ndata: {\"chunk\":\"a\"}\n\n", "event: stdout\ndata: {}\n\n"}) {
    ProcessStream stream({});
    EXPECT_FALSE(stream.Feed(bad)) << bad;
    EXPECT_TRUE(stream.error().has_value()) << bad;
    EXPECT_FALSE(stream.exit().has_value()) << bad;
  }
}

TEST(ProcessStreamTest, ReportsGapsAndIgnoresUnknownEvents) {
  Captured captured;
  ProcessStream stream(Capture(&captured));
  EXPECT_TRUE(
      stream.Feed("id: 9\nevent: gap\ndata: {\"from_seq\":5,\"to_seq\":9,\"bytes\":1048576}\n\n"
                  "id: 10\nevent: novelty\ndata: whatever\n\n"));
  EXPECT_EQ(captured.gaps, (std::vector<int64_t>{5, 9, 1048576}));
  EXPECT_EQ(stream.last_event_id(), "10");
  EXPECT_FALSE(stream.done());
}

TEST(ProcessStreamTest, StopsWhenOutputCannotBeDelivered) {
  ProcessStreamCallbacks callbacks;
  callbacks.on_output = [](Channel, std::string_view) { return false; };
  ProcessStream stream(callbacks);
  EXPECT_FALSE(stream.Feed("id: 2\nevent: stdout\ndata: {\"chunk\":\"eA==\"}\n\n"));
  EXPECT_TRUE(stream.output_closed());
}

ClientError Dropped() {
  ClientError error;
  error.kind = ClientError::Kind::kTransport;
  error.connected = true;
  error.message = "read response: end of stream";
  return error;
}

RetryPolicy FastRetries() {
  RetryPolicy policy;
  policy.first_backoff = std::chrono::milliseconds(1);
  policy.max_backoff = std::chrono::milliseconds(1);
  policy.max_attempts = 3;
  return policy;
}

// A server that drops the connection after each event; every reconnect must carry the id of
// the last event received, and the output must arrive exactly once.
TEST(FollowProcessTest, ResumesAfterEachDropWithTheLastEventId) {
  const std::vector<std::string> events = {
      "id: 1\nevent: start\ndata: {\"process_id\":\"proc_1\",\"sandbox_id\":\"sb\",\"pid\":1}\n\n",
      "id: 2\nevent: stdout\ndata: {\"chunk\":\"YQ==\"}\n\n",
      "id: 3\nevent: stderr\ndata: {\"chunk\":\"Yg==\"}\n\n",
      "id: 4\nevent: stdout\ndata: {\"chunk\":\"Yw==\"}\n\n",
      "id: 5\nevent: exit\ndata: {\"exit_code\":0,\"signal\":null,\"reason\":\"exited\","
      "\"duration_ms\":1}\n\n"};
  std::vector<std::string> resumed_from;
  StreamOpener open = [&](const std::string& last_event_id,
                          const BodySink& sink) -> ClientResult<HttpResponse> {
    resumed_from.push_back(last_event_id);
    size_t next = last_event_id.empty() ? 0 : std::stoul(last_event_id);
    sink(events[next]);
    if (next + 1 < events.size()) {
      sink(events[next + 1].substr(0, 12));  // half of the next event, then the drop
      return Dropped();
    }
    return HttpResponse{200, ""};
  };
  Captured captured;
  ProcessStream stream(Capture(&captured));
  ASSERT_TRUE(FollowProcess(stream, open, /*until_exit=*/true, FastRetries()).has_value());
  EXPECT_EQ(resumed_from, (std::vector<std::string>{"", "1", "2", "3", "4"}));
  EXPECT_EQ(captured.out, "ac");
  EXPECT_EQ(captured.err, "b");
  ASSERT_TRUE(stream.exit().has_value());
  EXPECT_EQ(stream.exit()->exit_code, 0);
}

TEST(FollowProcessTest, GivesUpAfterRepeatedFailuresWithoutProgress) {
  int attempts = 0;
  StreamOpener open = [&](const std::string&, const BodySink&) -> ClientResult<HttpResponse> {
    ++attempts;
    return Dropped();
  };
  ProcessStream stream({});
  auto result = FollowProcess(stream, open, /*until_exit=*/true, FastRetries());
  ASSERT_FALSE(result.has_value());
  EXPECT_EQ(result.error().kind, ClientError::Kind::kTransport);
  EXPECT_EQ(attempts, 4);
}

TEST(FollowProcessTest, DoesNotRetryWhenTheServerWasNeverReached) {
  int attempts = 0;
  StreamOpener open = [&](const std::string&, const BodySink&) -> ClientResult<HttpResponse> {
    ++attempts;
    ClientError error;
    error.kind = ClientError::Kind::kTransport;
    error.message = "connect 127.0.0.1:1: Connection refused";
    return error;
  };
  ProcessStream stream({});
  EXPECT_FALSE(FollowProcess(stream, open, /*until_exit=*/true, FastRetries()).has_value());
  EXPECT_EQ(attempts, 1);
}

TEST(FollowProcessTest, ReturnsTheServersError) {
  StreamOpener open = [](const std::string&, const BodySink&) -> ClientResult<HttpResponse> {
    return HttpResponse{404, R"({"error":{"code":"not_found","message":"no sandbox sb_x"}})"};
  };
  ProcessStream stream({});
  auto result = FollowProcess(stream, open, /*until_exit=*/true, FastRetries());
  ASSERT_FALSE(result.has_value());
  EXPECT_EQ(result.error().kind, ClientError::Kind::kApi);
  EXPECT_EQ(result.error().status, 404);
  EXPECT_EQ(result.error().code, "not_found");
  EXPECT_EQ(result.error().message, "no sandbox sb_x");
}

// A response may end with its connection, so an end before the exit is resumed like a drop;
// a server that keeps ending streams early is given up on without inventing an exit.
TEST(FollowProcessTest, AStreamThatEndsBeforeTheExitIsResumedThenReported) {
  std::vector<std::string> resumed_from;
  StreamOpener open = [&](const std::string& last_event_id,
                          const BodySink& sink) -> ClientResult<HttpResponse> {
    resumed_from.push_back(last_event_id);
    if (last_event_id.empty()) {
      sink("id: 1\nevent: start\ndata: {\"process_id\":\"p\",\"sandbox_id\":\"s\",\"pid\":1}\n\n");
    }
    return HttpResponse{200, ""};
  };
  ProcessStream stream({});
  ASSERT_TRUE(FollowProcess(stream, open, /*until_exit=*/true, FastRetries()).has_value());
  EXPECT_EQ(resumed_from, (std::vector<std::string>{"", "1", "1", "1"}));
  EXPECT_FALSE(stream.exit().has_value());
  EXPECT_FALSE(stream.error().has_value());
}

TEST(FollowProcessTest, WithoutUntilExitAnEndedStreamIsDone) {
  int attempts = 0;
  StreamOpener open = [&](const std::string&, const BodySink& sink) -> ClientResult<HttpResponse> {
    ++attempts;
    sink("id: 2\nevent: stdout\ndata: {\"chunk\":\"eA==\"}\n\n");
    return HttpResponse{200, ""};
  };
  ProcessStream stream({});
  ASSERT_TRUE(FollowProcess(stream, open, /*until_exit=*/false, FastRetries()).has_value());
  EXPECT_EQ(attempts, 1);
}

// A follow resumed at or past the exit is answered 204: the stream is over, not lost.
TEST(FollowProcessTest, A204EndsTheStreamWithoutRetrying) {
  std::vector<std::string> resumed_from;
  StreamOpener open = [&](const std::string& last_event_id,
                          const BodySink& sink) -> ClientResult<HttpResponse> {
    resumed_from.push_back(last_event_id);
    if (!last_event_id.empty()) return HttpResponse{204, ""};
    sink("id: 1\nevent: start\ndata: {\"process_id\":\"p\",\"sandbox_id\":\"s\",\"pid\":1}\n\n");
    return Dropped();
  };
  ProcessStream stream({});
  ASSERT_TRUE(FollowProcess(stream, open, /*until_exit=*/true, FastRetries()).has_value());
  EXPECT_EQ(resumed_from, (std::vector<std::string>{"", "1"}));
  EXPECT_TRUE(stream.ended());
  EXPECT_TRUE(stream.done());
  EXPECT_FALSE(stream.exit().has_value());
  EXPECT_FALSE(stream.error().has_value());
}

TEST(ApiErrorTest, FallsBackToTheStatusForANonJsonBody) {
  ClientError error = ApiError(HttpResponse{502, "Bad Gateway\n"});
  EXPECT_EQ(error.code, "http_502");
  EXPECT_EQ(error.message, "Bad Gateway");
}

TEST(ParseEndpointTest, AcceptsHttpOnly) {
  auto endpoint = ParseEndpoint("http://127.0.0.1:8080/");
  ASSERT_TRUE(endpoint.has_value());
  EXPECT_EQ(endpoint->host, "127.0.0.1");
  EXPECT_EQ(endpoint->port, "8080");
  EXPECT_EQ(endpoint->base_path, "");
  auto prefixed = ParseEndpoint("http://localhost/sandstream");
  ASSERT_TRUE(prefixed.has_value());
  EXPECT_EQ(prefixed->port, "80");
  EXPECT_EQ(prefixed->base_path, "/sandstream");
  auto ipv6 = ParseEndpoint("http://[::1]:9/");
  ASSERT_TRUE(ipv6.has_value());
  EXPECT_EQ(ipv6->host, "::1");
  EXPECT_FALSE(ParseEndpoint("https://example.com").has_value());
  EXPECT_FALSE(ParseEndpoint("not a url").has_value());
}

}  // namespace
}  // namespace sandstream::cli
