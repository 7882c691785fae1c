// Image references as docker reads them, and the registry lists of the operator's settings.
#include "image/registry.h"

#include <gtest/gtest.h>

namespace sandstream::image {
namespace {

TEST(ReferenceTest, DockerHubShorthands) {
  auto r = ParseReference("python:3.12");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->host, "docker.io");
  EXPECT_EQ(r->ApiHost(), "registry-1.docker.io");
  EXPECT_EQ(r->repository, "library/python");
  EXPECT_EQ(r->tag, "3.12");
  EXPECT_EQ(r->String(), "docker.io/library/python:3.12");

  r = ParseReference("team/app");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->repository, "team/app");
  EXPECT_EQ(r->tag, "latest");
}

TEST(ReferenceTest, HostsPortsTagsAndDigests) {
  const std::string digest = "sha256:" + std::string(64, 'a');
  auto r = ParseReference("127.0.0.1:5000/team/app:1.0@" + digest);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->host, "127.0.0.1:5000");
  EXPECT_EQ(r->ApiHost(), "127.0.0.1:5000");
  EXPECT_EQ(r->repository, "team/app");
  EXPECT_EQ(r->tag, "1.0");
  EXPECT_EQ(r->digest, digest);

  r = ParseReference("localhost/app@" + digest);  // pinned: no tag implied
  ASSERT_TRUE(r);
  EXPECT_EQ(r->host, "localhost");
  EXPECT_EQ(r->tag, "");
  EXPECT_EQ(r->String(), "localhost/app@" + digest);

  r = ParseReference("registry.example.com/a/b/c");  // a '.' makes the first part a host
  ASSERT_TRUE(r);
  EXPECT_EQ(r->host, "registry.example.com");
  EXPECT_EQ(r->repository, "a/b/c");
}

TEST(ReferenceTest, RefusesWhatIsNotOne) {
  for (const char* bad :
       {"", "Upper/case", "app:", "app:-tag", "host:5000/", "a//b", "app@sha256:short",
        "app@md5:"
        "0123",
        "-app", "app/", "x y", "host:5000/app:tag:more"}) {
    auto r = ParseReference(bad);
    EXPECT_FALSE(r) << bad;
    if (!r) {
      EXPECT_EQ(r.error().code, ErrorCode::kInvalidRequest) << bad;
    }
  }
  EXPECT_FALSE(ParseReference(std::string(2000, 'a')));
}

TEST(RegistryHostsTest, AHostAloneMatchesEveryPort) {
  const std::vector<std::string> list = {"registry.local", "127.0.0.1:5000"};
  EXPECT_TRUE(HostListed(list, "registry.local"));
  EXPECT_TRUE(HostListed(list, "registry.local:443"));
  EXPECT_TRUE(HostListed(list, "127.0.0.1:5000"));
  EXPECT_FALSE(HostListed(list, "127.0.0.1:5001"));
  EXPECT_FALSE(HostListed(list, "127.0.0.1"));
  EXPECT_FALSE(HostListed(list, "registry.local.evil"));
  EXPECT_FALSE(HostListed({}, "registry.local"));
}

}  // namespace
}  // namespace sandstream::image
