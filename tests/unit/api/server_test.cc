// Unit tests of the HTTP front over a loopback socket: keep-alive, refusals answered from the
// header before any body is read (the key, the announced size), a chunked body past its limit,
// an oversized or malformed header, the connection limit, resuming a log by Last-Event-ID, and
// shutdown (idle connections closed, streams ended with an error event, no more accepts). On the
// test's clock: a follower's keepalive, a parked reader's resume grace, a wait's timeout and
// shutdown's grace for a stuck session.
#include "api/server.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <string>

#include "server_harness.h"

namespace sandstream::api {
namespace {

namespace asio = boost::asio;
namespace json = boost::json;
using unit::OnThread;
using unit::RawClient;
using unit::RunFor;
using unit::RunTask;
using unit::RunUntil;
using namespace std::chrono_literals;

std::string Post(const std::string& path, const std::string& extra_fields) {
  return "POST " + path + " HTTP/1.1\r\nHost: t\r\n" + extra_fields + "\r\n";
}

std::string Authorization() {
  return std::string("Authorization: Bearer ") + unit::ServerHarness::kKey + "\r\n";
}

std::string Str(const json::value& v) {
  return v.is_string() ? std::string(v.as_string()) : json::serialize(v);
}

json::object ErrorOf(const RawClient::Response& r) {
  return json::parse(r.body).as_object().at("error").as_object();
}

class ServerTest : public ::testing::Test, public unit::ServerHarness {};

TEST_F(ServerTest, AHealthCheckNeedsNoKeyAndTheConnectionStaysOpen) {
  Serve();
  const auto [first, second] = OnThread(io_, [&] {
    RawClient c(endpoint_);
    const std::string get = "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n";
    c.Send(get);
    auto a = c.ReadResponse();
    c.Send(get);
    auto b = c.ReadResponse();
    return std::make_pair(a, b);
  });
  ASSERT_TRUE(first);
  ASSERT_TRUE(second) << "the second request on the connection got no answer";
  EXPECT_EQ(first->status, 200);
  EXPECT_EQ(second->status, 200);
  EXPECT_EQ(Str(json::parse(second->body).at("status")), "ok");
}

TEST_F(ServerTest, AMissingKeyIsRefusedBeforeTheBodyIsSent) {
  Serve();
  const auto [response, closed] = OnThread(io_, [&] {
    RawClient c(endpoint_);
    // The body is announced and never sent: the answer cannot wait for it.
    c.Send(Post("/v1/sandboxes", "Content-Type: application/json\r\nContent-Length: 100000\r\n"));
    auto r = c.ReadResponse();
    return std::make_pair(r, c.ReadEof());
  });
  ASSERT_TRUE(response) << "no answer without the body";
  EXPECT_EQ(response->status, 401);
  EXPECT_EQ(Str(ErrorOf(*response).at("code")), "unauthorized");
  EXPECT_EQ(RawClient::Field(response->head, "connection"), "close");
  EXPECT_TRUE(closed) << "the connection stayed open with a body unread";
  EXPECT_EQ(service_->sandbox_count(), 0u);
}

TEST_F(ServerTest, AWrongKeyIsRefusedTheSameWay) {
  Serve();
  const auto response = OnThread(io_, [&] {
    RawClient c(endpoint_);
    c.Send(Post("/v1/sandboxes", "Authorization: Bearer nope\r\nContent-Length: 100000\r\n"));
    return c.ReadResponse();
  });
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 401);
  EXPECT_EQ(Str(ErrorOf(*response).at("message")), "wrong API key");
}

TEST_F(ServerTest, AnAnnouncedBodyPastTheLimitIs413BeforeItIsSent) {
  ServerOptions options = Options();
  options.max_body_bytes = 1024;
  Serve(options);
  const auto [response, closed] = OnThread(io_, [&] {
    RawClient c(endpoint_);
    c.Send(Post("/v1/sandboxes", Authorization() + "Content-Length: 1025\r\n"));
    auto r = c.ReadResponse();
    return std::make_pair(r, c.ReadEof());
  });
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 413);
  EXPECT_EQ(Str(ErrorOf(*response).at("code")), "payload_too_large");
  EXPECT_TRUE(closed);
  EXPECT_EQ(service_->sandbox_count(), 0u);
}

TEST_F(ServerTest, AChunkedBodyPastTheLimitIs413) {
  ServerOptions options = Options();
  options.max_body_bytes = 1024;
  Serve(options);
  const auto response = OnThread(io_, [&] {
    RawClient c(endpoint_);
    const std::string chunk(2000, ' ');
    c.Send(Post("/v1/sandboxes", Authorization() + "Transfer-Encoding: chunked\r\n") + "7d0\r\n" +
           chunk + "\r\n0\r\n\r\n");
    return c.ReadResponse();
  });
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 413);
  EXPECT_EQ(service_->sandbox_count(), 0u);
}

TEST_F(ServerTest, ABodyWithinTheLimitIsServed) {
  ServerOptions options = Options();
  options.max_body_bytes = 1024;
  Serve(options);
  const auto response = OnThread(io_, [&] {
    RawClient c(endpoint_);
    const std::string body = "{}";
    c.Send(Post("/v1/sandboxes", Authorization() + "Content-Type: application/json\r\n" +
                                     "Content-Length: 2\r\n") +
           body);
    return c.ReadResponse();
  });
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 201) << response->body;
  EXPECT_EQ(service_->sandbox_count(), 1u);
}

TEST_F(ServerTest, AHeaderPastItsLimitIs431) {
  Serve();
  const auto response = OnThread(io_, [&] {
    RawClient c(endpoint_);
    c.Send("GET /healthz HTTP/1.1\r\nHost: t\r\nX-Pad: " + std::string(70000, 'a') + "\r\n\r\n");
    return c.ReadResponse();
  });
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 431);
  EXPECT_EQ(Str(ErrorOf(*response).at("code")), "request_header_too_large");
}

TEST_F(ServerTest, AMalformedRequestIs400AndAnUnknownPath404) {
  Serve();
  const auto [garbage, unknown] = OnThread(io_, [&] {
    RawClient bad(endpoint_);
    bad.Send("NOT HTTP AT ALL\r\n\r\n");
    RawClient c(endpoint_);
    c.Send("GET /v1/nowhere HTTP/1.1\r\nHost: t\r\n" + Authorization() + "\r\n");
    return std::make_pair(bad.ReadResponse(), c.ReadResponse());
  });
  ASSERT_TRUE(garbage);
  EXPECT_EQ(garbage->status, 400);
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404);
}

TEST_F(ServerTest, PastMaxConnectionsANewConnectionGets503) {
  ServerOptions options = Options();
  options.max_connections = 1;
  Serve(options);
  RawClient first(endpoint_);
  ASSERT_TRUE(first.connected());
  ASSERT_TRUE(RunUntil(io_, [&] { return server_->open_sessions() == 1; }, 5s));
  const auto refused = OnThread(io_, [&] {
    RawClient second(endpoint_);
    second.Send("GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n");
    return second.ReadResponse();
  });
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 503);
  EXPECT_EQ(Str(ErrorOf(*refused).at("code")), "too_many_connections");
  // The first connection is served as usual.
  const auto served = OnThread(io_, [&] {
    first.Send("GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n");
    return first.ReadResponse();
  });
  ASSERT_TRUE(served);
  EXPECT_EQ(served->status, 200);
}

TEST_F(ServerTest, ALogResumesAfterLastEventId) {
  Serve();
  const SandboxEntry* sb = NewSandbox();
  auto started = RunTask(io_, service_->StartProcess(
                              sb->id, unit::Sh("printf one; sleep 0.1; printf two; sleep 0.1; "
                                               "printf three")));
  ASSERT_TRUE(started) << started.error().message;
  auto p = started->process;
  RunTask(io_, p->WaitExit());
  // Where the first chunk ends, and what the log holds after it.
  uint64_t first_seq = 0;
  std::string rest;
  for (const LogEntry& e : p->log().entries()) {
    if (e.kind != EntryKind::kStdout) continue;
    if (first_seq == 0) {
      first_seq = e.seq;
    } else {
      rest += e.data;
    }
  }
  ASSERT_NE(first_seq, 0u);
  ASSERT_FALSE(rest.empty()) << "the output came in one chunk";
  const std::string path = "/v1/sandboxes/" + sb->id + "/processes/" + p->id() + "/logs";
  const auto [resumed, bad] = OnThread(io_, [&] {
    RawClient c(endpoint_);
    c.Send("GET " + path + " HTTP/1.1\r\nHost: t\r\n" + Authorization() +
           "Last-Event-ID: " + std::to_string(first_seq) + "\r\n\r\n");
    auto a = c.ReadResponse();
    c.Send("GET " + path + " HTTP/1.1\r\nHost: t\r\n" + Authorization() +
           "Last-Event-ID: 1x\r\n\r\n");
    return std::make_pair(a, c.ReadResponse());
  });
  ASSERT_TRUE(resumed);
  EXPECT_EQ(resumed->status, 200) << resumed->body;
  EXPECT_EQ(Str(json::parse(resumed->body).at("stdout")), rest);
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
}

TEST_F(ServerTest, ShutdownClosesIdleConnectionsAndEndsStreams) {
  Serve();
  const SandboxEntry* sb = NewSandbox();
  RawClient idle(endpoint_);
  RawClient stream(endpoint_);
  const bool ready = OnThread(io_, [&] {
    idle.Send("GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n");
    const bool answered = idle.ReadResponse().has_value();
    stream.Send("GET /v1/sandboxes/" + sb->id + "/events?follow=1 HTTP/1.1\r\nHost: t\r\n" +
                Authorization() + "\r\n");
    return answered && stream.ReadUntil("sandbox.created");
  });
  ASSERT_TRUE(ready);
  server_->StopAccepting();
  server_->EndStreams();
  const auto [idle_closed, stream_ended, refused] = OnThread(io_, [&] {
    const bool closed = idle.ReadEof();
    // The stream's last event says why, then the chunked body ends.
    const bool ended = stream.ReadUntil("0\r\n\r\n");
    RawClient late(endpoint_);
    return std::make_tuple(closed, ended, !late.connected());
  });
  EXPECT_TRUE(idle_closed) << "an idle keep-alive connection stayed open";
  EXPECT_TRUE(stream_ended) << stream.received();
  EXPECT_NE(stream.received().find("shutting_down"), std::string::npos) << stream.received();
  EXPECT_TRUE(refused) << "a connection was accepted after StopAccepting";
  EXPECT_TRUE(RunUntil(io_, [&] { return run_ended_ && server_->open_sessions() == 0; }, 5s));
}

// The server's timers on the test's clock. The client is polled from the test's thread, which
// runs the server between polls.
class ServerClockTest : public ::testing::Test, public unit::ServerHarness {
 protected:
  // `script` running in a new sandbox, once its output so far is `output`.
  std::shared_ptr<Process> Running(const std::string& script, const std::string& output) {
    sb_ = NewSandbox();
    auto started = RunTask(io_, service_->StartProcess(sb_->id, unit::Sh(script)));
    if (!started) throw std::runtime_error("start: " + started.error().message);
    auto p = started->process;
    if (!RunUntil(io_, [&] { return unit::Output(p->log()) == output; })) {
      throw std::runtime_error("no output: " + unit::Output(p->log()));
    }
    return p;
  }

  std::string Get(const Process& p, const std::string& what) const {
    return "GET /v1/sandboxes/" + sb_->id + "/processes/" + p.id() + "/" + what +
           " HTTP/1.1\r\nHost: t\r\n" + Authorization() + "\r\n";
  }

  // Until `c` has received `needle`.
  bool Receives(RawClient& c, std::string_view needle) {
    return RunUntil(io_, [&] {
      c.Poll();
      return c.received().find(needle) != std::string::npos;
    }, 10s);
  }

  sandstream::testing::ManualTime clock_;
  const SandboxEntry* sb_ = nullptr;
};

constexpr std::string_view kHiEvent = "event: stdout\ndata: {\"chunk\":\"hi\\n\"}\n\n";

TEST_F(ServerClockTest, AFollowerGetsAKeepaliveAfterFifteenSecondsOfSilence) {
  Serve();
  ASSERT_EQ(server_->options().keepalive, 15s);
  auto p = Running("echo hi; sleep 3600", "hi\n");
  RawClient c(endpoint_);
  ASSERT_TRUE(c.Send(Get(*p, "logs?follow=1")));
  ASSERT_TRUE(Receives(c, kHiEvent)) << c.received();
  RunFor(io_, 100ms);  // the stream goes back to waiting, its keepalive armed
  clock_.Advance(14s);
  RunFor(io_, 200ms);
  c.Poll();
  EXPECT_EQ(c.received().find(": keepalive"), std::string::npos)
      << "a keepalive before 15 s of silence";
  clock_.Advance(2s);
  EXPECT_TRUE(Receives(c, ": keepalive\n\n")) << c.received();
  // The keepalive's write completes before the harness stops the stream: Pump does not look
  // at a stop that comes during the flush before its wait, so it would wait 15 s more.
  RunFor(io_, 100ms);
}

TEST_F(ServerClockTest, AWaitingReaderWhoseClientLeftKeepsItsPlaceForTheResumeGrace) {
  Serve();
  ASSERT_EQ(service_->options().resume_grace, 30s);
  auto p = Running("echo hi; sleep 3600", "hi\n");
  {
    RawClient c(endpoint_);
    ASSERT_TRUE(c.Send(Get(*p, "logs?follow=1&flow=wait")));
    ASSERT_TRUE(Receives(c, kHiEvent)) << c.received();
    EXPECT_EQ(p->log().hold_count(), 1u) << "the waiting reader holds no place";
  }
  // The client is gone: its session ends, and the reader's place is parked.
  ASSERT_TRUE(RunUntil(io_, [&] { return server_->open_sessions() == 0; }, 10s));
  EXPECT_EQ(p->log().hold_count(), 1u) << "the place went with the client";
  clock_.Advance(29s);
  RunFor(io_, 200ms);
  EXPECT_EQ(p->log().hold_count(), 1u) << "the place was given up before the resume grace";
  clock_.Advance(2s);
  EXPECT_TRUE(RunUntil(io_, [&] { return p->log().hold_count() == 0; }, 5s))
      << "the place was kept past the resume grace";
}

TEST_F(ServerClockTest, AWaitAnswers408OnlyOnceTheClockPassesItsTimeout) {
  Serve();
  auto p = Running("echo hi; sleep 3600", "hi\n");
  RawClient c(endpoint_);
  ASSERT_TRUE(c.Send(Get(*p, "wait?timeout_seconds=600")));
  // Steps of 10 s: however late the request is read, the answer cannot come before 600 s.
  auto advanced = 0s;
  while (c.received().empty() && advanced < 1200s) {
    clock_.Advance(10s);
    advanced += 10s;
    RunFor(io_, 20ms);
    c.Poll();
  }
  ASSERT_TRUE(Receives(c, "\r\n\r\n")) << "no answer " << advanced.count() << " s on";
  EXPECT_GE(advanced, 600s) << "answered before the wait's timeout";
  EXPECT_TRUE(c.received().starts_with("HTTP/1.1 408 ")) << c.received();
  EXPECT_EQ(p->status(), ProcessStatus::kRunning);
}

// Shared: the harness runs the server on after a failed test, and this with it.
asio::awaitable<void> EndedWithin(Server& server, SteadyClock::duration within,
                                  std::shared_ptr<std::optional<bool>> ended) {
  *ended = co_await server.SessionsEnded(within);
}

TEST_F(ServerClockTest, ShutdownWaitsForAStuckSessionOnlyForItsGrace) {
  Serve();
  RawClient c(endpoint_);
  // A body the client never finishes: its session reads it when shutdown begins.
  ASSERT_TRUE(c.Send(Post("/v1/sandboxes", Authorization() + "Content-Type: application/json\r\n"
                                                             "Content-Length: 100\r\n"
                                                             "Expect: 100-continue\r\n")));
  ASSERT_TRUE(Receives(c, "100 Continue\r\n\r\n")) << c.received();
  ASSERT_TRUE(c.Send("{\"template\":"));
  RunFor(io_, 100ms);
  server_->StopAccepting();
  server_->EndStreams();
  auto ended = std::make_shared<std::optional<bool>>();
  asio::co_spawn(io_, EndedWithin(*server_, 30s, ended), [](std::exception_ptr) {});
  RunFor(io_, 100ms);
  clock_.Advance(29s);
  RunFor(io_, 200ms);
  EXPECT_FALSE(*ended) << "shutdown gave up on the session before its grace";
  EXPECT_EQ(server_->open_sessions(), 1u);
  clock_.Advance(2s);
  ASSERT_TRUE(RunUntil(io_, [&] { return ended->has_value(); }, 5s))
      << "shutdown waited past its grace";
  EXPECT_FALSE(**ended) << "the stuck session ended by itself";
  server_->CloseConnections();
  EXPECT_TRUE(RunUntil(io_, [&] { return server_->open_sessions() == 0; }, 5s));
}

}  // namespace
}  // namespace sandstream::api
