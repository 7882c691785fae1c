#include "service/resolver.h"

#include <sys/random.h>

#include <algorithm>
#include <array>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include "base/async.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/timer.h"
#include "net/dns.h"

namespace sandstream {
namespace asio = boost::asio;
using asio::ip::tcp;
using asio::ip::udp;
using namespace asio::experimental::awaitable_operators;
namespace dns = net::dns;

namespace {

constexpr std::chrono::milliseconds kUpstreamTimeout{1500};  // per upstream and attempt
constexpr std::chrono::seconds kTcpIdle{10};
constexpr std::chrono::seconds kTcpIo{5};
constexpr int kMaxChase = 8;  // CNAME hops the resolver follows itself

uint16_t RandomId() {
  uint16_t id = 0;
  if (::getrandom(&id, sizeof id, 0) != sizeof id)
    id = static_cast<uint16_t>(SteadyClock::now().time_since_epoch().count());
  return id;
}

asio::ip::address_v4 V4(uint32_t addr) {
  return asio::ip::address_v4(addr);
}

asio::awaitable<Result<std::vector<uint8_t>>> Exchange(tcp::socket& socket,
                                                       std::vector<uint8_t> framed);

}  // namespace

struct SandboxResolver::State : std::enable_shared_from_this<State> {
  State(const asio::any_io_executor& ex_, Options options_, std::string id_, uint32_t slot_,
        net::EgressPolicy policy_)
      : ex(ex_),
        options(std::move(options_)),
        id(std::move(id_)),
        slot(slot_),
        policy(std::move(policy_)),
        udp_socket(ex_),
        acceptor(ex_),
        refilled(SteadyClock::now()) {}

  asio::any_io_executor ex;
  Options options;
  std::string id;
  uint32_t slot;
  net::EgressPolicy policy;
  udp::socket udp_socket;
  tcp::acceptor acceptor;
  bool stopped = false;
  int in_flight = 0;
  int tcp_connections = 0;
  double tokens = kBurst;
  SteadyTime refilled;

  void Count(const char* outcome) {
    if (options.metrics != nullptr) ++options.metrics->dns_queries_total[outcome];
  }

  // A token of the query rate, if one is left.
  bool TakeToken() {
    const SteadyTime now = SteadyClock::now();
    const double seconds = std::chrono::duration<double>(now - refilled).count();
    refilled = now;
    tokens = std::min<double>(kBurst, tokens + seconds * kQueriesPerSecond);
    if (tokens < 1) return false;
    tokens -= 1;
    return true;
  }

  asio::awaitable<Result<std::vector<uint8_t>>> AskUdp(uint32_t upstream,
                                                       const std::vector<uint8_t>& query,
                                                       uint16_t id);
  asio::awaitable<Result<std::vector<uint8_t>>> AskTcp(uint32_t upstream,
                                                       const std::vector<uint8_t>& query);
  asio::awaitable<Result<std::vector<uint8_t>>> Ask(std::vector<uint8_t> query, uint16_t id);
  asio::awaitable<std::vector<uint8_t>> Answer(std::vector<uint8_t> bytes, bool over_udp);
  asio::awaitable<void> ServeUdp();
  asio::awaitable<void> AnswerUdp(std::vector<uint8_t> query, udp::endpoint from);
  asio::awaitable<void> AcceptTcp();
  asio::awaitable<void> ServeTcp(tcp::socket socket);
};

// One attempt over UDP from a fresh connected socket (a random source port, and only the
// upstream's own datagrams reach it).
asio::awaitable<Result<std::vector<uint8_t>>> SandboxResolver::State::AskUdp(
    uint32_t upstream, const std::vector<uint8_t>& query, uint16_t qid) {
  udp::socket socket(ex);
  boost::system::error_code ec;
  socket.open(udp::v4(), ec);
  if (!ec) socket.connect(udp::endpoint(V4(upstream), 53), ec);
  if (ec) co_return Error{ErrorCode::kBadGateway, "dns: upstream: " + ec.message()};
  auto [send_ec, sent] = co_await socket.async_send(asio::buffer(query), Tuple());
  if (send_ec) co_return Error{ErrorCode::kBadGateway, "dns: upstream: " + send_ec.message()};
  Timer timer(ex, kUpstreamTimeout);
  std::vector<uint8_t> buffer(65535);
  // A stray datagram with another ID is skipped, a few times at most.
  for (int i = 0; i < 8; ++i) {
    auto result =
        co_await (socket.async_receive(asio::buffer(buffer), Tuple()) || timer.async_wait(Tuple()));
    if (result.index() == 1) co_return Error{ErrorCode::kTimeout, "dns: upstream timed out"};
    auto [recv_ec, n] = std::get<0>(result);
    if (recv_ec) co_return Error{ErrorCode::kBadGateway, "dns: upstream: " + recv_ec.message()};
    if (n >= 2 && (buffer[0] << 8 | buffer[1]) == qid) {
      buffer.resize(n);
      co_return buffer;
    }
  }
  co_return Error{ErrorCode::kBadGateway, "dns: upstream: no answer to our query"};
}

asio::awaitable<Result<std::vector<uint8_t>>> SandboxResolver::State::AskTcp(
    uint32_t upstream, const std::vector<uint8_t>& query) {
  tcp::socket socket(ex);
  Timer timer(ex, kTcpIo);
  auto connected = co_await (socket.async_connect(tcp::endpoint(V4(upstream), 53), Tuple()) ||
                             timer.async_wait(Tuple()));
  if (connected.index() == 1 || std::get<0>(std::get<0>(connected))) {
    co_return Error{ErrorCode::kBadGateway, "dns: upstream: TCP connect failed"};
  }
  std::vector<uint8_t> framed{static_cast<uint8_t>(query.size() >> 8),
                              static_cast<uint8_t>(query.size() & 0xff)};
  framed.insert(framed.end(), query.begin(), query.end());
  auto exchange = Exchange(socket, std::move(framed));
  auto exchanged = co_await (std::move(exchange) || timer.async_wait(Tuple()));
  if (exchanged.index() == 1) co_return Error{ErrorCode::kTimeout, "dns: upstream timed out"};
  co_return std::move(std::get<0>(exchanged));
}

namespace {

// One query written and its answer read, on a TCP connection (2-byte length framing).
asio::awaitable<Result<std::vector<uint8_t>>> Exchange(tcp::socket& socket,
                                                       std::vector<uint8_t> framed) {
  auto [w_ec, w] = co_await asio::async_write(socket, asio::buffer(framed), Tuple());
  if (w_ec) co_return Error{ErrorCode::kBadGateway, "dns: upstream: " + w_ec.message()};
  std::array<uint8_t, 2> length{};
  auto [l_ec, l] = co_await asio::async_read(socket, asio::buffer(length), Tuple());
  if (l_ec) co_return Error{ErrorCode::kBadGateway, "dns: upstream: " + l_ec.message()};
  std::vector<uint8_t> message(static_cast<size_t>(length[0] << 8 | length[1]));
  auto [m_ec, m] = co_await asio::async_read(socket, asio::buffer(message), Tuple());
  if (m_ec) co_return Error{ErrorCode::kBadGateway, "dns: upstream: " + m_ec.message()};
  co_return message;
}

}  // namespace

// The upstreams in order until one answers; over TCP when the UDP answer was truncated.
asio::awaitable<Result<std::vector<uint8_t>>> SandboxResolver::State::Ask(
    std::vector<uint8_t> query, uint16_t qid) {
  Error last{ErrorCode::kBadGateway, "dns: no upstream resolver is configured (egress_dns)"};
  for (uint32_t upstream : options.upstreams) {
    auto answer = co_await AskUdp(upstream, query, qid);
    if (!answer) {
      last = std::move(answer).error();
      continue;
    }
    if (answer->size() > 2 && ((*answer)[2] & 0x02) != 0) {  // TC
      auto full = co_await AskTcp(upstream, query);
      if (!full) {
        last = std::move(full).error();
        continue;
      }
      co_return full;
    }
    co_return answer;
  }
  co_return last;
}

asio::awaitable<std::vector<uint8_t>> SandboxResolver::State::Answer(std::vector<uint8_t> bytes,
                                                                     bool over_udp) {
  const dns::ParsedQuery parsed = dns::ParseQuery(bytes);
  if (!parsed.query) {
    Count("malformed");
    co_return dns::HeaderOnlyReply(bytes, parsed.rcode);
  }
  const dns::Query& q = *parsed.query;
  auto reply = [&](dns::Rcode rcode) {
    Count(rcode == dns::Rcode::kNxDomain  ? "refused"
          : rcode == dns::Rcode::kNoError ? "empty"
          : rcode == dns::Rcode::kNotImp  ? "malformed"
                                          : "failed");
    return dns::Reply(bytes, q, rcode);
  };
  if (!policy.AllowsName(q.name)) co_return reply(dns::Rcode::kNxDomain);
  if (q.type == dns::kTypeAaaa || q.type == dns::kTypeHttps || q.type == dns::kTypeSvcb) {
    co_return reply(dns::Rcode::kNoError);
  }
  if (q.type == dns::kTypeAny) co_return reply(dns::Rcode::kNotImp);

  const uint16_t qid = RandomId();
  std::vector<uint8_t> forwarded = bytes;
  dns::SetId(forwarded, qid);
  auto upstream = co_await Ask(std::move(forwarded), qid);
  if (!upstream) co_return reply(dns::Rcode::kServFail);
  std::vector<uint8_t> response = std::move(*upstream);
  const uint32_t max_ttl = static_cast<uint32_t>(net::Egress::kMaxTtl.count());
  auto answer = dns::ReadAnswer(response, qid, q.name, q.type, max_ttl);
  if (!answer) co_return reply(dns::Rcode::kServFail);
  std::vector<dns::ARecord> pins = answer->a;
  // The upstream stopped at a CNAME: its target is asked here, since the client would ask for
  // a name it is not allowed to.
  std::string target = answer->unresolved_cname;
  for (int hop = 0; q.type == dns::kTypeA && !target.empty() && hop < kMaxChase; ++hop) {
    const uint16_t cid = RandomId();
    auto chase = dns::MakeQuery(cid, target, dns::kTypeA);
    if (!chase) co_return reply(dns::Rcode::kServFail);
    auto chased = co_await Ask(std::move(*chase), cid);
    if (!chased) co_return reply(dns::Rcode::kServFail);
    auto more = dns::ReadAnswer(*chased, cid, target, dns::kTypeA, max_ttl);
    if (!more || !dns::AppendChased(response, *chased, target, max_ttl)) {
      co_return reply(dns::Rcode::kServFail);
    }
    pins.insert(pins.end(), more->a.begin(), more->a.end());
    target = more->unresolved_cname;
  }
  if (stopped) co_return std::vector<uint8_t>{};
  // The rules may have changed while the upstream answered.
  if (!policy.AllowsName(q.name)) co_return reply(dns::Rcode::kNxDomain);
  if (policy.PinsAnswers() && !pins.empty()) {
    auto egress = options.egress;
    const uint32_t sandbox_slot = slot;
    auto pin = [egress, sandbox_slot, pins] {
      for (const auto& record : pins) {
        auto r = egress->Pin(sandbox_slot, record.address, std::chrono::seconds(record.ttl));
        if (!r) return r;
      }
      return Result<void>(Ok{});
    };
    Result<void> pinned = co_await OffThread(*options.pool, std::move(pin));
    if (!pinned) {
      log::Warn("dns: pin failed", {{"sandbox", id}, {"error", pinned.error().message}});
      co_return reply(dns::Rcode::kServFail);
    }
  }
  Count("answered");
  dns::SetId(response, q.id);
  if (over_udp) dns::TruncateForUdp(response, q.udp_payload);
  co_return response;
}

asio::awaitable<void> SandboxResolver::State::AnswerUdp(std::vector<uint8_t> query,
                                                        udp::endpoint from) {
  ++in_flight;
  std::vector<uint8_t> response = co_await Answer(std::move(query), true);
  --in_flight;
  if (stopped || response.empty()) co_return;
  (void)co_await udp_socket.async_send_to(asio::buffer(response), from, Tuple());
}

asio::awaitable<void> SandboxResolver::State::ServeUdp() {
  auto self = shared_from_this();
  std::vector<uint8_t> buffer(4096);
  while (!stopped) {
    udp::endpoint from;
    auto [ec, n] = co_await udp_socket.async_receive_from(asio::buffer(buffer), from, Tuple());
    if (ec == asio::error::operation_aborted || stopped) co_return;
    if (ec) continue;
    // Past the rate or the queries in flight, a datagram is dropped: the client retries.
    if (in_flight >= kInFlight || !TakeToken()) {
      Count("dropped");
      continue;
    }
    Spawn(ex, AnswerUdp(std::vector<uint8_t>(buffer.begin(), buffer.begin() + n), from),
          "dns query");
  }
}

asio::awaitable<void> SandboxResolver::State::ServeTcp(tcp::socket socket) {
  auto self = shared_from_this();
  ++tcp_connections;
  struct Leave {
    State* s;
    ~Leave() { --s->tcp_connections; }
  } leave{this};
  // Queries one after another, each answered before the next is read (pipelined ones wait).
  while (!stopped) {
    std::array<uint8_t, 2> length{};
    Timer idle(ex, kTcpIdle);
    auto got = co_await (asio::async_read(socket, asio::buffer(length), Tuple()) ||
                         idle.async_wait(Tuple()));
    if (got.index() == 1 || std::get<0>(std::get<0>(got))) co_return;
    std::vector<uint8_t> query(static_cast<size_t>(length[0] << 8 | length[1]));
    Timer io(ex, kTcpIo);
    auto body =
        co_await (asio::async_read(socket, asio::buffer(query), Tuple()) || io.async_wait(Tuple()));
    if (body.index() == 1 || std::get<0>(std::get<0>(body))) co_return;
    if (!TakeToken()) {
      Count("dropped");
      co_return;
    }
    std::vector<uint8_t> response = co_await Answer(std::move(query), false);
    if (stopped || response.empty()) co_return;
    std::vector<uint8_t> framed{static_cast<uint8_t>(response.size() >> 8),
                                static_cast<uint8_t>(response.size() & 0xff)};
    framed.insert(framed.end(), response.begin(), response.end());
    io.expires_after(kTcpIo);
    auto sent = co_await (asio::async_write(socket, asio::buffer(framed), Tuple()) ||
                          io.async_wait(Tuple()));
    if (sent.index() == 1 || std::get<0>(std::get<0>(sent))) co_return;
  }
}

asio::awaitable<void> SandboxResolver::State::AcceptTcp() {
  auto self = shared_from_this();
  while (!stopped) {
    auto [ec, socket] = co_await acceptor.async_accept(Tuple());
    if (ec == asio::error::operation_aborted || stopped) co_return;
    if (ec) continue;
    if (tcp_connections >= kTcpConnections) continue;  // closed as it goes out of scope
    Spawn(ex, ServeTcp(std::move(socket)), "dns connection");
  }
}

Result<std::shared_ptr<SandboxResolver>> SandboxResolver::Start(const asio::any_io_executor& ex,
                                                                Options options,
                                                                std::string sandbox_id,
                                                                uint32_t slot, uint32_t gateway,
                                                                net::EgressPolicy policy) {
  auto state = std::make_shared<State>(ex, std::move(options), std::move(sandbox_id), slot,
                                       std::move(policy));
  boost::system::error_code ec;
  const auto address = V4(gateway);
  state->udp_socket.open(udp::v4(), ec);
  if (!ec) state->udp_socket.bind(udp::endpoint(address, 53), ec);
  if (ec) {
    return Error{ErrorCode::kSandboxSetupFailed,
                 "net: resolver: bind udp " + address.to_string() + ":53: " + ec.message()};
  }
  state->acceptor.open(tcp::v4(), ec);
  if (!ec) state->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) state->acceptor.bind(tcp::endpoint(address, 53), ec);
  if (!ec) state->acceptor.listen(16, ec);
  if (ec) {
    return Error{ErrorCode::kSandboxSetupFailed,
                 "net: resolver: bind tcp " + address.to_string() + ":53: " + ec.message()};
  }
  Spawn(ex, state->ServeUdp(), "dns udp");
  Spawn(ex, state->AcceptTcp(), "dns tcp");
  return std::shared_ptr<SandboxResolver>(new SandboxResolver(std::move(state)));
}

void SandboxResolver::SetPolicy(net::EgressPolicy policy) {
  state_->policy = std::move(policy);
}

void SandboxResolver::Stop() {
  if (state_->stopped) return;
  state_->stopped = true;
  boost::system::error_code ec;
  state_->udp_socket.close(ec);
  state_->acceptor.close(ec);
}

SandboxResolver::~SandboxResolver() {
  Stop();
}

}  // namespace sandstream
