// Unit tests of the HTTP front over a loopback socket: keep-alive, refusals answered from the
// header before any body is read (the key, the announced size), a chunked body past its limit,
// an oversized or malformed header, the connection limit, resuming a log by Last-Event-ID, and
// shutdown (idle connections closed, streams ended with an error event, no more accepts).
#include "api/server.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <string>

#include "server_harness.h"

namespace sandstream::api {
namespace {

namespace json = boost::json;
using unit::OnThread;
using unit::RawClient;
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

}  // namespace
}  // namespace sandstream::api
