#include "net/policy.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>

namespace sandstream::net {
namespace {

Ipv4Prefix P(const char* text) { return *ParsePrefix(text); }

bool Has(const std::vector<Ipv4Prefix>& set, const char* text) {
  return std::find(set.begin(), set.end(), P(text)) != set.end();
}

TEST(EgressPolicyTest, RulesAreAddressesPrefixesOrNamePatterns) {
  auto p = ParseEgressPolicy(std::vector<std::string>{"198.18.0.0/15", "203.0.113.7", "pypi.org",
                                                      "*.github.com"},
                             {"198.18.3.0/24", "evil.pypi.org"});
  ASSERT_TRUE(p) << p.error().message;
  EXPECT_EQ(p->allow_prefixes, (std::vector<Ipv4Prefix>{P("198.18.0.0/15"), P("203.0.113.7")}));
  EXPECT_EQ(p->allow_names.size(), 2u);
  EXPECT_EQ(p->deny_prefixes, std::vector<Ipv4Prefix>{P("198.18.3.0/24")});
  EXPECT_FALSE(p->any_address());
  EXPECT_TRUE(p->PinsAnswers());
  // The rules as written, to answer with and to persist.
  EXPECT_EQ(p->allow->size(), 4u);
  EXPECT_EQ(p->deny.size(), 2u);
}

TEST(EgressPolicyTest, BadRulesNameThemselves) {
  for (const char* bad : {"10.0.0.1/8", "1.2.3.4/33", "300.1.1.1", "bad name", "a..b", "*x.com",
                          ""}) {
    auto p = ParseEgressPolicy(std::vector<std::string>{bad}, {});
    ASSERT_FALSE(p) << bad;
    EXPECT_EQ(p.error().code, ErrorCode::kInvalidRequest);
    EXPECT_EQ(p.error().message.rfind("network.egress.allow: ", 0), 0u) << p.error().message;
  }
  EXPECT_FALSE(ParseEgressPolicy(std::nullopt, {"1.2.3.0/"}));
  std::vector<std::string> many(kMaxEgressRules + 1, "pypi.org");
  EXPECT_FALSE(ParseEgressPolicy(many, {}));
  EXPECT_FALSE(ParseEgressPolicy(std::nullopt, many));
}

TEST(EgressPolicyTest, NamesAnswerOnlyWhenAllowedAndNotDenied) {
  auto listed = *ParseEgressPolicy(std::vector<std::string>{"pypi.org", "*.github.com"},
                                   {"evil.github.com"});
  EXPECT_TRUE(listed.AllowsName("pypi.org"));
  EXPECT_FALSE(listed.AllowsName("files.pypi.org"));
  EXPECT_TRUE(listed.AllowsName("api.github.com"));
  EXPECT_TRUE(listed.AllowsName("a.b.github.com"));
  EXPECT_FALSE(listed.AllowsName("github.com"));  // a wildcard is not its apex
  EXPECT_FALSE(listed.AllowsName("evil.github.com"));
  // Without an allow list every name answers but the denied ones; nothing needs pinning.
  auto open = *ParseEgressPolicy(std::nullopt, {"*.evil.test"});
  EXPECT_TRUE(open.AllowsName("pypi.org"));
  EXPECT_FALSE(open.AllowsName("x.evil.test"));
  EXPECT_FALSE(open.PinsAnswers());
  // An allow list of addresses only resolves no name at all.
  auto addresses = *ParseEgressPolicy(std::vector<std::string>{"198.18.0.0/15"}, {});
  EXPECT_FALSE(addresses.AllowsName("pypi.org"));
  auto nothing = *ParseEgressPolicy(std::vector<std::string>{}, {});
  EXPECT_FALSE(nothing.AllowsName("pypi.org"));
}

TEST(EgressPolicyTest, CompiledSetsKeepPrivateRangesHostAndOtherSandboxesOut) {
  const Ipv4Prefix pool = P("10.200.0.0/16");
  const std::vector<uint32_t> host = {*ParseAddress("192.0.2.2"), *ParseAddress("127.0.0.1")};
  auto open = *ParseEgressPolicy(std::nullopt, {"198.18.3.0/24"});
  EgressSets sets = CompileEgress(open, pool, host);
  EXPECT_EQ(sets.allow, std::vector<Ipv4Prefix>{P("0.0.0.0/0")});
  EXPECT_TRUE(Has(sets.deny, "198.18.3.0/24"));
  EXPECT_TRUE(Has(sets.deny, "10.200.0.0/16"));  // the pool: sandboxes never reach each other
  EXPECT_TRUE(Has(sets.never, "10.0.0.0/8"));
  EXPECT_TRUE(Has(sets.never, "169.254.0.0/16"));
  EXPECT_TRUE(Has(sets.never, "10.200.0.0/16"));
  EXPECT_TRUE(sets.allow_private.empty());

  // Named explicitly: a private range, a host address. Not: a range that only overlaps one, and
  // the pool, which stays denied whatever names it.
  auto named = *ParseEgressPolicy(
      std::vector<std::string>{"10.99.0.0/16", "192.0.2.2", "10.0.0.0/7", "10.200.0.0/16"}, {});
  sets = CompileEgress(named, pool, host);
  EXPECT_TRUE(Has(sets.allow_private, "10.99.0.0/16"));
  EXPECT_TRUE(Has(sets.allow_private, "192.0.2.2/32"));
  EXPECT_TRUE(Has(sets.allow, "10.0.0.0/7"));
  EXPECT_FALSE(Has(sets.allow, "0.0.0.0/0"));
  EXPECT_TRUE(Has(sets.deny, "10.200.0.0/16"));
}

}  // namespace
}  // namespace sandstream::net

namespace sandstream::net {
namespace {

TEST(PublicAddressTest, PrivateLoopbackLinkLocalAndMappedOnesAreNot) {
  for (const char* yes : {"93.184.216.34", "1.1.1.1", "2606:4700::1111", "::ffff:1.1.1.1",
                          "64:ff9b::101:101"}) {
    EXPECT_TRUE(IsPublicAddress(yes)) << yes;
  }
  for (const char* no : {"127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254",
                         "100.64.0.1", "0.0.0.0", "224.0.0.1", "::1", "::", "fe80::1", "fc00::1",
                         "fd12:3456::1", "2001:db8::1", "::ffff:127.0.0.1", "::ffff:10.0.0.1",
                         "64:ff9b::a00:1", "ff02::1", "not an address", ""}) {
    EXPECT_FALSE(IsPublicAddress(no)) << no;
  }
}

// A registry pull must not reach the benchmarking range nor the node's own addresses, in any
// of their spellings; other public addresses stay reachable.
TEST(PublicAddressTest, RegistryAddressesAreNeitherBenchmarkingNorTheNodesOwn) {
  OwnAddresses own;
  own.v4 = {*ParseAddress("93.184.216.34")};
  in6_addr v6{};
  ASSERT_EQ(::inet_pton(AF_INET6, "2606:4700::1111", &v6), 1);
  std::array<uint8_t, 16> bytes{};
  std::copy(v6.s6_addr, v6.s6_addr + 16, bytes.begin());
  own.v6 = {bytes};
  for (const char* yes : {"1.1.1.1", "93.184.216.35", "198.17.255.255", "198.20.0.0",
                          "2606:4700::1112", "::ffff:1.1.1.1", "64:ff9b::101:101"}) {
    EXPECT_TRUE(IsPublicAddress(yes)) << yes;
    EXPECT_TRUE(IsRegistryAddress(yes, own)) << yes;
  }
  for (const char* no : {"198.18.0.1", "198.19.255.254", "::ffff:198.18.0.1", "64:ff9b::c612:1",
                         "93.184.216.34", "::ffff:93.184.216.34", "64:ff9b::5db8:d822",
                         "2606:4700:0:0::1111", "127.0.0.1", "10.0.0.1", "::1", "fe80::1", ""}) {
    EXPECT_FALSE(IsRegistryAddress(no, own)) << no;
  }
  // Egress keeps the range for its rules: a sandbox may be pointed at it.
  EXPECT_TRUE(IsPublicAddress("198.18.0.1"));
}

}  // namespace
}  // namespace sandstream::net
