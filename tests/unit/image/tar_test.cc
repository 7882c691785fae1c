// The tar reader against archives made by hand (ustar with a prefix, GNU long names, PAX local
// and global headers, base-256 numbers, broken checksums, truncation, sparse files), entry name
// normalization, and the canonical writer read back.
#include "image/tar.h"

#include <gtest/gtest.h>

#include <cstring>

#include "builders.h"

namespace sandstream::image {
namespace {

using test::Entry;
using test::StringSource;
using test::Tar;


struct Read {
  std::vector<TarEntry> entries;
  std::vector<std::string> data;
};

Result<Read> ReadTar(const std::string& bytes) {
  StringSource in(bytes);
  TarReader tar(in, "layer x");
  Read out;
  for (;;) {
    auto e = tar.Next();
    if (!e) return std::move(e).error();
    if (!*e) return out;
    std::string data;
    char buf[1000];
    for (;;) {
      auto got = tar.ReadData(buf, sizeof buf);
      if (!got) return std::move(got).error();
      if (*got == 0) break;
      data.append(buf, *got);
    }
    out.entries.push_back(**e);
    out.data.push_back(data);
  }
}

std::string ErrorOf(const std::string& bytes) {
  auto r = ReadTar(bytes);
  EXPECT_FALSE(r.ok());
  if (r.ok()) return "";
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidRequest);
  return r.error().message;
}

TEST(TarReaderTest, ReadsUstarGnuAndPaxNames) {
  const std::string long_name = std::string(150, 'd') + "/" + std::string(120, 'f');
  Tar t;
  t.File("plain.txt", "hello", 0640, 1000, 1001);
  // ustar's prefix field holds the directories of a name over 100 bytes.
  t.Raw(Tar::Header(Entry("in-prefix.txt"), 3, std::string(120, 'p')) + test::Pad("abc"));
  t.Add(Entry(long_name).Data("gnu").GnuLong());
  t.Add(Entry("l").Type('2').Link(std::string(300, 't')).GnuLong());
  t.Add(Entry("short").Data("pax").Pax(
      {{"path", long_name + "-pax"},
       {"uid", "4000000000"},
       {"gid", "7"},
       {"mtime", "1700000000.25"},
       {"SCHILY.xattr.security.capability", std::string("\x01\x00\x00\x02", 4)},
       {"SCHILY.xattr.user.note", "x"}}));
  auto r = ReadTar(t.Finish());
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(r->entries.size(), 5u);
  EXPECT_EQ(r->entries[0].name, "plain.txt");
  EXPECT_EQ(r->entries[0].mode, 0640u);
  EXPECT_EQ(r->entries[0].uid, 1000u);
  EXPECT_EQ(r->entries[0].gid, 1001u);
  EXPECT_EQ(r->data[0], "hello");
  EXPECT_EQ(r->entries[1].name, std::string(120, 'p') + "/in-prefix.txt");
  EXPECT_EQ(r->data[1], "abc");
  EXPECT_EQ(r->entries[2].name, long_name);
  EXPECT_EQ(r->data[2], "gnu");
  EXPECT_EQ(r->entries[3].type, EntryType::kSymlink);
  EXPECT_EQ(r->entries[3].linkname, std::string(300, 't'));
  const TarEntry& pax = r->entries[4];
  EXPECT_EQ(pax.name, long_name + "-pax");
  EXPECT_EQ(pax.uid, 4000000000u);
  EXPECT_EQ(pax.gid, 7u);
  EXPECT_EQ(pax.mtime, 1700000000);
  EXPECT_EQ(pax.mtime_nsec, 250000000u);
  ASSERT_EQ(pax.xattrs.size(), 2u);
  EXPECT_EQ(pax.xattrs[0].first, "security.capability");
  EXPECT_EQ(pax.xattrs[0].second, std::string("\x01\x00\x00\x02", 4));
  EXPECT_EQ(r->data[4], "pax");
}

TEST(TarReaderTest, GlobalPaxHeadersApplyToEveryLaterEntry) {
  const std::string records = "17 uid=123456789\n";
  Tar t;
  t.File("before", "");
  t.Raw(Tar::Header(Entry("global").Type('g'), records.size()) + test::Pad(records));
  t.File("after1", "").File("after2", "", 0644, 5);
  auto r = ReadTar(t.Finish());
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(r->entries.size(), 3u);
  EXPECT_EQ(r->entries[0].uid, 0u);
  EXPECT_EQ(r->entries[1].uid, 123456789u);
  EXPECT_EQ(r->entries[2].uid, 123456789u);  // the global record wins over the header
}

// "<length> key=value\n", the length counting the whole record.
std::string Record(const std::string& key, const std::string& value) {
  const size_t body = key.size() + value.size() + 3;
  size_t len = body + 1;
  while (std::to_string(len).size() + body != len) ++len;
  return std::to_string(len) + " " + key + "=" + value + "\n";
}

std::string GlobalHeader(const std::string& records) {
  return Tar::Header(Entry("global").Type('g'), records.size()) + test::Pad(records);
}

// 1 MiB of global records: a uid and a gid every entry takes, an xattr (applied only from an
// entry's own header), and keys the reader has no use for.
std::string FullGlobalRecords() {
  std::string records =
      Record("uid", "4242") + Record("SCHILY.xattr.user.note", "x") + Record("gid", "7");
  constexpr size_t kFull = size_t{1} << 20;
  while (records.size() + 200 < kFull) {
    records += Record("comment." + std::to_string(records.size()), std::string(60, 'c'));
  }
  std::string last;
  for (size_t n = 0; records.size() + last.size() != kFull; ++n) {
    last = Record("comment.last", std::string(n, 'c'));
  }
  return records + last;
}

TEST(TarReaderTest, GlobalPaxHeadersAreBoundedOverTheArchive) {
  const std::string records = FullGlobalRecords();
  ASSERT_EQ(records.size(), size_t{1} << 20);
  Tar t;
  t.Raw(GlobalHeader(records));
  for (int i = 0; i < 4000; ++i) t.File("f" + std::to_string(i), "");
  auto r = ReadTar(t.Finish());
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(r->entries.size(), 4000u);
  for (const auto& e : r->entries) {
    EXPECT_EQ(e.uid, 4242u);
    EXPECT_EQ(e.gid, 7u);
    EXPECT_TRUE(e.xattrs.empty());
  }

  // One header past the archive's 1 MiB of global records is refused, however small.
  Tar more;
  more.Raw(GlobalHeader(records)).File("a", "").Raw(GlobalHeader(Record("uid", "1")));
  more.File("b", "");
  EXPECT_NE(ErrorOf(more.Finish()).find("PAX global headers of more than 1048576 bytes in all"),
            std::string::npos);
  // So are many small ones adding up to more.
  Tar many;
  const std::string small = Record("comment", std::string(1000, 'c'));
  for (size_t i = 0; i <= (size_t{1} << 20) / small.size(); ++i) {
    many.Raw(GlobalHeader(small)).File("f" + std::to_string(i), "");
  }
  EXPECT_NE(ErrorOf(many.Finish()).find("PAX global headers of more than"), std::string::npos);

  // A global path longer than any name is refused where it is read.
  Tar path;
  path.Raw(GlobalHeader(Record("path", std::string(5000, 'p')))).File("a", "");
  EXPECT_NE(ErrorOf(path.Finish()).find("a PAX global path longer than 4095 bytes"),
            std::string::npos);
}

TEST(TarReaderTest, AnEntrysOwnRecordsWinOverGlobalOnes) {
  Tar t;
  t.Raw(GlobalHeader(Record("uid", "5") + Record("mtime", "1600000000")));
  t.Add(Entry("own").Pax({{"uid", "6"}, {"SCHILY.xattr.user.a", "1"}}));
  t.File("global", "");
  auto r = ReadTar(t.Finish());
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(r->entries.size(), 2u);
  EXPECT_EQ(r->entries[0].uid, 6u);
  EXPECT_EQ(r->entries[0].mtime, 1600000000);
  ASSERT_EQ(r->entries[0].xattrs.size(), 1u);
  EXPECT_EQ(r->entries[0].xattrs[0].first, "user.a");
  EXPECT_EQ(r->entries[1].uid, 5u);
  EXPECT_TRUE(r->entries[1].xattrs.empty());
}

TEST(TarReaderTest, PaxSizeOverridesTheHeader) {
  Tar t;
  t.Add(Entry("f").Data(std::string(700, 'x')).Pax({{"size", "700"}}));
  auto r = ReadTar(t.Finish());
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->entries[0].size, 700u);
  EXPECT_EQ(r->data[0].size(), 700u);
}

TEST(TarReaderTest, ReadsBase256Numbers) {
  std::string h = Tar::Header(Entry("big"), 0);
  // uid 2^40 and size 513 in base-256 (the first byte's top bit set), checksum redone.
  std::memset(&h[108], 0, 8);
  h[108] = static_cast<char>(0x80);
  h[110] = 1;  // 1 << 40
  std::memset(&h[124], 0, 12);
  h[124] = static_cast<char>(0x80);
  h[134] = 2;
  h[135] = 1;
  Tar::Reseal(h);
  // 2^40 is no uid: refused, naming the field.
  EXPECT_NE(ErrorOf(h + test::Pad(std::string(513, 'z')) + std::string(1024, '\0')).find("uid"),
            std::string::npos);
  h[110] = 0;
  h[111] = 1;  // 2^32: still too big
  Tar::Reseal(h);
  EXPECT_NE(ErrorOf(h).find("uid"), std::string::npos);
  h[111] = 0;
  h[115] = 42;
  Tar::Reseal(h);
  auto r = ReadTar(h + test::Pad(std::string(513, 'z')) + std::string(1024, '\0'));
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->entries[0].uid, 42u);
  EXPECT_EQ(r->entries[0].size, 513u);
}

TEST(TarReaderTest, RefusesBrokenArchives) {
  const std::string good = Tar().File("a", "0123456789").Finish();
  std::string bad_sum = good;
  bad_sum[0] = 'b';
  EXPECT_NE(ErrorOf(bad_sum).find("checksum"), std::string::npos);
  EXPECT_NE(ErrorOf(good.substr(0, 300)).find("truncated"), std::string::npos);
  EXPECT_NE(ErrorOf(good.substr(0, 515)).find("truncated"), std::string::npos);
  // A lone zero block, then a header.
  EXPECT_NE(ErrorOf(std::string(512, '\0') + good).find("zero block"), std::string::npos);
  EXPECT_NE(ErrorOf(Tar().Add(Entry("s").Type('S')).Finish()).find("sparse"),
            std::string::npos);
  EXPECT_NE(ErrorOf(Tar().Add(Entry("s").Pax({{"GNU.sparse.major", "1"}})).Finish())
                .find("sparse"),
            std::string::npos);
  EXPECT_NE(ErrorOf(Tar().Add(Entry("v").Type('V')).Finish()).find("'V'"),
            std::string::npos);
  const std::string broken = "99 path=x\n";
  EXPECT_NE(ErrorOf(Tar::Header(Entry("x").Type('x'), broken.size()) +
                    test::Pad(broken) + good)
                .find("PAX"),
            std::string::npos);
  // A PAX header with nothing after it.
  EXPECT_FALSE(ReadTar(Tar().Add(Entry("p").Pax({{"path", "q"}})).bytes().substr(0, 1024) +
                       std::string(1024, '\0'))
                   .ok());
  std::string bad_mode = Tar::Header(Entry("m"), 0);
  bad_mode[101] = '9';
  EXPECT_FALSE(ReadTar(bad_mode).ok());
}

TEST(TarReaderTest, AnArchiveMayEndWithoutItsZeroBlocks) {
  auto r = ReadTar(Tar().File("a", "x").bytes());
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->entries.size(), 1u);
}

TEST(TarNamesTest, NormalizesAndRefuses) {
  EXPECT_EQ(*NormalizeEntryName("./a/b"), "a/b");
  EXPECT_EQ(*NormalizeEntryName("/a//b/./c/"), "a/b/c");
  EXPECT_EQ(*NormalizeEntryName("./"), "");
  EXPECT_EQ(*NormalizeEntryName("a..b/..c"), "a..b/..c");
  EXPECT_FALSE(NormalizeEntryName(""));
  EXPECT_FALSE(NormalizeEntryName("a/../b"));
  EXPECT_FALSE(NormalizeEntryName(".."));
  EXPECT_FALSE(NormalizeEntryName(std::string("a\0b", 3)));
  EXPECT_FALSE(NormalizeEntryName(std::string(256, 'n')));
  EXPECT_TRUE(NormalizeEntryName(".wh." + std::string(255, 'n')));  // hides a 255-byte name
  EXPECT_FALSE(NormalizeEntryName(".wh." + std::string(256, 'n')));
  EXPECT_FALSE(NormalizeEntryName(std::string(4096, '/')));
  EXPECT_EQ(Quote(std::string("a\n'b", 4)), "'a\\x0a\\x27b'");
}

class StringSink : public Sink {
 public:
  Result<void> Write(std::string_view data) override {
    out.append(data);
    return Ok{};
  }
  std::string out;
};

TEST(TarWriterTest, WritesWhatTheReaderReadsBackTheSameEveryTime) {
  std::vector<TarEntry> entries(4);
  entries[0].name = "dir/";
  entries[0].type = EntryType::kDirectory;
  entries[0].mode = 01755;
  entries[1].name = std::string(200, 'n');
  entries[1].size = 3;
  entries[1].uid = 3000000;  // over ustar's 7 octal digits
  entries[1].mtime = -5;
  entries[1].xattrs = {{"security.capability", std::string("\0\1\2", 3)}};
  entries[2].name = "link";
  entries[2].type = EntryType::kSymlink;
  entries[2].linkname = std::string(150, 'l');
  entries[3].name = "hard";
  entries[3].type = EntryType::kHardlink;
  entries[3].linkname = "dir/";
  auto write = [&] {
    StringSink sink;
    TarWriter w(sink);
    for (const auto& e : entries) {
      EXPECT_TRUE(w.WriteHeader(e).ok());
      if (e.size) {
        EXPECT_TRUE(w.WriteData("abc").ok());
        EXPECT_TRUE(w.Pad(3).ok());
      }
    }
    EXPECT_TRUE(w.Finish().ok());
    return sink.out;
  };
  const std::string bytes = write();
  EXPECT_EQ(bytes, write());
  auto r = ReadTar(bytes);
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(r->entries.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(r->entries[i].name, entries[i].name);
    EXPECT_EQ(r->entries[i].type, entries[i].type);
    EXPECT_EQ(r->entries[i].linkname, entries[i].linkname);
    EXPECT_EQ(r->entries[i].uid, entries[i].uid);
    EXPECT_EQ(r->entries[i].mode, entries[i].mode);
    EXPECT_EQ(r->entries[i].mtime, entries[i].mtime);
    EXPECT_EQ(r->entries[i].xattrs, entries[i].xattrs);
  }
  EXPECT_EQ(r->data[1], "abc");
}

}  // namespace
}  // namespace sandstream::image
