// The image documents: picking a platform from an index, manifests, configs, and every wrong
// type a clear error.
#include "image/manifest.h"

#include <gtest/gtest.h>

#include "builders.h"
#include "image/digest.h"

namespace sandstream::image {
namespace {

const std::string kManifest = "application/vnd.oci.image.manifest.v1+json";

std::string D(char c) { return "sha256:" + std::string(64, c); }

TEST(IndexTest, PicksLinuxAmd64AndSkipsAttestations) {
  const std::string index = test::IndexJson({
      {kManifest, D('a'), 10, "linux/arm64", {}},
      {kManifest, D('b'), 11, "linux/amd64", {}},
      {kManifest, D('c'), 12, "unknown/unknown",
       {{"vnd.docker.reference.type", "attestation-manifest"}}},
  });
  auto d = PickFromIndex(index);
  ASSERT_TRUE(d) << d.error().message;
  EXPECT_EQ(d->digest, D('b'));
  EXPECT_EQ(d->size, 11u);
  EXPECT_EQ(d->platform.architecture, "amd64");

  // The only image, whatever its platform; the attestation does not count.
  auto only = PickFromIndex(test::IndexJson({{kManifest, D('a'), 10, "linux/arm64", {}},
                                             {kManifest, D('c'), 12, "unknown/unknown", {}}}));
  ASSERT_TRUE(only);
  EXPECT_EQ(only->digest, D('a'));

  auto none = PickFromIndex(test::IndexJson({{kManifest, D('a'), 10, "linux/arm64", {}},
                                             {kManifest, D('b'), 10, "linux/s390x", {}}}));
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().message.find("linux/arm64, linux/s390x"), std::string::npos);
  EXPECT_FALSE(PickFromIndex(test::IndexJson({})));
}

TEST(IndexTest, WrongTypesAreErrorsNamingTheField) {
  struct Case {
    std::string json;
    const char* field;
  };
  // An index with one descriptor, up to its size (each case's own fields follow).
  const std::string desc =
      R"({"schemaVersion":2,"manifests":[{"mediaType":"a","digest":")" + D('a') + "\",";
  const Case cases[] = {
      {"[]", "index"},
      {"{", "JSON"},
      {R"({"schemaVersion":"2","manifests":[]})", "schemaVersion"},
      {R"({"schemaVersion":2,"manifests":{}})", "index.manifests"},
      {R"({"schemaVersion":2,"manifests":[7]})", "index.manifests[0]"},
      {R"({"schemaVersion":2,"manifests":[{"mediaType":1,"digest":"x","size":1}]})",
       "mediaType"},
      {R"({"schemaVersion":2,"manifests":[{"mediaType":"a","digest":"sha256:zz","size":1}]})",
       "digest"},
      {desc + R"("size":-1}]})", "size"},
      {desc + R"("size":1.5}]})", "size"},
      {desc + R"("size":1,"platform":"linux"}]})", "platform"},
      {desc + R"("size":1,"annotations":{"k":1}}]})", "annotations"},
  };
  for (const auto& c : cases) {
    auto d = PickFromIndex(c.json);
    ASSERT_FALSE(d) << c.json;
    EXPECT_EQ(d.error().code, ErrorCode::kInvalidRequest);
    EXPECT_NE(d.error().message.find(c.field), std::string::npos) << d.error().message;
  }
}

TEST(ManifestTest, ReadsLayersAndRefusesUnknownTypes) {
  const auto gz = test::MakeLayer("tar bytes", Compression::kGzip);
  const auto zs = test::MakeLayer("tar bytes", Compression::kZstd);
  const std::string config = test::ConfigJson({gz.diff_id, zs.diff_id});
  auto m = ParseManifest(test::ManifestJson(config, {gz, zs}));
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(m->config.digest, Sha256Of(config));
  ASSERT_EQ(m->layers.size(), 2u);
  EXPECT_EQ(m->layers[0].digest, gz.digest);
  EXPECT_EQ(*LayerCompression(m->layers[1].media_type), Compression::kZstd);
  EXPECT_EQ(*LayerCompression("application/vnd.docker.image.rootfs.diff.tar.gzip"),
            Compression::kGzip);

  auto odd = gz;
  odd.media_type = "application/vnd.oci.image.layer.v1.tar+bzip2";
  auto refused = ParseManifest(test::ManifestJson(config, {odd}));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kUnsupportedMediaType);
  EXPECT_NE(refused.error().message.find("layers[0]"), std::string::npos);

  EXPECT_FALSE(ParseManifest(R"({"schemaVersion":2,"layers":[]})"));
  EXPECT_FALSE(ParseManifest(R"({"schemaVersion":1,"config":{},"layers":[]})"));
  auto list = ParseManifest(
      R"({"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json"})");
  ASSERT_FALSE(list);
  EXPECT_NE(list.error().message.find("mediaType"), std::string::npos);
}

TEST(ConfigTest, ReadsWhatASandboxRunsWith) {
  auto c = ParseConfig(test::ConfigJson({D('1'), D('2')}));
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->diff_ids, (std::vector<std::string>{D('1'), D('2')}));
  EXPECT_EQ(c->config.env, (std::vector<std::string>{"PATH=/usr/bin:/bin", "LANG=C.UTF-8"}));
  EXPECT_EQ(c->config.working_dir, "/app");
  EXPECT_EQ(c->config.user, "1000:1000");
  EXPECT_EQ(c->config.entrypoint, (std::vector<std::string>{"/bin/sh", "-c"}));
  EXPECT_EQ(c->config.cmd, std::vector<std::string>{"echo hi"});

  // Docker writes null for what is unset.
  auto nulls = ParseConfig(
      R"({"config":{"Env":null,"Cmd":null,"User":null},"rootfs":{"type":"layers","diff_ids":[]}})");
  ASSERT_TRUE(nulls) << nulls.error().message;
  EXPECT_TRUE(nulls->config.env.empty());
  EXPECT_TRUE(nulls->diff_ids.empty());

  for (const char* bad : {
           R"({"config":{"Cmd":"echo"},"rootfs":{"type":"layers","diff_ids":[]}})",
           R"({"config":{"Env":[1]},"rootfs":{"type":"layers","diff_ids":[]}})",
           R"({"config":{"User":1000},"rootfs":{"type":"layers","diff_ids":[]}})",
           R"({"config":[],"rootfs":{"type":"layers","diff_ids":[]}})",
           R"({"rootfs":{"type":"layers","diff_ids":"sha256:x"}})",
           R"({"rootfs":{"type":"layers","diff_ids":["md5:x"]}})",
           R"({"rootfs":{"type":"other","diff_ids":[]}})",
           R"({"config":{}})",
       }) {
    auto r = ParseConfig(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidRequest);
    EXPECT_EQ(r.error().message.rfind("config.", 0), 0u) << r.error().message;
  }
}

TEST(DocumentKindTest, ByMediaTypeOrShape) {
  EXPECT_EQ(*DocumentKindOf(test::IndexJson({})), DocumentKind::kIndex);
  EXPECT_EQ(*DocumentKindOf(R"({"schemaVersion":2,"manifests":[]})"), DocumentKind::kIndex);
  EXPECT_EQ(*DocumentKindOf(R"({"schemaVersion":2,"config":{}})"), DocumentKind::kManifest);
  EXPECT_EQ(DocumentKindOf(R"({"mediaType":"text/plain"})").error().code,
            ErrorCode::kUnsupportedMediaType);
}

}  // namespace
}  // namespace sandstream::image
