// Unit tests of the E2B upload body readers: multipart/form-data however its pieces are cut
// (the same parts and bytes at every split), hostile and malformed bodies, and gzip bodies
// decompressed in bounded pieces, cut short, corrupt, or expanding a thousandfold.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "api/e2b/inflate.h"
#include "api/e2b/multipart.h"

namespace sandstream::api::e2b {
namespace {

const std::string kBoundary = "----sandstream-7f3a";

struct ReadPart {
  std::string name;
  std::string filename;
  std::string content_type;
  std::string data;

  bool operator==(const ReadPart&) const = default;
};

std::ostream& operator<<(std::ostream& os, const ReadPart& p) {
  return os << "{" << p.name << ", " << p.filename << ", " << p.content_type << ", "
            << p.data.size() << " bytes}";
}

struct ReadBody {
  std::vector<ReadPart> parts;
  std::optional<Error> error;  // of Feed, Next or Finish
};

// Reads `pieces` as the upload route does, checking the order of the events. A piece's data
// views are used only once it is drained (they are valid until the next Feed), and each piece
// is copied and wiped then, so a view kept past its life shows.
ReadBody Read(const std::vector<std::string>& pieces, const std::string& boundary = kBoundary) {
  MultipartReader reader(boundary);
  ReadBody out;
  bool open = false;
  for (const std::string& piece : pieces) {
    std::string buffer = piece;
    if (auto fed = reader.Feed(buffer); !fed) {
      out.error = fed.error();
      return out;
    }
    std::vector<std::pair<size_t, std::string_view>> views;  // part index, bytes
    for (;;) {
      auto event = reader.Next();
      if (!event) {
        out.error = event.error();
        return out;
      }
      if (!*event) break;
      switch ((*event)->kind) {
        case MultipartEvent::Kind::kBegin:
          EXPECT_FALSE(open);
          open = true;
          out.parts.push_back(
              {reader.part().name, reader.part().filename, reader.part().content_type, ""});
          break;
        case MultipartEvent::Kind::kData:
          EXPECT_TRUE(open);
          EXPECT_FALSE((*event)->data.empty());
          views.emplace_back(out.parts.size() - 1, (*event)->data);
          break;
        case MultipartEvent::Kind::kEnd:
          EXPECT_TRUE(open);
          open = false;
          break;
      }
    }
    for (const auto& [part, data] : views) out.parts[part].data += data;
    std::fill(buffer.begin(), buffer.end(), '#');
  }
  if (auto finished = reader.Finish(); !finished) {
    out.error = finished.error();
  } else {
    EXPECT_FALSE(open);
  }
  return out;
}

ReadBody Read(std::string_view body, const std::string& boundary = kBoundary) {
  return Read(std::vector<std::string>{std::string(body)}, boundary);
}

std::vector<std::string> Split(std::string_view body, std::vector<size_t> cuts) {
  std::sort(cuts.begin(), cuts.end());
  std::vector<std::string> pieces;
  size_t from = 0;
  for (size_t cut : cuts) {
    pieces.emplace_back(body.substr(from, cut - from));
    from = cut;
  }
  pieces.emplace_back(body.substr(from));
  return pieces;
}

std::vector<std::string> Bytes(std::string_view body) {
  std::vector<std::string> pieces;
  for (char c : body) pieces.emplace_back(1, c);
  return pieces;
}

// A part's bytes that come close to a delimiter in every way but one.
std::string Lookalikes(const std::string& boundary, std::string_view nl = "\r\n") {
  std::string s = "--" + boundary + "X begins the part, as a delimiter would after a line break";
  s += "\r\n--" + boundary.substr(0, boundary.size() - 1) + "\r\n";
  s += "\r\n--" + boundary + "X";
  s += "\r\n--" + boundary + "-x";
  s += "\n--" + boundary + "Y";
  s += "\r\r\n-\r\n--\n\n\r\n\r\n";
  for (int i = 0; i < 256; ++i) s += static_cast<char>(i);
  // A CR just before a CRLF delimiter is the part's own. (Before an LF one it would be read as
  // the delimiter's, as in any reader that takes bare LFs.)
  if (nl == "\r\n") s += "\r";
  return s;
}

// A body of three parts (one empty, one binary) between a preamble and an epilogue, with `nl`
// ending its lines.
std::string SampleBody(std::string_view nl = "\r\n") {
  const std::string b = kBoundary;
  std::string body = "a preamble, which is read past";
  body += std::string(nl) + "--" + b + std::string(nl);
  body += "Content-Disposition: form-data; name=\"file\"; filename=\"/home/user/a b.txt\"";
  body += std::string(nl) + "Content-Type: text/plain" + std::string(nl) + std::string(nl);
  body += "hello" + std::string(nl) + "--" + b + std::string(nl);
  body += "Content-Disposition: form-data; name=\"file\"; filename=empty";
  body += std::string(nl) + std::string(nl);
  body += std::string(nl) + "--" + b + " \t" + std::string(nl);
  body += "content-disposition: FORM-DATA; name=file;" + std::string(nl) + "  filename=\"bin\"" +
          std::string(nl) + std::string(nl);
  body += Lookalikes(b, nl);
  body += std::string(nl) + "--" + b + "--" + std::string(nl);
  body += "an epilogue, read past too" + std::string(nl) + "--" + b + std::string(nl) + "junk";
  return body;
}

std::vector<ReadPart> SampleParts(std::string_view nl = "\r\n") {
  return {{"file", "/home/user/a b.txt", "text/plain", "hello"},
          {"file", "empty", "", ""},
          {"file", "bin", "", Lookalikes(kBoundary, nl)}};
}

TEST(MultipartBoundaryTest, ReadsTheParameterQuotedOrNot) {
  EXPECT_EQ(*MultipartBoundary("multipart/form-data; boundary=abc"), "abc");
  EXPECT_EQ(*MultipartBoundary("Multipart/Form-Data; charset=utf-8; BOUNDARY=\"a b:c\""), "a b:c");
  EXPECT_EQ(*MultipartBoundary("multipart/form-data ;boundary = xyz ; other=\"q;\""), "xyz");
  EXPECT_EQ(*MultipartBoundary("multipart/form-data; boundary=\"\\q\""), "q");
  EXPECT_EQ(*MultipartBoundary("multipart/form-data; boundary=" + std::string(70, 'b')),
            std::string(70, 'b'));
  EXPECT_EQ(
      *MultipartBoundary("multipart/form-data; boundary=----WebKitFormBoundaryx7Z'()+_,-./:=?"),
      "----WebKitFormBoundaryx7Z'()+_,-./:=?");
}

TEST(MultipartBoundaryTest, RefusesOtherTypesAndBadBoundaries) {
  for (const char* type : {"text/plain", "multipart/mixed; boundary=abc", "", "application/json"}) {
    auto b = MultipartBoundary(type);
    ASSERT_FALSE(b) << type;
    EXPECT_EQ(b.error().code, ErrorCode::kUnsupportedMediaType) << type;
    EXPECT_NE(b.error().message.find("multipart/form-data"), std::string::npos);
  }
  for (const std::string& type : std::vector<std::string>{
           "multipart/form-data",
           "multipart/form-data; charset=utf-8",
           "multipart/form-data; boundary=",
           "multipart/form-data; boundary=\"\"",
           "multipart/form-data; boundary=" + std::string(71, 'b'),
           "multipart/form-data; boundary=\"abc",
           "multipart/form-data; boundary=\"abc\"def",
           "multipart/form-data; boundary=\"abc \"",
           "multipart/form-data; boundary=a\rb",
           "multipart/form-data; boundary=a\nb",
           "multipart/form-data; boundary=a\"b",
           "multipart/form-data; boundary=a; boundary=b",
           "multipart/form-data; boundary",
           "multipart/form-data; =abc",
       }) {
    auto b = MultipartBoundary(type);
    ASSERT_FALSE(b) << type;
    EXPECT_EQ(b.error().code, ErrorCode::kInvalidRequest) << type;
    EXPECT_FALSE(b.error().message.empty());
  }
  EXPECT_NE(MultipartBoundary("multipart/form-data").error().message.find("no boundary"),
            std::string::npos);
  EXPECT_NE(MultipartBoundary("multipart/form-data; boundary=" + std::string(71, 'b'))
                .error()
                .message.find("1 to 70"),
            std::string::npos);
}

TEST(MultipartReaderTest, ReadsTheSampleInOnePiece) {
  const ReadBody read = Read(SampleBody());
  ASSERT_FALSE(read.error) << read.error->message;
  EXPECT_EQ(read.parts, SampleParts());
}

TEST(MultipartReaderTest, EverySplitInTwoGivesTheSameParts) {
  for (std::string_view nl : {"\r\n", "\n"}) {
    const std::string body = SampleBody(nl);
    for (size_t cut = 0; cut <= body.size(); ++cut) {
      const ReadBody read = Read(Split(body, {cut}));
      ASSERT_FALSE(read.error) << "cut at " << cut << ": " << read.error->message;
      ASSERT_EQ(read.parts, SampleParts(nl)) << "cut at " << cut;
    }
  }
}

TEST(MultipartReaderTest, ByteByByteGivesTheSameParts) {
  for (std::string_view nl : {"\r\n", "\n"}) {
    const ReadBody read = Read(Bytes(SampleBody(nl)));
    ASSERT_FALSE(read.error) << read.error->message;
    EXPECT_EQ(read.parts, SampleParts(nl));
  }
}

TEST(MultipartReaderTest, PiecesOfEverySizeGiveTheSameParts) {
  const std::string body = SampleBody();
  for (size_t size = 1; size <= 3 * kBoundary.size() + 20; ++size) {
    std::vector<size_t> cuts;
    for (size_t cut = size; cut < body.size(); cut += size) cuts.push_back(cut);
    const ReadBody read = Read(Split(body, cuts));
    ASSERT_FALSE(read.error) << read.error->message;
    ASSERT_EQ(read.parts, SampleParts()) << "pieces of " << size;
  }
}

TEST(MultipartReaderTest, RandomSplitsGiveTheSameParts) {
  const std::string body = SampleBody();
  std::mt19937 rng(20240611);
  for (int round = 0; round < 3000; ++round) {
    std::vector<size_t> cuts(1 + rng() % 8);
    for (size_t& cut : cuts) cut = rng() % (body.size() + 1);
    const ReadBody read = Read(Split(body, cuts));
    ASSERT_FALSE(read.error) << read.error->message;
    ASSERT_EQ(read.parts, SampleParts()) << "round " << round;
  }
}

TEST(MultipartReaderTest, ADelimiterAtTheVeryStartAndNoEpilogue) {
  const std::string body = "--b\r\nContent-Disposition: form-data; name=x\r\n\r\n1\r\n--b--";
  const ReadBody read = Read(body, "b");
  ASSERT_FALSE(read.error) << read.error->message;
  ASSERT_EQ(read.parts, (std::vector<ReadPart>{{"x", "", "", "1"}}));
  // A body of no parts is complete too; the route tells it has no file.
  const ReadBody none = Read("--b--", "b");
  EXPECT_FALSE(none.error);
  EXPECT_TRUE(none.parts.empty());
}

TEST(MultipartReaderTest, ManyParts) {
  std::string body;
  std::vector<ReadPart> want;
  for (int i = 0; i < 2000; ++i) {
    const std::string n = std::to_string(i);
    body += "--" + kBoundary + "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f" +
            n + "\"\r\n\r\n" + n + "\r\n";
    want.push_back({"file", "f" + n, "", n});
  }
  body += "--" + kBoundary + "--\r\n";
  const ReadBody read = Read(Split(body, {body.size() / 3, body.size() / 2}));
  ASSERT_FALSE(read.error) << read.error->message;
  EXPECT_EQ(read.parts, want);
}

TEST(MultipartReaderTest, ABigPartIsHandedOnAsItArrivesKeepingLessThanADelimiter) {
  std::mt19937 rng(7);
  std::string data(8 << 20, '\0');
  for (char& c : data) c = "ab\r\n-"[rng() % 5];
  const std::string head =
      "--" + kBoundary + "\r\nContent-Disposition: form-data; name=file; filename=big\r\n\r\n";
  const std::string body = head + data + "\r\n--" + kBoundary + "--";
  MultipartReader reader(kBoundary);
  std::string got;
  constexpr size_t kPiece = 64 * 1024;
  for (size_t pos = 0; pos < body.size(); pos += kPiece) {
    const std::string_view piece = std::string_view(body).substr(pos, kPiece);
    ASSERT_TRUE(reader.Feed(piece));
    for (;;) {
      auto event = reader.Next();
      ASSERT_TRUE(event) << event.error().message;
      if (!*event) break;
      if ((*event)->kind == MultipartEvent::Kind::kData) {
        EXPECT_LE((*event)->data.size(), kPiece + kBoundary.size() + 6);
        got += (*event)->data;
      }
    }
    const size_t fed = std::min(pos + kPiece, head.size() + data.size());
    if (fed > head.size()) {
      EXPECT_GE(got.size() + kBoundary.size() + 4, fed - head.size()) << "after " << fed;
    }
  }
  ASSERT_TRUE(reader.Finish());
  EXPECT_TRUE(got == data);
}

TEST(MultipartReaderTest, PrefersFilenameStarAndUnescapesQuotedStrings) {
  const std::string body =
      "--b\r\n"
      "Content-Disposition: form-data; filename*=UTF-8''%E2%82%AC%20rates%2fq.txt; "
      "name=\"file\"; filename=\"fallback.txt\"\r\n\r\n"
      "1\r\n--b\r\n"
      "Content-Disposition: form-data; name=\"fi\\\"le\"; filename=\"a \\\"quoted\\\" \\\\ "
      "name;=.txt\"\r\n\r\n"
      "2\r\n--b\r\n"
      "Content-Disposition: form-data; name=file; filename*=utf-8'en'plain.txt\r\n"
      "Content-Type: application/octet-stream\r\n\r\n"
      "3\r\n--b--\r\n";
  const ReadBody read = Read(body, "b");
  ASSERT_FALSE(read.error) << read.error->message;
  EXPECT_EQ(read.parts, (std::vector<ReadPart>{
                            {"file", "\xe2\x82\xac rates/q.txt", "", "1"},
                            {"fi\"le", "a \"quoted\" \\ name;=.txt", "", "2"},
                            {"file", "plain.txt", "application/octet-stream", "3"},
                        }));
}

TEST(MultipartReaderTest, AMissingCloseDelimiterIsAnErrorAtFinish) {
  for (const std::string& body : std::vector<std::string>{
           "",
           "only a preamble\r\n",
           "--b\r\nContent-Disposition: form-data; name=file\r\n\r\npart of a file",
           "--b\r\nContent-Disposition: form-data; name=file\r\n\r\nthe file\r\n--b\r\n",
           "--b\r\nContent-Disposition: form-data; name=file\r\n\r\nthe file\r\n--b-",
           "--b\r\nContent-Disposition: form-data; name=file\r\n",
       }) {
    ReadBody read = Read(body, "b");
    ASSERT_TRUE(read.error) << body;
    EXPECT_EQ(read.error->code, ErrorCode::kInvalidRequest);
    EXPECT_NE(read.error->message.find("closing boundary"), std::string::npos)
        << read.error->message;
  }
}

std::optional<Error> ReadError(const std::string& body) {
  ReadBody whole = Read(std::vector<std::string>{body}, "b");
  ReadBody bytes = Read(Bytes(body), "b");
  EXPECT_EQ(whole.error.has_value(), bytes.error.has_value()) << body;
  if (whole.error && bytes.error) {
    EXPECT_EQ(whole.error->message, bytes.error->message);
  }
  return whole.error;
}

TEST(MultipartReaderTest, HeadersOver16KiBAreAnError) {
  const std::string disposition = "Content-Disposition: form-data; name=file\r\n";
  auto body = [&](size_t block) {
    const std::string pad = std::string(block - disposition.size() - 2 - 9, 'p');
    return "--b\r\n" + disposition + "X-Pad: " + pad + "\r\n\r\n" + "data\r\n--b--";
  };
  EXPECT_FALSE(ReadError(body(MultipartReader::kMaxHeaderBytes)));
  auto over = ReadError(body(MultipartReader::kMaxHeaderBytes + 1));
  ASSERT_TRUE(over);
  EXPECT_EQ(over->code, ErrorCode::kInvalidRequest);
  EXPECT_NE(over->message.find("part 1's headers are over 16 KiB"), std::string::npos)
      << over->message;
  // Headers that never end are refused at the limit, not read on.
  MultipartReader reader("b");
  ASSERT_TRUE(reader.Feed("--b\r\n"));
  ASSERT_TRUE(reader.Next());
  const std::string line = "X-Endless: " + std::string(1000, 'e') + "\r\n";
  bool failed = false;
  for (int i = 0; i < 100 && !failed; ++i) {
    ASSERT_TRUE(reader.Feed(line));
    auto event = reader.Next();
    failed = !event;
  }
  EXPECT_TRUE(failed);
  EXPECT_FALSE(reader.Finish());
}

TEST(MultipartReaderTest, MalformedPartHeadersAreErrors) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"Content-Type: text/plain\r\n", "no Content-Disposition"},
      {"", "no Content-Disposition"},
      {"Content-Disposition: attachment; filename=a\r\n", "not form-data"},
      {"Content-Disposition form-data; name=a\r\n", "is not name: value"},
      {"Bad Name: x\r\nContent-Disposition: form-data\r\n", "is not name: value"},
      {" folded: x\r\nContent-Disposition: form-data\r\n", "continuation line"},
      {std::string("Content-Disposition: form-data; name=\"a\0b\"\r\n", 44), "control character"},
      {"Content-Disposition: form-data; name=a\rb\r\n", "control character"},
      {"Content-Disposition: form-data; name=\"unclosed\r\n", "not closed"},
      {"Content-Disposition: form-data; name\r\n", "has no value"},
      {"Content-Disposition: form-data; filename=a; filename=b\r\n", "two filename"},
      {"Content-Disposition: form-data; filename*=UTF-8''a%2\r\n", "two hex digits"},
      {"Content-Disposition: form-data; filename*=UTF-8''a%00b\r\n", "NUL"},
      {"Content-Disposition: form-data; filename*=latin1''a\r\n", "not served"},
      {"Content-Disposition: form-data; filename*=a.txt\r\n", "charset'language'value"},
      {"Content-Disposition: form-data\r\nContent-Disposition: form-data\r\n", "two"},
  };
  for (const auto& [headers, want] : cases) {
    const std::string body = "--b\r\n" + headers + "\r\ndata\r\n--b--";
    auto error = ReadError(body);
    ASSERT_TRUE(error) << headers;
    EXPECT_EQ(error->code, ErrorCode::kInvalidRequest);
    EXPECT_NE(error->message.find(want), std::string::npos) << error->message;
    EXPECT_NE(error->message.find("part 1: "), std::string::npos) << error->message;
  }
}

TEST(MultipartReaderTest, BytesAfterABoundaryOnItsLineAreAnError) {
  for (std::string line : {"--b x\r\n", "--b\rx\n", "--b \r \n"}) {
    auto error = ReadError(line + "Content-Disposition: form-data\r\n\r\n\r\n--b--");
    ASSERT_TRUE(error) << line;
    EXPECT_EQ(error->code, ErrorCode::kInvalidRequest);
  }
  EXPECT_FALSE(ReadError("--b \t \r\nContent-Disposition: form-data\r\n\r\n\r\n--b--"));
}

TEST(MultipartReaderTest, AnErrorStaysTheAnswer) {
  MultipartReader reader("b");
  ASSERT_TRUE(reader.Feed("--b\r\nNo-Disposition: x\r\n\r\n"));
  auto event = reader.Next();
  ASSERT_FALSE(event);
  EXPECT_FALSE(reader.Next());
  EXPECT_FALSE(reader.Feed("more"));
  auto finished = reader.Finish();
  ASSERT_FALSE(finished);
  EXPECT_EQ(finished.error().message, event.error().message);
}

TEST(MultipartReaderTest, HostileBytesNeverCrashOrHang) {
  // Pieces of a valid body, shuffled and mutated: whatever the verdict, each call returns.
  const std::string body = SampleBody();
  std::mt19937 rng(99);
  for (int round = 0; round < 3000; ++round) {
    std::string mutated = body;
    for (int i = 0, n = 1 + rng() % 6; i < n; ++i) {
      const size_t at = rng() % mutated.size();
      switch (rng() % 3) {
        case 0:
          mutated[at] = static_cast<char>(rng());
          break;
        case 1:
          mutated.erase(at, rng() % 40);
          break;
        case 2:
          mutated.insert(at, body.substr(rng() % body.size(), rng() % 60));
          break;
      }
      if (mutated.empty()) mutated = "x";
    }
    std::vector<size_t> cuts(rng() % 6);
    for (size_t& cut : cuts) cut = rng() % (mutated.size() + 1);
    const ReadBody read = Read(Split(mutated, cuts));
    if (read.error) {
      EXPECT_EQ(read.error->code, ErrorCode::kInvalidRequest) << read.error->message;
    }
  }
}

// --- gzip

std::string Gzip(std::string_view data, int level = Z_DEFAULT_COMPRESSION) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, level, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, data.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

struct Inflated {
  std::string data;
  std::optional<Error> error;
  size_t largest = 0;  // the largest piece Next gave
};

Inflated Inflate(std::string_view gz, size_t piece, size_t max_bytes) {
  GzipInflater inflater;
  Inflated out;
  for (size_t pos = 0; pos < gz.size() || pos == 0; pos += piece) {
    std::string buffer(gz.substr(pos, piece));
    if (auto fed = inflater.Feed(buffer); !fed) {
      out.error = fed.error();
      return out;
    }
    for (;;) {
      auto next = inflater.Next(max_bytes);
      if (!next) {
        out.error = next.error();
        return out;
      }
      if (!*next) break;
      EXPECT_FALSE((*next)->empty());
      out.largest = std::max(out.largest, (*next)->size());
      out.data += **next;
    }
    std::fill(buffer.begin(), buffer.end(), '#');
    if (gz.empty()) break;
  }
  if (auto finished = inflater.Finish(); !finished) out.error = finished.error();
  return out;
}

std::string SomeData(size_t size) {
  std::mt19937 rng(size);
  std::string data;
  while (data.size() < size) {
    // Runs and noise, so that deflate has both kinds of block.
    if (rng() % 2) {
      data.append(rng() % 300, static_cast<char>(rng()));
    } else {
      for (int i = rng() % 300; i > 0; --i) data += static_cast<char>(rng());
    }
  }
  data.resize(size);
  return data;
}

TEST(GzipInflaterTest, RoundTripsInBoundedPieces) {
  const std::string data = SomeData(300 * 1024);
  const std::string gz = Gzip(data);
  for (size_t piece : {size_t{7}, size_t{4096}, gz.size()}) {
    for (size_t max : {size_t{1}, size_t{1000}, size_t{64 * 1024}}) {
      if (piece == 7 && max == 1) continue;  // slow under sanitizers, and no different
      const Inflated got = Inflate(gz, piece, max);
      ASSERT_FALSE(got.error) << got.error->message;
      EXPECT_TRUE(got.data == data) << "piece " << piece << " max " << max;
      EXPECT_LE(got.largest, max);
    }
  }
  const std::string small = SomeData(20 * 1024);
  const Inflated bytes = Inflate(Gzip(small), 1, 100);
  ASSERT_FALSE(bytes.error) << bytes.error->message;
  EXPECT_TRUE(bytes.data == small);
  EXPECT_LE(bytes.largest, 100u);
}

TEST(GzipInflaterTest, EmptyContentAndConcatenatedMembers) {
  const Inflated empty = Inflate(Gzip(""), 3, 10);
  ASSERT_FALSE(empty.error) << empty.error->message;
  EXPECT_EQ(empty.data, "");
  const std::string two = Gzip("first member, ") + Gzip("") + Gzip("second member");
  for (size_t piece : {size_t{1}, size_t{5}, two.size()}) {
    const Inflated got = Inflate(two, piece, 4);
    ASSERT_FALSE(got.error) << got.error->message;
    EXPECT_EQ(got.data, "first member, second member");
  }
}

TEST(GzipInflaterTest, ATruncatedStreamIsAnErrorAtFinish) {
  const std::string gz = Gzip(SomeData(4000));
  for (size_t cut = 0; cut < gz.size(); ++cut) {
    const Inflated got = Inflate(std::string_view(gz).substr(0, cut), 64, 512);
    ASSERT_TRUE(got.error) << "cut at " << cut;
    EXPECT_EQ(got.error->code, ErrorCode::kInvalidRequest);
    EXPECT_TRUE(got.error->message.starts_with("the gzip body is corrupt: ")) << got.error->message;
  }
  // And a member cut short after a whole one.
  const std::string two = Gzip("whole") + gz.substr(0, gz.size() / 2);
  EXPECT_TRUE(Inflate(two, 100, 100).error);
}

TEST(GzipInflaterTest, ACorruptStreamIsAnError) {
  const std::string gz = Gzip(SomeData(4000));
  auto corrupt = [&](size_t at, char x) {
    std::string bad = gz;
    bad[at] = static_cast<char>(bad[at] ^ x);
    return Inflate(bad, 1000, 1000);
  };
  for (const Inflated& got : {corrupt(0, 1), corrupt(gz.size() - 6, 0x40),
                              corrupt(gz.size() - 2, 1), corrupt(gz.size() / 2, 0x55)}) {
    ASSERT_TRUE(got.error);
    EXPECT_EQ(got.error->code, ErrorCode::kInvalidRequest);
    EXPECT_TRUE(got.error->message.starts_with("the gzip body is corrupt: ")) << got.error->message;
  }
  // Bytes after the last member must be another member.
  const Inflated trailing = Inflate(gz + "trailing", 1000, 1000);
  ASSERT_TRUE(trailing.error);
  EXPECT_EQ(trailing.error->code, ErrorCode::kInvalidRequest);
  const Inflated plain = Inflate("not gzip at all", 1000, 1000);
  ASSERT_TRUE(plain.error);
  EXPECT_EQ(plain.error->code, ErrorCode::kInvalidRequest);
  // An error stays the answer.
  GzipInflater inflater;
  ASSERT_TRUE(inflater.Feed("not gzip"));
  EXPECT_FALSE(inflater.Next(10));
  EXPECT_FALSE(inflater.Next(10));
  EXPECT_FALSE(inflater.Finish());
}

TEST(GzipInflaterTest, AnEmptyBodyIsAnError) {
  const Inflated got = Inflate("", 10, 10);
  ASSERT_TRUE(got.error);
  EXPECT_EQ(got.error->code, ErrorCode::kInvalidRequest);
  GzipInflater never_fed;
  EXPECT_FALSE(never_fed.Finish());
}

TEST(GzipInflaterTest, A50MBExpansionComesInPiecesNoLargerThanAsked) {
  const std::string data(50 << 20, '\0');
  const std::string gz = Gzip(data, Z_BEST_COMPRESSION);
  ASSERT_LT(gz.size(), 100u * 1024);
  constexpr size_t kMax = 64 * 1024;
  GzipInflater inflater;
  ASSERT_TRUE(inflater.Feed(gz));  // the whole body at once: Next still bounds each piece
  size_t total = 0;
  size_t pieces = 0;
  for (;;) {
    auto next = inflater.Next(kMax);
    ASSERT_TRUE(next) << next.error().message;
    if (!*next) break;
    ASSERT_LE((*next)->size(), kMax);
    ASSERT_TRUE(std::all_of((*next)->begin(), (*next)->end(), [](char c) { return c == 0; }));
    total += (*next)->size();
    ++pieces;
  }
  EXPECT_TRUE(inflater.Finish());
  EXPECT_EQ(total, data.size());
  EXPECT_GE(pieces, data.size() / kMax);
}

TEST(GzipInflaterTest, ZeroMaxBytesIsOne) {
  GzipInflater inflater;
  const std::string gz = Gzip("ab");
  ASSERT_TRUE(inflater.Feed(gz));
  auto next = inflater.Next(0);
  ASSERT_TRUE(next);
  ASSERT_TRUE(*next);
  EXPECT_EQ(**next, "a");
}

}  // namespace
}  // namespace sandstream::api::e2b
