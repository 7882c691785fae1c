#include "net/dns.h"

#include <arpa/nameser.h>
#include <gtest/gtest.h>
#include <resolv.h>

#include <optional>
#include <string>
#include <vector>

#include "net/ipv4.h"

namespace sandstream::net::dns {
namespace {

// Messages written byte by byte, the way a test reads them.
class Wire {
 public:
  Wire& U8(uint8_t v) {
    b_.push_back(v);
    return *this;
  }
  Wire& U16(uint16_t v) { return U8(static_cast<uint8_t>(v >> 8)).U8(static_cast<uint8_t>(v)); }
  Wire& U32(uint32_t v) {
    return U16(static_cast<uint16_t>(v >> 16)).U16(static_cast<uint16_t>(v));
  }
  Wire& Header(uint16_t id, uint16_t flags, uint16_t qd, uint16_t an, uint16_t ns, uint16_t ar) {
    return U16(id).U16(flags).U16(qd).U16(an).U16(ns).U16(ar);
  }
  Wire& Label(std::string_view label) {
    U8(static_cast<uint8_t>(label.size()));
    b_.insert(b_.end(), label.begin(), label.end());
    return *this;
  }
  // Uncompressed, with the root's zero byte.
  Wire& Name(std::string_view dotted) {
    while (!dotted.empty()) {
      const size_t dot = dotted.find('.');
      Label(dotted.substr(0, dot));
      dotted = dot == std::string_view::npos ? "" : dotted.substr(dot + 1);
    }
    return U8(0);
  }
  Wire& Ptr(uint16_t offset) { return U16(static_cast<uint16_t>(0xC000 | offset)); }
  Wire& Question(std::string_view name, uint16_t type = kTypeA) {
    return Name(name).U16(type).U16(kClassIn);
  }
  // TYPE, CLASS IN, TTL and RDLENGTH, after an owner name the caller wrote.
  Wire& Fixed(uint16_t type, uint32_t ttl, uint16_t rdlength, uint16_t cls = kClassIn) {
    return U16(type).U16(cls).U32(ttl).U16(rdlength);
  }
  Wire& A(uint32_t ttl, uint32_t addr) { return Fixed(kTypeA, ttl, 4).U32(addr); }
  Wire& Opt(uint16_t payload) { return U8(0).U16(kTypeOpt).U16(payload).U32(0).U16(0); }
  size_t size() const { return b_.size(); }
  std::vector<uint8_t> bytes() const { return b_; }

 private:
  std::vector<uint8_t> b_;
};

uint32_t Addr(const char* text) {
  return *ParseAddress(text);
}

// The records glibc's libresolv sees in a section, the oracle: nullopt if it refuses the message.
struct Seen {
  std::string name;
  int type = 0;
  uint32_t ttl = 0;
  std::string data;  // A: the address; CNAME: the target
  bool operator==(const Seen&) const = default;
};
std::optional<std::vector<Seen>> Resolv(std::span<const uint8_t> m, ns_sect section) {
  ns_msg msg;
  if (ns_initparse(m.data(), static_cast<int>(m.size()), &msg) != 0) return std::nullopt;
  std::vector<Seen> out;
  for (int i = 0; i < ns_msg_count(msg, section); ++i) {
    ns_rr rr;
    if (ns_parserr(&msg, section, i, &rr) != 0) return std::nullopt;
    Seen s{ns_rr_name(rr), static_cast<int>(ns_rr_type(rr)), section == ns_s_qd ? 0 : ns_rr_ttl(rr),
           ""};
    if (section != ns_s_qd && s.type == ns_t_a && ns_rr_rdlen(rr) == 4) {
      const uint8_t* p = ns_rr_rdata(rr);
      s.data =
          FormatAddress(uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3]);
    } else if (section != ns_s_qd && s.type == ns_t_cname) {
      char target[NS_MAXDNAME];
      if (ns_name_uncompress(ns_msg_base(msg), ns_msg_end(msg), ns_rr_rdata(rr), target,
                             sizeof target) < 0) {
        return std::nullopt;
      }
      s.data = target;
    }
    out.push_back(s);
  }
  return out;
}
int ResolvFlag(std::span<const uint8_t> m, ns_flag flag) {
  ns_msg msg;
  if (ns_initparse(m.data(), static_cast<int>(m.size()), &msg) != 0) return -1;
  return ns_msg_getflag(msg, flag);
}

Query Parsed(std::span<const uint8_t> m) {
  ParsedQuery p = ParseQuery(m);
  EXPECT_TRUE(p.query) << p.reason;
  return p.query.value_or(Query{});
}

// www.github.com A, answered as github.com's servers do: a CNAME to github.com and its A, every
// name compressed, with the client's OPT echoed.
constexpr size_t kGithubCnameTtlAt = 38;
constexpr size_t kGithubATtlAt = 52;
std::vector<uint8_t> GithubAnswer(uint32_t cname_ttl = 3600, uint32_t a_ttl = 60) {
  Wire w;
  w.Header(0xbeef, 0x8180, 1, 2, 0, 1).Question("www.github.com");  // github.com at 16
  w.Ptr(12).Fixed(kTypeCname, cname_ttl, 2).Ptr(16);
  w.Ptr(16).A(a_ttl, Addr("140.82.121.4"));
  w.Opt(1232);
  return w.bytes();
}

TEST(DnsQueryTest, ReadsAQuery) {
  Wire w;
  w.Header(0x1234, 0x0100, 1, 0, 0, 0).Question("WWW.Example.COM", kTypeAaaa);
  const Query q = Parsed(w.bytes());
  EXPECT_EQ(q.id, 0x1234);
  EXPECT_EQ(q.name, "www.example.com");
  EXPECT_EQ(q.type, kTypeAaaa);
  EXPECT_EQ(q.qclass, kClassIn);
  EXPECT_TRUE(q.recursion_desired);
  EXPECT_FALSE(q.edns);
  EXPECT_EQ(q.udp_payload, 512);
  EXPECT_EQ(q.question_end, w.size());

  Wire root;
  root.Header(1, 0, 1, 0, 0, 0).Question("", 2);
  EXPECT_EQ(Parsed(root.bytes()).name, "");
  EXPECT_FALSE(Parsed(root.bytes()).recursion_desired);
}

TEST(DnsQueryTest, ReadsTheOptRecord) {
  Wire w;
  w.Header(7, 0x0100, 1, 0, 0, 1).Question("pypi.org");
  const size_t question_end = w.size();
  w.Opt(4096);
  Query q = Parsed(w.bytes());
  EXPECT_TRUE(q.edns);
  EXPECT_EQ(q.udp_payload, 4096);
  EXPECT_EQ(q.question_end, question_end);

  Wire small;  // under 512 counts as 512 (RFC 6891 §6.2.5)
  small.Header(7, 0, 1, 0, 0, 1).Question("pypi.org").Opt(100);
  EXPECT_EQ(Parsed(small.bytes()).udp_payload, 512);

  Wire cookie;  // an option in the OPT's RDATA
  cookie.Header(7, 0, 1, 0, 0, 1).Question("pypi.org");
  cookie.U8(0).U16(kTypeOpt).U16(1232).U32(0).U16(12).U16(10).U16(8).U32(0x01020304).U32(5);
  EXPECT_EQ(Parsed(cookie.bytes()).udp_payload, 1232);
}

TEST(DnsQueryTest, RefusesWhatIsNotTheSubset) {
  struct Case {
    const char* what;
    std::vector<uint8_t> msg;
    Rcode rcode;
  };
  const std::string l63(63, 'a');
  const std::string l64(64, 'a');
  // 4 labels of 63 and one of 1: 4*64 + 2 + 1 = 259 bytes; one of 61 instead: 255 exactly.
  const std::string name256 = l63 + "." + l63 + "." + l63 + "." + std::string(62, 'b');
  const std::string name255 = l63 + "." + l63 + "." + l63 + "." + std::string(61, 'b');
  Wire ok;
  ok.Header(1, 0, 1, 0, 0, 0).Question(name255);
  ASSERT_EQ(ok.size(), 12u + 255 + 4);
  EXPECT_TRUE(ParseQuery(ok.bytes()).query);
  Wire ok63;
  ok63.Header(1, 0, 1, 0, 0, 0).Question(l63 + ".com");
  EXPECT_TRUE(ParseQuery(ok63.bytes()).query);

  std::vector<Case> cases;
  const auto add = [&](const char* what, Wire w, Rcode rcode) {
    cases.push_back({what, w.bytes(), rcode});
  };
  add("compression pointer", Wire().Header(1, 0, 1, 0, 0, 0).Label("www").Ptr(12).U16(1).U16(1),
      Rcode::kFormErr);
  add("64-byte label", Wire().Header(1, 0, 1, 0, 0, 0).Question(l64 + ".com"), Rcode::kFormErr);
  add("256-byte name", Wire().Header(1, 0, 1, 0, 0, 0).Question(name256), Rcode::kFormErr);
  add("label with a dot",
      Wire().Header(1, 0, 1, 0, 0, 0).Label("evil.pypi").Label("org").U8(0).U16(1).U16(1),
      Rcode::kFormErr);
  add("label with NUL",
      Wire().Header(1, 0, 1, 0, 0, 0).Label(std::string_view("a\0b", 3)).U8(0).U16(1).U16(1),
      Rcode::kFormErr);
  add("label type 0x40", Wire().Header(1, 0, 1, 0, 0, 0).U8(0x41).U8(0).U16(1).U16(1),
      Rcode::kFormErr);
  add("opcode STATUS", Wire().Header(1, 0x1000, 1, 0, 0, 0).Question("pypi.org"), Rcode::kNotImp);
  add("opcode UPDATE", Wire().Header(1, 0x2800, 1, 0, 0, 0).Question("pypi.org"), Rcode::kNotImp);
  add("class CH", Wire().Header(1, 0, 1, 0, 0, 0).Name("version.bind").U16(16).U16(3),
      Rcode::kNotImp);
  add("QDCOUNT 2", Wire().Header(1, 0, 2, 0, 0, 0).Question("pypi.org").Question("evil.com"),
      Rcode::kFormErr);
  add("QDCOUNT 0", Wire().Header(1, 0, 0, 0, 0, 0), Rcode::kFormErr);
  add("an answer record", Wire().Header(1, 0, 1, 1, 0, 0).Question("pypi.org").Ptr(12).A(1, 1),
      Rcode::kFormErr);
  add("ARCOUNT 2", Wire().Header(1, 0, 1, 0, 0, 2).Question("pypi.org").Opt(512).Opt(512),
      Rcode::kFormErr);
  add("additional not an OPT", Wire().Header(1, 0, 1, 0, 0, 1).Question("pypi.org").U8(0).A(1, 1),
      Rcode::kFormErr);
  add("OPT not owned by the root",
      Wire()
          .Header(1, 0, 1, 0, 0, 1)
          .Question("pypi.org")
          .Name("x")
          .U16(kTypeOpt)
          .U16(512)
          .U32(0)
          .U16(0),
      Rcode::kFormErr);
  add("OPT RDATA past the end",
      Wire()
          .Header(1, 0, 1, 0, 0, 1)
          .Question("pypi.org")
          .U8(0)
          .U16(kTypeOpt)
          .U16(512)
          .U32(0)
          .U16(9),
      Rcode::kFormErr);
  add("a response", Wire().Header(1, 0x8000, 1, 0, 0, 0).Question("pypi.org"), Rcode::kFormErr);
  add("bytes after the question", Wire().Header(1, 0, 1, 0, 0, 0).Question("pypi.org").U8(0),
      Rcode::kFormErr);
  add("question cut short", Wire().Header(1, 0, 1, 0, 0, 0).Name("pypi.org").U16(1),
      Rcode::kFormErr);
  add("name cut short", Wire().Header(1, 0, 1, 0, 0, 0).Label("pypi"), Rcode::kFormErr);
  add("short header", Wire().U16(1).U16(0).U16(1), Rcode::kFormErr);
  for (const Case& c : cases) {
    const ParsedQuery p = ParseQuery(c.msg);
    EXPECT_FALSE(p.query) << c.what;
    EXPECT_EQ(p.rcode, c.rcode) << c.what;
    EXPECT_FALSE(p.reason.empty()) << c.what;
  }
}

TEST(DnsReplyTest, NxdomainAndNodataEchoTheQuestionExactly) {
  Wire w;
  w.Header(0x1234, 0x0110, 1, 0, 0, 0).Question("PyPI.org");  // RD and CD set
  const std::vector<uint8_t> query = w.bytes();
  const Query q = Parsed(query);
  const std::vector<uint8_t> question(query.begin() + 12, query.end());

  std::vector<uint8_t> nx = {0x12, 0x34, 0x81, 0x93, 0, 1, 0, 0, 0, 0, 0, 0};
  nx.insert(nx.end(), question.begin(), question.end());
  EXPECT_EQ(Reply(query, q, Rcode::kNxDomain), nx);

  Wire edns;  // the OPT is not echoed: ARCOUNT 0
  edns.Header(0xabcd, 0x0100, 1, 0, 0, 1).Question("api.github.com", kTypeAaaa).Opt(1232);
  const Query eq = Parsed(edns.bytes());
  std::vector<uint8_t> nodata =
      Wire().Header(0xabcd, 0x8180, 1, 0, 0, 0).Question("api.github.com", kTypeAaaa).bytes();
  EXPECT_EQ(Reply(edns.bytes(), eq, Rcode::kNoError), nodata);

  for (const auto& reply : {Reply(query, q, Rcode::kNxDomain), nodata}) {
    const auto answers = Resolv(reply, ns_s_an);
    ASSERT_TRUE(answers);
    EXPECT_TRUE(answers->empty());
    EXPECT_EQ(ResolvFlag(reply, ns_f_qr), 1);
  }
  EXPECT_EQ(ResolvFlag(Reply(query, q, Rcode::kNxDomain), ns_f_rcode), ns_r_nxdomain);
  const auto echoed = Resolv(Reply(query, q, Rcode::kNxDomain), ns_s_qd);
  ASSERT_TRUE(echoed);
  EXPECT_EQ(*echoed, (std::vector<Seen>{{"PyPI.org", ns_t_a, 0, ""}}));
}

TEST(DnsReplyTest, HeaderOnlyForWhatCannotBeEchoed) {
  Wire pointer;
  pointer.Header(0x1234, 0x0100, 1, 0, 0, 0).Label("www").Ptr(12).U16(1).U16(1);
  ParsedQuery p = ParseQuery(pointer.bytes());
  ASSERT_FALSE(p.query);
  EXPECT_EQ(HeaderOnlyReply(pointer.bytes(), p.rcode),
            (std::vector<uint8_t>{0x12, 0x34, 0x81, 0x81, 0, 0, 0, 0, 0, 0, 0, 0}));

  Wire status;  // the opcode is kept
  status.Header(0x0001, 0x1000, 1, 0, 0, 0).Question("pypi.org");
  p = ParseQuery(status.bytes());
  EXPECT_EQ(HeaderOnlyReply(status.bytes(), p.rcode),
            (std::vector<uint8_t>{0x00, 0x01, 0x90, 0x84, 0, 0, 0, 0, 0, 0, 0, 0}));

  EXPECT_TRUE(HeaderOnlyReply(std::vector<uint8_t>{0x12, 0x34, 0x01}, Rcode::kFormErr).empty());
  EXPECT_TRUE(HeaderOnlyReply(GithubAnswer(), Rcode::kFormErr).empty());  // QR=1: never answer
}

TEST(DnsQueryTest, MakesQueriesThatReadBack) {
  auto q = MakeQuery(0x4242, "pypi.org", kTypeA);
  ASSERT_TRUE(q);
  EXPECT_EQ(*q, Wire().Header(0x4242, 0x0100, 1, 0, 0, 0).Question("pypi.org").bytes());

  auto edns = MakeQuery(7, "github.com", kTypeA, 1232);
  ASSERT_TRUE(edns);
  EXPECT_EQ(*edns, Wire().Header(7, 0x0100, 1, 0, 0, 1).Question("github.com").Opt(1232).bytes());
  const Query read = Parsed(*edns);
  EXPECT_EQ(read.name, "github.com");
  EXPECT_TRUE(read.edns);
  EXPECT_EQ(read.udp_payload, 1232);

  auto root = MakeQuery(1, "", 2);
  ASSERT_TRUE(root);
  EXPECT_EQ(Parsed(*root).name, "");

  for (const auto* m : {&*q, &*edns}) {
    const auto question = Resolv(*m, ns_s_qd);
    ASSERT_TRUE(question);
    ASSERT_EQ(question->size(), 1u);
    EXPECT_EQ((*question)[0].type, ns_t_a);
    EXPECT_EQ(ResolvFlag(*m, ns_f_rd), 1);
  }
  EXPECT_EQ((*Resolv(*q, ns_s_qd))[0].name, "pypi.org");

  for (const char* bad : {".", "a..b", "pypi.org.", ".pypi.org"}) {
    EXPECT_FALSE(MakeQuery(1, bad, kTypeA)) << bad;
  }
  EXPECT_FALSE(MakeQuery(1, std::string(64, 'a'), kTypeA));
  EXPECT_FALSE(MakeQuery(1, std::string_view("a\0b", 3), kTypeA));
  std::string long_name;
  for (int i = 0; i < 64; ++i) long_name += "abc.";
  long_name += "d";
  EXPECT_FALSE(MakeQuery(1, long_name, kTypeA));
}

TEST(DnsQueryTest, SetsIds) {
  std::vector<uint8_t> m = *MakeQuery(1, "pypi.org", kTypeA);
  SetId(m, 0xfeed);
  EXPECT_EQ(Parsed(m).id, 0xfeed);
  std::vector<uint8_t> one{9};
  SetId(one, 0xfeed);
  EXPECT_EQ(one, std::vector<uint8_t>{9});
}

TEST(DnsAnswerTest, FollowsACompressedCnameChainAndClampsTtlsInPlace) {
  std::vector<uint8_t> m = GithubAnswer(3600, 60);
  auto answer = ReadAnswer(m, 0xbeef, "www.github.com", kTypeA, 300);
  ASSERT_TRUE(answer) << answer.error().message;
  EXPECT_EQ(answer->rcode, Rcode::kNoError);
  EXPECT_FALSE(answer->truncated);
  EXPECT_EQ(answer->chain, (std::vector<std::string>{"www.github.com", "github.com"}));
  EXPECT_EQ(answer->a, (std::vector<ARecord>{{Addr("140.82.121.4"), 60}}));
  EXPECT_EQ(answer->unresolved_cname, "");

  std::vector<uint8_t> expected = GithubAnswer(300, 60);
  EXPECT_EQ(m, expected);  // only the CNAME's TTL changed
  EXPECT_EQ(m[kGithubCnameTtlAt + 3], 300 & 0xff);
  EXPECT_EQ(m[kGithubATtlAt + 3], 60);
  const auto seen = Resolv(m, ns_s_an);
  ASSERT_TRUE(seen);
  EXPECT_EQ(*seen, (std::vector<Seen>{{"www.github.com", ns_t_cname, 300, "github.com"},
                                      {"github.com", ns_t_a, 60, "140.82.121.4"}}));

  std::vector<uint8_t> huge = GithubAnswer(0x80000000, 0xffffffff);  // top bit set: 0
  auto zero = ReadAnswer(huge, 0xbeef, "www.github.com", kTypeA, 300);
  ASSERT_TRUE(zero);
  EXPECT_EQ(zero->a[0].ttl, 0u);
  EXPECT_EQ(huge, GithubAnswer(0, 0));
}

TEST(DnsAnswerTest, ComparesTheQuestionCaseInsensitively) {
  Wire w;  // a client's 0x20 mixed case, echoed by the upstream
  w.Header(5, 0x8180, 1, 1, 0, 0).Question("wWw.GitHub.COM").Ptr(12).A(60, Addr("140.82.121.4"));
  std::vector<uint8_t> m = w.bytes();
  auto answer = ReadAnswer(m, 5, "WWW.github.com", kTypeA, 300);
  ASSERT_TRUE(answer) << answer.error().message;
  EXPECT_EQ(answer->chain, std::vector<std::string>{"www.github.com"});
  EXPECT_EQ(answer->a.size(), 1u);
}

TEST(DnsAnswerTest, PinsOnlyTheChain) {
  Wire w;
  w.Header(9, 0x8180, 1, 3, 1, 1).Question("pypi.org");
  w.Ptr(12).A(60, Addr("151.101.0.223"));
  w.Name("evil.example").A(60, Addr("6.6.6.6"));           // off the chain
  w.Ptr(12).Fixed(kTypeA, 60, 4, 3).U32(Addr("7.7.7.7"));  // class CH
  w.Ptr(12).A(60, Addr("8.8.8.8"));                        // authority
  w.Ptr(12).A(60, Addr("9.9.9.9"));                        // additional
  std::vector<uint8_t> m = w.bytes();
  auto answer = ReadAnswer(m, 9, "pypi.org", kTypeA, 300);
  ASSERT_TRUE(answer) << answer.error().message;
  EXPECT_EQ(answer->a, (std::vector<ARecord>{{Addr("151.101.0.223"), 60}}));
}

TEST(DnsAnswerTest, ReportsAChainEndingInACname) {
  Wire w;  // dnsmasq's --address: a bare CNAME, as in the lab
  w.Header(3, 0x8580, 1, 1, 0, 0)
      .Question("www.github.com")
      .Ptr(12)
      .Fixed(kTypeCname, 60, 2)
      .Ptr(16);
  std::vector<uint8_t> m = w.bytes();
  auto answer = ReadAnswer(m, 3, "www.github.com", kTypeA, 300);
  ASSERT_TRUE(answer) << answer.error().message;
  EXPECT_TRUE(answer->a.empty());
  EXPECT_EQ(answer->unresolved_cname, "github.com");

  std::vector<uint8_t> nx = m;  // NXDOMAIN for the target: the upstream did chase it
  nx[3] = 0x83;
  answer = ReadAnswer(nx, 3, "www.github.com", kTypeA, 300);
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->rcode, Rcode::kNxDomain);
  EXPECT_EQ(answer->unresolved_cname, "");

  Wire cname;  // a CNAME query's answer is the CNAME itself
  cname.Header(3, 0x8180, 1, 1, 0, 0).Question("www.github.com", kTypeCname);
  cname.Ptr(12).Fixed(kTypeCname, 60, 2).Ptr(16);
  std::vector<uint8_t> c = cname.bytes();
  answer = ReadAnswer(c, 3, "www.github.com", kTypeCname, 300);
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->unresolved_cname, "");
}

TEST(DnsAnswerTest, LimitsTheChain) {
  const auto chain = [](int links, bool loop) {
    Wire w;
    w.Header(1, 0x8180, 1, static_cast<uint16_t>(links), 0, 0).Question("n0.example");
    for (int i = 0; i < links; ++i) {
      const std::string target =
          loop && i == links - 1 ? "n0.example" : "n" + std::to_string(i + 1) + ".example";
      w.Name("n" + std::to_string(i) + ".example")
          .Fixed(kTypeCname, 60, static_cast<uint16_t>(target.size() + 2))
          .Name(target);
    }
    return w.bytes();
  };
  std::vector<uint8_t> sixteen = chain(16, false);
  auto answer = ReadAnswer(sixteen, 1, "n0.example", kTypeA, 300);
  ASSERT_TRUE(answer) << answer.error().message;
  EXPECT_EQ(answer->chain.size(), 17u);
  EXPECT_EQ(answer->unresolved_cname, "n16.example");
  std::vector<uint8_t> seventeen = chain(17, false);
  EXPECT_FALSE(ReadAnswer(seventeen, 1, "n0.example", kTypeA, 300));
  std::vector<uint8_t> loop = chain(3, true);
  auto looped = ReadAnswer(loop, 1, "n0.example", kTypeA, 300);
  ASSERT_FALSE(looped);
  EXPECT_NE(looped.error().message.find("loop"), std::string::npos);

  Wire two;  // one name, two targets
  two.Header(1, 0x8180, 1, 2, 0, 0).Question("n0.example");
  two.Ptr(12).Fixed(kTypeCname, 60, 4).Label("a").Ptr(15);
  two.Ptr(12).Fixed(kTypeCname, 60, 4).Label("b").Ptr(15);
  std::vector<uint8_t> m = two.bytes();
  EXPECT_FALSE(ReadAnswer(m, 1, "n0.example", kTypeA, 300));
}

TEST(DnsAnswerTest, RefusesMalformedAnswers) {
  struct Case {
    const char* what;
    std::vector<uint8_t> msg;
  };
  std::vector<Case> cases;
  const auto answers = [](uint16_t ancount, auto&& write) {
    Wire w;
    w.Header(1, 0x8180, 1, ancount, 0, 0).Question("pypi.org");  // the question ends at 26
    write(w);
    return w.bytes();
  };
  const auto with_answer = [&](auto&& write) { return answers(1, write); };
  cases.push_back({"A with RDLENGTH 5",
                   with_answer([](Wire& w) { w.Ptr(12).Fixed(kTypeA, 60, 5).U32(1).U8(0); })});
  cases.push_back({"forward pointer", answers(2, [](Wire& w) {
                     w.Ptr(42).A(60, 1);  // 16 bytes: the next owner is at 42
                     w.Name("pypi.org").A(60, 2);
                   })});
  cases.push_back({"pointer to itself", with_answer([](Wire& w) { w.Ptr(26).A(60, 1); })});
  cases.push_back({"pointer into the header", with_answer([](Wire& w) { w.Ptr(4).A(60, 1); })});
  cases.push_back({"loop (a.a.a…)", with_answer([](Wire& w) {
                     w.Label("a").Ptr(26).A(60, 1);  // a.a.a.… until over 255 bytes
                   })});
  // A record of an unknown type at 26 whose RDATA (at 38) is `pointers` pointers, each to the
  // one before and the first to the question; then an A whose owner points at the last one.
  const auto hops = [&](int pointers) {
    return answers(2, [&](Wire& w) {
      w.Ptr(12).Fixed(99, 60, static_cast<uint16_t>(2 * pointers)).Ptr(12);
      for (int i = 1; i < pointers; ++i) w.Ptr(static_cast<uint16_t>(38 + 2 * (i - 1)));
      w.Ptr(static_cast<uint16_t>(38 + 2 * (pointers - 1))).A(60, 1);
    });
  };
  cases.push_back({"129 pointer hops", hops(128)});
  cases.push_back({"CNAME target past RDATA", with_answer([](Wire& w) {
                     w.Ptr(12).Fixed(kTypeCname, 60, 3).Name("github.com");
                   })});
  cases.push_back({"CNAME RDATA longer than its name", with_answer([](Wire& w) {
                     w.Ptr(12).Fixed(kTypeCname, 60, 5).Ptr(12).U16(0).U8(0);
                   })});
  cases.push_back(
      {"RDATA past the end", with_answer([](Wire& w) { w.Ptr(12).Fixed(kTypeA, 60, 4).U16(1); })});
  cases.push_back({"record cut short", with_answer([](Wire& w) { w.Ptr(12).U16(1).U16(1); })});
  cases.push_back({"missing record", with_answer([](Wire&) {})});
  cases.push_back(
      {"bytes after the last record", with_answer([](Wire& w) { w.Ptr(12).A(60, 1).U8(0); })});
  cases.push_back({"OPT in the answer section", with_answer([](Wire& w) { w.Opt(512); })});
  cases.push_back({"label with a dot in an owner",
                   with_answer([](Wire& w) { w.Label("evil.pypi").Label("org").U8(0).A(60, 1); })});
  cases.push_back(
      {"not a response", Wire().Header(1, 0x0100, 1, 0, 0, 0).Question("pypi.org").bytes()});
  cases.push_back({"wrong id", Wire().Header(2, 0x8180, 1, 0, 0, 0).Question("pypi.org").bytes()});
  cases.push_back(
      {"other question", Wire().Header(1, 0x8180, 1, 0, 0, 0).Question("pypi.com").bytes()});
  cases.push_back(
      {"other type", Wire().Header(1, 0x8180, 1, 0, 0, 0).Question("pypi.org", 28).bytes()});
  cases.push_back({"no question", Wire().Header(1, 0x8180, 0, 0, 0, 0).bytes()});
  cases.push_back({"short", Wire().Header(1, 0x8180, 1, 0, 0, 0).bytes()});
  cases.push_back(
      {"malformed authority",
       Wire().Header(1, 0x8180, 1, 0, 1, 0).Question("pypi.org").Ptr(12).Fixed(6, 60, 40).bytes()});
  for (Case& c : cases) {
    const std::vector<uint8_t> before = c.msg;
    auto refused = ReadAnswer(c.msg, 1, "pypi.org", kTypeA, 300);
    EXPECT_FALSE(refused) << c.what;
    if (!refused) {
      EXPECT_EQ(refused.error().code, ErrorCode::kBadGateway);
    }
    if (!refused && std::string_view(c.what).find("pointer") != std::string_view::npos) {
      EXPECT_NE(refused.error().message.find("pointer"), std::string::npos)
          << c.what << ": " << refused.error().message;
    }
    EXPECT_EQ(c.msg, before) << c.what << ": changed though refused";
  }
  std::vector<uint8_t> good = with_answer([](Wire& w) { w.Ptr(12).A(60, 1); });
  EXPECT_TRUE(ReadAnswer(good, 1, "pypi.org", kTypeA, 300));
  std::vector<uint8_t> forward = answers(2, [](Wire& w) {  // as the forward case, backwards
    w.Name("pypi.org").A(60, 2);
    w.Ptr(26).A(60, 1);
  });
  EXPECT_TRUE(ReadAnswer(forward, 1, "pypi.org", kTypeA, 300));
  std::vector<uint8_t> most_hops = hops(127);  // 128 hops
  auto answer = ReadAnswer(most_hops, 1, "pypi.org", kTypeA, 300);
  ASSERT_TRUE(answer) << answer.error().message;
  EXPECT_EQ(answer->a.size(), 1u);
}

TEST(DnsAnswerTest, TruncatedAnswersAreNotRead) {
  Wire w;  // TC, and a record cut in half: only the question counts
  w.Header(1, 0x8380, 1, 5, 0, 0).Question("pypi.org").Ptr(12).U16(1);
  std::vector<uint8_t> m = w.bytes();
  auto answer = ReadAnswer(m, 1, "pypi.org", kTypeA, 300);
  ASSERT_TRUE(answer) << answer.error().message;
  EXPECT_TRUE(answer->truncated);
  EXPECT_TRUE(answer->a.empty());
  EXPECT_EQ(m, w.bytes());
}

// www.github.com A answered with a bare CNAME (and an SOA whose names point into each other),
// then github.com A with two addresses.
std::vector<uint8_t> BareCname() {
  Wire w;
  w.Header(0x1111, 0x8580, 1, 1, 1, 1).Question("www.github.com");
  w.Ptr(12).Fixed(kTypeCname, 600, 2).Ptr(16);
  w.Ptr(16).Fixed(6, 300, 6 + 13 + 20);
  const size_t mname = w.size();
  w.Label("ns1").Ptr(16).Label("hostmaster").Ptr(static_cast<uint16_t>(mname));
  w.U32(1).U32(2).U32(3).U32(4).U32(5);
  w.Opt(1232);
  return w.bytes();
}
std::vector<uint8_t> GithubA() {
  Wire w;
  w.Header(0x2222, 0x81a0, 1, 2, 0, 0).Question("GitHub.com");  // AD set
  w.Ptr(12).A(60, Addr("140.82.121.3"));
  w.Ptr(12).A(7200, Addr("140.82.121.4"));
  return w.bytes();
}

TEST(DnsChaseTest, AppendsTheChasedRecordsUncompressed) {
  std::vector<uint8_t> first = BareCname();
  auto answer = ReadAnswer(first, 0x1111, "www.github.com", kTypeA, 300);
  ASSERT_TRUE(answer) << answer.error().message;
  ASSERT_EQ(answer->unresolved_cname, "github.com");
  auto chase = MakeQuery(0x2222, answer->unresolved_cname, kTypeA, 1232);
  ASSERT_TRUE(chase);
  std::vector<uint8_t> chased = GithubA();
  auto chased_answer = ReadAnswer(chased, 0x2222, answer->unresolved_cname, kTypeA, 300);
  ASSERT_TRUE(chased_answer) << chased_answer.error().message;

  ASSERT_TRUE(AppendChased(first, chased, answer->unresolved_cname, 300));
  auto whole = ReadAnswer(first, 0x1111, "www.github.com", kTypeA, 300);
  ASSERT_TRUE(whole) << whole.error().message;
  EXPECT_EQ(whole->chain, (std::vector<std::string>{"www.github.com", "github.com"}));
  EXPECT_EQ(whole->a,
            (std::vector<ARecord>{{Addr("140.82.121.3"), 60}, {Addr("140.82.121.4"), 300}}));
  EXPECT_EQ(whole->unresolved_cname, "");

  Wire expected;  // the answer kept, the SOA dropped, the OPT kept, AA cleared
  expected.Header(0x1111, 0x8180, 1, 3, 0, 1).Question("www.github.com");
  expected.Ptr(12).Fixed(kTypeCname, 300, 2).Ptr(16);
  expected.Name("github.com").A(60, Addr("140.82.121.3"));
  expected.Name("github.com").A(300, Addr("140.82.121.4"));
  expected.Opt(1232);
  EXPECT_EQ(first, expected.bytes());

  const auto seen = Resolv(first, ns_s_an);
  ASSERT_TRUE(seen);
  EXPECT_EQ(*seen, (std::vector<Seen>{{"www.github.com", ns_t_cname, 300, "github.com"},
                                      {"github.com", ns_t_a, 60, "140.82.121.3"},
                                      {"github.com", ns_t_a, 300, "140.82.121.4"}}));
  const auto additional = Resolv(first, ns_s_ar);
  ASSERT_TRUE(additional);
  ASSERT_EQ(additional->size(), 1u);
  EXPECT_EQ((*additional)[0].type, ns_t_opt);
  EXPECT_EQ(ResolvFlag(first, ns_f_ad), 0);
  EXPECT_EQ(ResolvFlag(first, ns_f_aa), 0);
}

TEST(DnsChaseTest, FollowsAChasedChainAndItsRcode) {
  std::vector<uint8_t> first = BareCname();
  ASSERT_TRUE(ReadAnswer(first, 0x1111, "www.github.com", kTypeA, 300));
  Wire w;  // github.com CNAME lb.github.com, its A, and an A off the chain
  w.Header(0x3333, 0x8180, 1, 3, 0, 0).Question("github.com");
  w.Ptr(12).Fixed(kTypeCname, 60, 5).Label("lb").Ptr(12);  // lb.github.com at 40
  w.Ptr(40).A(30, Addr("140.82.112.3"));
  w.Name("other.example").A(30, Addr("6.6.6.6"));
  std::vector<uint8_t> chased = w.bytes();
  ASSERT_TRUE(ReadAnswer(chased, 0x3333, "github.com", kTypeA, 300));
  ASSERT_TRUE(AppendChased(first, chased, "github.com", 300));
  auto whole = ReadAnswer(first, 0x1111, "www.github.com", kTypeA, 300);
  ASSERT_TRUE(whole) << whole.error().message;
  EXPECT_EQ(whole->chain,
            (std::vector<std::string>{"www.github.com", "github.com", "lb.github.com"}));
  EXPECT_EQ(whole->a, (std::vector<ARecord>{{Addr("140.82.112.3"), 30}}));
  EXPECT_EQ(Resolv(first, ns_s_an)->size(), 3u);  // the off-chain A was not appended

  std::vector<uint8_t> again = BareCname();
  Wire nx;
  nx.Header(0x4444, 0x8183, 1, 0, 0, 0).Question("github.com");
  ASSERT_TRUE(AppendChased(again, nx.bytes(), "github.com", 300));
  auto gone = ReadAnswer(again, 0x1111, "www.github.com", kTypeA, 300);
  ASSERT_TRUE(gone);
  EXPECT_EQ(gone->rcode, Rcode::kNxDomain);
  EXPECT_EQ(gone->unresolved_cname, "");
}

TEST(DnsChaseTest, RefusesWhatDoesNotContinueTheChain) {
  const std::vector<uint8_t> original = BareCname();
  std::vector<uint8_t> first = original;
  EXPECT_FALSE(AppendChased(first, GithubA(), "gitlab.com", 300));  // not the chain's end
  Wire other;
  other.Header(1, 0x8180, 1, 0, 0, 0).Question("gitlab.com");
  EXPECT_FALSE(AppendChased(first, other.bytes(), "github.com", 300));  // not the target's answer
  Wire servfail;
  servfail.Header(1, 0x8182, 1, 0, 0, 0).Question("github.com");
  EXPECT_FALSE(AppendChased(first, servfail.bytes(), "github.com", 300));
  Wire loop;  // github.com CNAME www.github.com: a loop through both messages
  loop.Header(1, 0x8180, 1, 1, 0, 0).Question("github.com");
  loop.Ptr(12).Fixed(kTypeCname, 60, 6).Label("www").Ptr(12);
  EXPECT_FALSE(AppendChased(first, loop.bytes(), "github.com", 300));
  EXPECT_EQ(first, original);

  Wire big;  // 65535 bytes at most
  big.Header(1, 0x8180, 1, 4000, 0, 0).Question("github.com");
  for (int i = 0; i < 4000; ++i) big.Ptr(12).A(60, static_cast<uint32_t>(i));
  ASSERT_LT(big.size(), 65535u);
  auto refused = AppendChased(first, big.bytes(), "github.com", 300);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("65535"), std::string::npos);
  EXPECT_EQ(first, original);
}

TEST(DnsTruncateTest, CutsToTheQuestionWithTc) {
  Wire w;
  w.Header(1, 0x8180, 1, 40, 0, 1).Question("pypi.org");
  const size_t question_end = w.size();
  for (int i = 0; i < 40; ++i) w.Ptr(12).A(60, static_cast<uint32_t>(i));
  w.Opt(1232);
  std::vector<uint8_t> m = w.bytes();
  ASSERT_GT(m.size(), 512u);
  EXPECT_FALSE(TruncateForUdp(m, 1232));
  EXPECT_EQ(m, w.bytes());
  EXPECT_TRUE(TruncateForUdp(m, 512));
  EXPECT_EQ(m, Wire().Header(1, 0x8380, 1, 0, 0, 0).Question("pypi.org").bytes());
  EXPECT_EQ(m.size(), question_end);
  EXPECT_EQ(ResolvFlag(m, ns_f_tc), 1);

  std::vector<uint8_t> garbage(600, 0xff);  // no question to keep: the header alone
  EXPECT_TRUE(TruncateForUdp(garbage, 512));
  EXPECT_EQ(garbage, (std::vector<uint8_t>{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0}));
}

TEST(DnsPatternTest, ParsesAndMatches) {
  const NamePattern exact = *NamePattern::Parse("PyPI.org.");
  EXPECT_EQ(exact.text(), "pypi.org");
  EXPECT_TRUE(exact.Matches("pypi.org"));
  EXPECT_TRUE(exact.Matches("PYPI.ORG"));
  EXPECT_FALSE(exact.Matches("files.pypi.org"));
  EXPECT_FALSE(exact.Matches("xpypi.org"));

  const NamePattern sub = *NamePattern::Parse("*.github.com");
  EXPECT_EQ(sub.text(), "*.github.com");
  EXPECT_TRUE(sub.Matches("api.github.com"));
  EXPECT_TRUE(sub.Matches("a.b.github.com"));
  EXPECT_FALSE(sub.Matches("github.com"));  // not the apex
  EXPECT_FALSE(sub.Matches("evilgithub.com"));
  EXPECT_FALSE(sub.Matches("github.com.evil.com"));

  const NamePattern any = *NamePattern::Parse("*");
  EXPECT_EQ(any.text(), "*");
  EXPECT_TRUE(any.Matches("anything.example"));
  EXPECT_EQ(*NamePattern::Parse(any.text()), any);
  EXPECT_EQ(*NamePattern::Parse("*."), any);  // the trailing dot dropped
  EXPECT_EQ(NamePattern::Parse("_acme-challenge.x-1.io")->text(), "_acme-challenge.x-1.io");
  EXPECT_TRUE(NamePattern::Parse(std::string(63, 'a') + ".com"));
}

TEST(DnsPatternTest, RefusesBadPatterns) {
  std::string long_pattern;
  for (int i = 0; i < 63; ++i) long_pattern += "abc.";
  long_pattern += "de";  // 254 characters
  for (const std::string& bad :
       {std::string(""), std::string("."), std::string("pypi..org"), std::string(".pypi.org"),
        std::string("pypi.org.."), std::string("*github.com"), std::string("a.*.com"),
        std::string("**.com"), std::string("*.*"), std::string("*..com"), std::string("py pi.org"),
        std::string("pypi.org/simple"), std::string("évil.com"), std::string(64, 'a') + ".com",
        long_pattern}) {
    auto p = NamePattern::Parse(bad);
    ASSERT_FALSE(p) << bad;
    EXPECT_EQ(p.error().code, ErrorCode::kInvalidRequest);
    EXPECT_NE(p.error().message.find("\"" + bad + "\""), std::string::npos) << p.error().message;
  }
}

TEST(DnsPatternTest, DenyBeatsAllow) {
  const std::vector<NamePattern> allow = {*NamePattern::Parse("*.github.com"),
                                          *NamePattern::Parse("pypi.org")};
  const std::vector<NamePattern> deny = {*NamePattern::Parse("gist.github.com")};
  EXPECT_TRUE(NameAllowed("api.github.com", allow, deny));
  EXPECT_TRUE(NameAllowed("pypi.org", allow, deny));
  EXPECT_FALSE(NameAllowed("gist.github.com", allow, deny));
  EXPECT_FALSE(NameAllowed("github.com", allow, deny));
  EXPECT_FALSE(NameAllowed("example.com", allow, deny));
  EXPECT_FALSE(NameAllowed("pypi.org", {}, {}));  // nothing allowed by default
  const std::vector<NamePattern> everything = {*NamePattern::Parse("*")};
  EXPECT_FALSE(NameAllowed("pypi.org", everything, everything));
}

}  // namespace
}  // namespace sandstream::net::dns
