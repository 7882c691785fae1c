// Unit tests of OutputLog: sequence numbers shared by both streams, the bounded window and its
// eviction, cursor reads with exact gaps, tails, restoring from the store, listeners, holds
// (flow control: Full, room again, stalled and parked readers), its storage, and a persistent
// log adopted after its writer was killed at each step of taking output from a pipe.
#include "process/output_log.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/utf8.h"
#include "platform/fd.h"

namespace sandstream {
namespace {

std::vector<uint64_t> Seqs(const OutputLog::Slice& slice) {
  std::vector<uint64_t> seqs;
  for (const LogEntry* e : slice.entries) seqs.push_back(e->seq);
  return seqs;
}

std::string Joined(const OutputLog::Slice& slice) {
  std::string out;
  for (const LogEntry* e : slice.entries) out += e->data;
  return out;
}

StoredEntry Entry(uint64_t seq, EntryKind kind, std::string data, uint64_t offset) {
  StoredEntry e;
  e.seq = seq;
  e.kind = kind;
  e.data = std::move(data);
  e.offset = offset;
  e.time = FromUnixMillis(1700000000000 + static_cast<int64_t>(seq));
  return e;
}

class CountingListener : public OutputLog::Listener {
 public:
  explicit CountingListener(const OutputLog* log = nullptr) : log_(log) {}
  void OnAppend() override {
    ++calls;
    if (log_ != nullptr) seen_last_seq.push_back(log_->last_seq());
  }
  int calls = 0;
  std::vector<uint64_t> seen_last_seq;

 private:
  const OutputLog* log_;
};

TEST(OutputLogTest, StartsEmpty) {
  OutputLog log;
  EXPECT_EQ(log.last_seq(), 0u);
  EXPECT_EQ(log.next_seq(), 1u);
  EXPECT_EQ(log.first_retained_seq(), 1u);
  EXPECT_FALSE(log.ended());
  EXPECT_EQ(log.total_bytes(), 0u);
  const auto slice = log.Read(0, 1000);
  EXPECT_FALSE(slice.gap.has_value());
  EXPECT_TRUE(slice.entries.empty());
}

TEST(OutputLogTest, SequenceNumbersAreSharedByBothStreams) {
  OutputLog log;
  const SystemTime t = FromUnixMillis(1700000000123);
  EXPECT_EQ(log.Append(EntryKind::kStart, {}, t), 1u);
  EXPECT_EQ(log.Append(EntryKind::kStdout, "ab"), 2u);
  EXPECT_EQ(log.Append(EntryKind::kStderr, "cde"), 3u);
  EXPECT_EQ(log.Append(EntryKind::kStdout, "f"), 4u);
  EXPECT_EQ(log.Append(EntryKind::kExit, {}), 5u);
  EXPECT_EQ(log.last_seq(), 5u);
  EXPECT_EQ(log.next_seq(), 6u);
  EXPECT_TRUE(log.ended());
  EXPECT_EQ(log.total_bytes(), 6u);
  EXPECT_EQ(log.retained_bytes(), 6u);

  const auto& entries = log.entries();
  ASSERT_EQ(entries.size(), 5u);
  const EntryKind kinds[] = {EntryKind::kStart, EntryKind::kStdout, EntryKind::kStderr,
                             EntryKind::kStdout, EntryKind::kExit};
  const uint64_t offsets[] = {0, 0, 2, 5, 6};
  const char* data[] = {"", "ab", "cde", "f", ""};
  for (size_t i = 0; i < entries.size(); ++i) {
    EXPECT_EQ(entries[i].seq, i + 1);
    EXPECT_EQ(entries[i].kind, kinds[i]) << i;
    EXPECT_EQ(entries[i].offset, offsets[i]) << i;
    EXPECT_EQ(entries[i].data, data[i]) << i;
  }
  EXPECT_EQ(entries[0].time, t);
}

TEST(OutputLogTest, KeepsBytesExactlyIncludingNulAndInvalidUtf8) {
  OutputLog log;
  const std::string bytes("a\0b\xff\xc3", 5);
  log.Append(EntryKind::kStdout, bytes);
  ASSERT_EQ(log.entries().size(), 1u);
  EXPECT_EQ(log.entries()[0].data, bytes);
  EXPECT_EQ(log.total_bytes(), 5u);
}

TEST(OutputLogTest, AppendAfterExitIsIgnored) {
  OutputLog log;
  log.Append(EntryKind::kStart, {});
  log.Append(EntryKind::kExit, {});
  CountingListener listener;
  log.AddListener(&listener);
  EXPECT_EQ(log.Append(EntryKind::kStdout, "late"), 0u);
  EXPECT_EQ(log.Append(EntryKind::kExit, {}), 0u);
  EXPECT_EQ(log.last_seq(), 2u);
  EXPECT_EQ(log.entries().size(), 2u);
  EXPECT_EQ(log.total_bytes(), 0u);
  EXPECT_EQ(listener.calls, 0);
  log.RemoveListener(&listener);
}

TEST(OutputLogTest, EvictsOldestEntriesBeyondTheByteLimit) {
  OutputLog log(LogLimits{.max_bytes = 10, .max_entries = 100});
  log.Append(EntryKind::kStart, {});
  log.Append(EntryKind::kStdout, "aaaa");  // 2
  log.Append(EntryKind::kStdout, "bbbb");  // 3
  EXPECT_EQ(log.first_retained_seq(), 1u);
  EXPECT_EQ(log.retained_bytes(), 8u);
  log.Append(EntryKind::kStderr, "cccc");  // 4: 12 bytes, so start and 2 go
  EXPECT_EQ(log.first_retained_seq(), 3u);
  EXPECT_EQ(log.retained_bytes(), 8u);
  EXPECT_EQ(log.evicted_entries(), 2u);
  EXPECT_EQ(log.evicted_bytes(), 4u);
  EXPECT_EQ(log.total_bytes(), 12u);
  log.Append(EntryKind::kStdout, "dd");  // 5: exactly 10 retained, nothing goes
  EXPECT_EQ(log.first_retained_seq(), 3u);
  EXPECT_EQ(log.retained_bytes(), 10u);
  log.Append(EntryKind::kExit, {});  // 6: no bytes, nothing goes
  EXPECT_EQ(log.first_retained_seq(), 3u);
  EXPECT_EQ(log.entries().size(), 4u);
  EXPECT_EQ(log.last_seq(), 6u);
}

TEST(OutputLogTest, EvictsOldestEntriesBeyondTheEntryLimit) {
  OutputLog log(LogLimits{.max_bytes = 1 << 20, .max_entries = 3});
  log.Append(EntryKind::kStart, {});
  for (int i = 0; i < 5; ++i) log.Append(EntryKind::kStdout, "x");
  EXPECT_EQ(log.entries().size(), 3u);
  EXPECT_EQ(log.first_retained_seq(), 4u);
  EXPECT_EQ(log.last_seq(), 6u);
  EXPECT_EQ(log.evicted_entries(), 3u);
  EXPECT_EQ(log.evicted_bytes(), 2u);  // start had no bytes
  EXPECT_EQ(log.retained_bytes(), 3u);
}

TEST(OutputLogTest, NeverEvictsTheNewestEntry) {
  OutputLog log(LogLimits{.max_bytes = 5, .max_entries = 1});
  log.Append(EntryKind::kStart, {});
  log.Append(EntryKind::kStdout, std::string(100, 'x'));
  ASSERT_EQ(log.entries().size(), 1u);
  EXPECT_EQ(log.entries().front().seq, 2u);
  EXPECT_EQ(log.retained_bytes(), 100u);
  log.Append(EntryKind::kExit, {});
  ASSERT_EQ(log.entries().size(), 1u);
  EXPECT_EQ(log.entries().front().kind, EntryKind::kExit);
  EXPECT_EQ(log.retained_bytes(), 0u);
  EXPECT_EQ(log.evicted_bytes(), 100u);
  // The exit is always there to read, even for a reader far behind.
  const auto slice = log.Read(0, 1000, 0);
  ASSERT_TRUE(slice.gap.has_value());
  EXPECT_EQ(slice.gap->from_seq, 1u);
  EXPECT_EQ(slice.gap->to_seq, 2u);
  EXPECT_EQ(slice.gap->bytes, std::optional<uint64_t>(100));
  EXPECT_EQ(Seqs(slice), std::vector<uint64_t>({3}));
}

TEST(OutputLogTest, ReadReturnsEntriesAfterTheCursor) {
  OutputLog log;
  log.Append(EntryKind::kStart, {});
  log.Append(EntryKind::kStdout, "a");
  log.Append(EntryKind::kStderr, "b");
  log.Append(EntryKind::kExit, {});
  EXPECT_EQ(Seqs(log.Read(0, 1000)), std::vector<uint64_t>({1, 2, 3, 4}));
  EXPECT_EQ(Seqs(log.Read(1, 1000)), std::vector<uint64_t>({2, 3, 4}));
  EXPECT_EQ(Seqs(log.Read(3, 1000)), std::vector<uint64_t>({4}));
  EXPECT_TRUE(log.Read(4, 1000).entries.empty());
  EXPECT_TRUE(log.Read(99, 1000).entries.empty());
  EXPECT_FALSE(log.Read(99, 1000).gap.has_value());
  for (uint64_t after = 0; after <= 5; ++after) {
    EXPECT_FALSE(log.Read(after, 1000, 0).gap.has_value()) << after;
  }
}

TEST(OutputLogTest, ReadStopsAtTheByteBudgetButReturnsAtLeastOneEntry) {
  OutputLog log;
  log.Append(EntryKind::kStart, {});       // 1
  log.Append(EntryKind::kStdout, "aaaa");  // 2
  log.Append(EntryKind::kStdout, "bbbb");  // 3
  log.Append(EntryKind::kStdout, "cccc");  // 4
  log.Append(EntryKind::kExit, {});        // 5
  EXPECT_EQ(Seqs(log.Read(0, 8)), std::vector<uint64_t>({1, 2, 3}));
  EXPECT_EQ(Seqs(log.Read(0, 7)), std::vector<uint64_t>({1, 2}));
  EXPECT_EQ(Seqs(log.Read(0, 0)), std::vector<uint64_t>({1}));
  EXPECT_EQ(Seqs(log.Read(1, 0)), std::vector<uint64_t>({2}));
  EXPECT_EQ(Seqs(log.Read(1, 3)), std::vector<uint64_t>({2}));
  EXPECT_EQ(Seqs(log.Read(3, 4)), std::vector<uint64_t>({4, 5}));
  EXPECT_EQ(Seqs(log.Read(0, 12)), std::vector<uint64_t>({1, 2, 3, 4, 5}));
}

TEST(OutputLogTest, BatchedReadsReproduceTheWholeLog) {
  std::mt19937 rng(5);
  OutputLog log;
  std::string expected;
  log.Append(EntryKind::kStart, {});
  for (int i = 0; i < 200; ++i) {
    std::string chunk(1 + rng() % 50, static_cast<char>('a' + i % 26));
    expected += chunk;
    log.Append(i % 3 == 0 ? EntryKind::kStderr : EntryKind::kStdout, chunk);
  }
  log.Append(EntryKind::kExit, {});
  for (uint64_t budget : {0u, 1u, 37u, 100u, 1000u}) {
    uint64_t after = 0;
    std::string got;
    uint64_t expected_seq = 1;
    for (;;) {
      const auto slice = log.Read(after, budget, got.size());
      ASSERT_FALSE(slice.gap.has_value());
      if (slice.entries.empty()) break;
      uint64_t bytes = 0;
      for (const LogEntry* e : slice.entries) {
        ASSERT_EQ(e->seq, expected_seq++);
        ASSERT_EQ(e->offset, got.size() + bytes);
        bytes += e->data.size();
      }
      if (slice.entries.size() > 1) {
        ASSERT_LE(bytes, budget);
      }
      got += Joined(slice);
      after = slice.entries.back()->seq;
    }
    EXPECT_EQ(got, expected) << "budget " << budget;
    EXPECT_EQ(after, log.last_seq()) << "budget " << budget;
  }
}

TEST(OutputLogTest, ReadReportsTheGapOfEvictedEntries) {
  OutputLog log(LogLimits{.max_bytes = 10, .max_entries = 100});
  log.Append(EntryKind::kStart, {});      // 1, offset 0
  log.Append(EntryKind::kStdout, "aaa");  // 2, offset 0
  log.Append(EntryKind::kStdout, "bbb");  // 3, offset 3
  log.Append(EntryKind::kStderr, "ccc");  // 4, offset 6
  log.Append(EntryKind::kStdout, "ddd");  // 5, offset 9: evicts 1 and 2
  log.Append(EntryKind::kStdout, "eee");  // 6, offset 12: evicts 3
  ASSERT_EQ(log.first_retained_seq(), 4u);

  auto slice = log.Read(0, 1000);
  ASSERT_TRUE(slice.gap.has_value());
  EXPECT_EQ(slice.gap->from_seq, 1u);
  EXPECT_EQ(slice.gap->to_seq, 3u);
  // A reader from the start (or just after `start`, seq 1) is at offset 0 without saying so.
  EXPECT_EQ(slice.gap->bytes, std::optional<uint64_t>(6));
  EXPECT_EQ(Seqs(slice), std::vector<uint64_t>({4, 5, 6}));
  EXPECT_EQ(log.Read(1, 1000).gap->bytes, std::optional<uint64_t>(6));
  // Further in, the log remembers where recently evicted entries ended.
  EXPECT_EQ(log.Read(2, 1000).gap->bytes, std::optional<uint64_t>(3));

  slice = log.Read(0, 1000, 0);
  ASSERT_TRUE(slice.gap.has_value());
  EXPECT_EQ(slice.gap->bytes, std::optional<uint64_t>(6));

  // A reader that got entry 2 (its offset is then 3) missed only entry 3.
  slice = log.Read(2, 1000, 3);
  ASSERT_TRUE(slice.gap.has_value());
  EXPECT_EQ(slice.gap->from_seq, 3u);
  EXPECT_EQ(slice.gap->to_seq, 3u);
  EXPECT_EQ(slice.gap->bytes, std::optional<uint64_t>(3));
  EXPECT_EQ(Seqs(slice), std::vector<uint64_t>({4, 5, 6}));

  // A reader right before the window has no gap.
  slice = log.Read(3, 1000, 6);
  EXPECT_FALSE(slice.gap.has_value());
  EXPECT_EQ(Seqs(slice), std::vector<uint64_t>({4, 5, 6}));

  // The gap comes with the first entries of the window, within the byte budget.
  slice = log.Read(1, 3, 0);
  ASSERT_TRUE(slice.gap.has_value());
  EXPECT_EQ(slice.gap->from_seq, 2u);
  EXPECT_EQ(Seqs(slice), std::vector<uint64_t>({4}));
}

// Random writes against random limits; after every append the window's bookkeeping holds,
// and a reader at any earlier point learns exactly which entries and how many bytes it missed.
TEST(OutputLogTest, WindowInvariantsHoldUnderRandomAppends) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 60; ++trial) {
    const LogLimits limits{.max_bytes = 1 + rng() % 200, .max_entries = 1 + rng() % 20};
    OutputLog log(limits);
    std::vector<uint64_t> offset_after;  // offset_after[seq] = output bytes up to seq
    offset_after.push_back(0);
    log.Append(EntryKind::kStart, {});
    offset_after.push_back(0);
    const int appends = 1 + static_cast<int>(rng() % 80);
    for (int i = 0; i < appends; ++i) {
      const std::string chunk(rng() % 60, 'x');
      log.Append(rng() % 2 ? EntryKind::kStdout : EntryKind::kStderr, chunk);
      offset_after.push_back(offset_after.back() + chunk.size());

      const auto& entries = log.entries();
      ASSERT_FALSE(entries.empty());
      uint64_t retained = 0;
      for (size_t k = 0; k < entries.size(); ++k) {
        ASSERT_EQ(entries[k].seq, log.first_retained_seq() + k);
        ASSERT_EQ(entries[k].offset, offset_after[entries[k].seq - 1]);
        retained += entries[k].data.size();
      }
      ASSERT_EQ(entries.back().seq, log.last_seq());
      ASSERT_EQ(log.retained_bytes(), retained);
      ASSERT_EQ(log.total_bytes(), offset_after.back());
      ASSERT_EQ(log.evicted_bytes() + retained, log.total_bytes());
      ASSERT_EQ(log.evicted_entries() + entries.size(), log.last_seq());
      ASSERT_LE(entries.size(), limits.max_entries);
      if (entries.size() > 1) {
        ASSERT_LE(retained, limits.max_bytes);
      }
      // Evicting one entry fewer would have broken a limit.
      if (log.evicted_entries() > 0) {
        const uint64_t first = log.first_retained_seq();
        const uint64_t with_previous =
            retained + (offset_after[first - 1] - offset_after[first - 2]);
        ASSERT_TRUE(with_previous > limits.max_bytes || entries.size() + 1 > limits.max_entries);
      }

      for (uint64_t after = 0; after <= log.last_seq(); ++after) {
        const auto slice = log.Read(after, UINT64_MAX, offset_after[after]);
        if (after + 1 < log.first_retained_seq()) {
          ASSERT_TRUE(slice.gap.has_value());
          ASSERT_EQ(slice.gap->from_seq, after + 1);
          ASSERT_EQ(slice.gap->to_seq, log.first_retained_seq() - 1);
          ASSERT_EQ(slice.gap->bytes,
                    std::optional<uint64_t>(offset_after[log.first_retained_seq() - 1] -
                                            offset_after[after]));
          ASSERT_EQ(slice.entries.size(), entries.size());
        } else {
          ASSERT_FALSE(slice.gap.has_value());
          ASSERT_EQ(slice.entries.size(), log.last_seq() - after);
        }
      }
    }
  }
}

TEST(OutputLogTest, SeqBeforeTailCountsChunksOfBothStreams) {
  OutputLog log;
  log.Append(EntryKind::kStart, {});    // 1
  log.Append(EntryKind::kStdout, "a");  // 2
  log.Append(EntryKind::kStderr, "b");  // 3
  log.Append(EntryKind::kStdout, "c");  // 4
  EXPECT_EQ(log.SeqBeforeTail(0), 4u);
  EXPECT_EQ(log.SeqBeforeTail(1), 3u);
  EXPECT_EQ(log.SeqBeforeTail(2), 2u);
  EXPECT_EQ(log.SeqBeforeTail(3), 0u);  // everything, start included
  EXPECT_EQ(log.SeqBeforeTail(1000), 0u);
  log.Append(EntryKind::kExit, {});     // 5
  EXPECT_EQ(log.SeqBeforeTail(0), 4u);  // only the exit follows
  EXPECT_EQ(log.SeqBeforeTail(1), 3u);
  EXPECT_EQ(Seqs(log.Read(log.SeqBeforeTail(2), 1000)), std::vector<uint64_t>({3, 4, 5}));
}

TEST(OutputLogTest, SeqBeforeTailStaysInsideTheWindow) {
  OutputLog log(LogLimits{.max_bytes = 1 << 20, .max_entries = 3});
  log.Append(EntryKind::kStart, {});
  for (int i = 0; i < 6; ++i) log.Append(EntryKind::kStdout, "x");  // 2..7
  ASSERT_EQ(log.first_retained_seq(), 5u);
  EXPECT_EQ(log.SeqBeforeTail(2), 5u);
  EXPECT_EQ(log.SeqBeforeTail(3), 4u);
  EXPECT_EQ(log.SeqBeforeTail(50), 4u);
  const auto slice = log.Read(log.SeqBeforeTail(50), 1000);
  EXPECT_FALSE(slice.gap.has_value());
  EXPECT_EQ(Seqs(slice), std::vector<uint64_t>({5, 6, 7}));
}

TEST(OutputLogTest, ReadAfterSeqBeforeTailGivesExactlyTheLastChunks) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 40; ++trial) {
    OutputLog log(LogLimits{.max_bytes = 1 << 20, .max_entries = 1 + rng() % 30});
    log.Append(EntryKind::kStart, {});
    const int chunks = static_cast<int>(rng() % 40);
    for (int i = 0; i < chunks; ++i) {
      log.Append(rng() % 2 ? EntryKind::kStdout : EntryKind::kStderr, "z");
    }
    const bool exited = rng() % 2 == 0;
    if (exited) log.Append(EntryKind::kExit, {});
    size_t retained_chunks = 0;
    for (const LogEntry& e : log.entries()) {
      retained_chunks += e.kind == EntryKind::kStdout || e.kind == EntryKind::kStderr;
    }
    for (uint64_t n = 0; n <= 45; ++n) {
      const auto slice = log.Read(log.SeqBeforeTail(n), UINT64_MAX);
      ASSERT_FALSE(slice.gap.has_value());
      size_t got_chunks = 0;
      for (const LogEntry* e : slice.entries) {
        got_chunks += e->kind == EntryKind::kStdout || e->kind == EntryKind::kStderr;
      }
      ASSERT_EQ(got_chunks, std::min<size_t>(n, retained_chunks)) << "n " << n;
      if (!slice.entries.empty()) {
        ASSERT_EQ(slice.entries.back()->seq, log.last_seq());
      }
      if (exited) {
        ASSERT_FALSE(slice.entries.empty());
      }
    }
  }
}

TEST(OutputLogTest, RestoreKeepsSeqsAndOffsets) {
  OutputLog log;
  std::vector<StoredEntry> tail;
  tail.push_back(Entry(5, EntryKind::kStdout, "hello", 100));
  tail.push_back(Entry(6, EntryKind::kStderr, "oops", 105));
  tail.push_back(Entry(7, EntryKind::kExit, "", 109));
  log.Restore(std::move(tail));
  EXPECT_EQ(log.first_retained_seq(), 5u);
  EXPECT_EQ(log.last_seq(), 7u);
  EXPECT_EQ(log.next_seq(), 8u);
  EXPECT_TRUE(log.ended());
  EXPECT_EQ(log.total_bytes(), 109u);
  EXPECT_EQ(log.retained_bytes(), 9u);
  ASSERT_EQ(log.entries().size(), 3u);
  EXPECT_EQ(log.entries()[0].time, FromUnixMillis(1700000000005));
  EXPECT_EQ(log.entries()[1].kind, EntryKind::kStderr);

  auto slice = log.Read(0, 1000, 0);
  ASSERT_TRUE(slice.gap.has_value());
  EXPECT_EQ(slice.gap->from_seq, 1u);
  EXPECT_EQ(slice.gap->to_seq, 4u);
  EXPECT_EQ(slice.gap->bytes, std::optional<uint64_t>(100));
  EXPECT_EQ(Seqs(slice), std::vector<uint64_t>({5, 6, 7}));
  EXPECT_EQ(Joined(slice), "hellooops");

  slice = log.Read(6, 1000);
  EXPECT_FALSE(slice.gap.has_value());
  EXPECT_EQ(Seqs(slice), std::vector<uint64_t>({7}));
  EXPECT_EQ(log.Append(EntryKind::kStdout, "more"), 0u);
}

TEST(OutputLogTest, RestoreOfAnUnfinishedTailContinuesItsSequence) {
  OutputLog log;
  std::vector<StoredEntry> tail;
  tail.push_back(Entry(1, EntryKind::kStart, "", 0));
  tail.push_back(Entry(2, EntryKind::kStdout, "ab", 0));
  log.Restore(std::move(tail));
  EXPECT_FALSE(log.ended());
  EXPECT_EQ(log.Append(EntryKind::kStdout, "cd"), 3u);
  ASSERT_EQ(log.entries().size(), 3u);
  EXPECT_EQ(log.entries()[2].offset, 2u);
  EXPECT_EQ(log.total_bytes(), 4u);
  EXPECT_EQ(log.retained_bytes(), 4u);
}

TEST(OutputLogTest, RestoreSkipsEntriesThatDoNotAdvanceTheSequence) {
  OutputLog log;
  std::vector<StoredEntry> tail;
  tail.push_back(Entry(3, EntryKind::kStdout, "a", 10));
  tail.push_back(Entry(3, EntryKind::kStdout, "dup", 10));
  tail.push_back(Entry(2, EntryKind::kStdout, "old", 5));
  tail.push_back(Entry(4, EntryKind::kStdout, "b", 11));
  log.Restore(std::move(tail));
  ASSERT_EQ(log.entries().size(), 2u);
  EXPECT_EQ(log.entries()[0].data, "a");
  EXPECT_EQ(log.entries()[1].data, "b");
  EXPECT_EQ(log.last_seq(), 4u);
  EXPECT_EQ(log.total_bytes(), 12u);
  EXPECT_EQ(log.retained_bytes(), 2u);
}

TEST(OutputLogTest, ListenersAreToldOfEveryAppendAfterItIsReadable) {
  OutputLog log(LogLimits{.max_bytes = 4, .max_entries = 100});
  CountingListener a(&log), b(&log);
  log.AddListener(&a);
  log.Append(EntryKind::kStart, {});
  log.AddListener(&b);
  log.Append(EntryKind::kStdout, "abc");
  log.Append(EntryKind::kStdout, "def");  // evicts 1 and 2
  EXPECT_EQ(a.calls, 3);
  EXPECT_EQ(a.seen_last_seq, std::vector<uint64_t>({1, 2, 3}));
  EXPECT_EQ(b.calls, 2);
  EXPECT_EQ(b.seen_last_seq, std::vector<uint64_t>({2, 3}));
  log.RemoveListener(&a);
  log.Append(EntryKind::kExit, {});
  EXPECT_EQ(a.calls, 3);
  EXPECT_EQ(b.calls, 3);
  log.RemoveListener(&b);
}

TEST(OutputLogTest, AListenerMayRemoveItselfWhileBeingTold) {
  class OneShot : public OutputLog::Listener {
   public:
    explicit OneShot(OutputLog& log) : log_(log) {}
    void OnAppend() override {
      ++calls;
      log_.RemoveListener(this);
    }
    int calls = 0;

   private:
    OutputLog& log_;
  };
  OutputLog log;
  OneShot first(log), last(log);
  CountingListener middle;
  log.AddListener(&first);
  log.AddListener(&middle);
  log.AddListener(&last);
  log.Append(EntryKind::kStart, {});
  EXPECT_EQ(first.calls, 1);
  EXPECT_EQ(middle.calls, 1);
  EXPECT_EQ(last.calls, 1);
  log.Append(EntryKind::kStdout, "x");
  EXPECT_EQ(first.calls, 1);
  EXPECT_EQ(middle.calls, 2);
  EXPECT_EQ(last.calls, 1);
  log.RemoveListener(&middle);
}

// ---- flow control ----

std::string Bytes(size_t n, char c = 'x') {
  return std::string(n, c);
}

TEST(OutputLogHoldTest, NoHoldNeverFull) {
  OutputLog log(LogLimits{100, 1000});
  for (int i = 0; i < 50; ++i) log.Append(EntryKind::kStdout, Bytes(10));
  EXPECT_FALSE(log.Full());
  EXPECT_LE(log.retained_bytes(), 100u);
}

TEST(OutputLogHoldTest, AHoldKeepsWhatItsReaderHasNotTakenAndFillsTheLog) {
  OutputLog log(LogLimits{100, 1000});
  int space = 0;
  log.set_on_space([&] { ++space; });
  const auto hold = log.AddHold(0);
  for (int i = 0; i < 10; ++i) log.Append(EntryKind::kStdout, Bytes(10));  // seqs 1..10
  EXPECT_FALSE(log.Full());                                                // exactly at the limit
  log.Append(EntryKind::kStdout, Bytes(10));  // 11: over, and the reader needs seq 1
  EXPECT_TRUE(log.Full());
  EXPECT_EQ(log.first_retained_seq(), 1u) << "nothing the reader has not taken is evicted";
  EXPECT_EQ(log.retained_bytes(), 110u);
  // The reader takes five entries: they may go, and the writer is told there is room.
  log.MoveHold(hold, 5, 5);
  EXPECT_FALSE(log.Full());
  EXPECT_EQ(space, 1);
  EXPECT_EQ(log.first_retained_seq(), 2u);
  EXPECT_EQ(log.evicted_entries(), 1u);
  log.RemoveHold(hold);
  EXPECT_FALSE(log.Full());
  EXPECT_EQ(space, 1) << "room is told once per full episode";
}

TEST(OutputLogHoldTest, WhatIsKeptForAResumeNeverStopsACaughtUpReader) {
  OutputLog log(LogLimits{100, 1000});
  const auto hold = log.AddHold(0);
  for (int i = 0; i < 12; ++i) log.Append(EntryKind::kStdout, Bytes(10));
  ASSERT_TRUE(log.Full());
  // The reader took everything but keeps it all for a resume: the log is over its limits, yet
  // the writer must not wait for a reader that waits for it.
  log.MoveHold(hold, 0, log.last_seq());
  EXPECT_FALSE(log.Full());
  // One more entry makes it behind again: full.
  log.Append(EntryKind::kStdout, Bytes(10));
  EXPECT_TRUE(log.Full());
}

TEST(OutputLogHoldTest, AnEntryLargerThanTheWindowDoesNotDeadlock) {
  OutputLog log(LogLimits{64, 1000});
  const auto hold = log.AddHold(0);
  log.Append(EntryKind::kStdout, Bytes(300));  // 1
  EXPECT_TRUE(log.Full());
  log.MoveHold(hold, 0, 1);
  EXPECT_FALSE(log.Full());
  log.Append(EntryKind::kStdout, Bytes(300));  // 2
  log.MoveHold(hold, 1, 2);                    // keeps 2 for a resume; 1 may go
  EXPECT_FALSE(log.Full());
  EXPECT_EQ(log.first_retained_seq(), 2u);
}

TEST(OutputLogHoldTest, TheEntryLimitHoldsToo) {
  OutputLog log(LogLimits{1u << 20, 4});
  const auto hold = log.AddHold(0);
  for (int i = 0; i < 5; ++i) log.Append(EntryKind::kStdout, "a");
  EXPECT_TRUE(log.Full());
  log.MoveHold(hold, 1, 1);
  EXPECT_FALSE(log.Full());
  EXPECT_EQ(log.first_retained_seq(), 2u);
}

TEST(OutputLogHoldTest, TheSlowestOfSeveralHoldsSetsThePace) {
  OutputLog log(LogLimits{50, 1000});
  const auto fast = log.AddHold(0);
  const auto slow = log.AddHold(0);
  for (int i = 0; i < 6; ++i) log.Append(EntryKind::kStdout, Bytes(10));
  ASSERT_TRUE(log.Full());
  log.MoveHold(fast, 6, 6);
  EXPECT_TRUE(log.Full()) << "the slow reader still needs seq 1";
  log.MoveHold(slow, 3, 3);
  EXPECT_FALSE(log.Full());
  EXPECT_EQ(log.first_retained_seq(), 2u);
}

TEST(OutputLogHoldTest, StalledHoldsAreDroppedAndTheirReadersSeeAGap) {
  OutputLog log(LogLimits{50, 1000});
  int space = 0;
  log.set_on_space([&] { ++space; });
  const auto stalled = log.AddHold(0);
  const auto reading = log.AddHold(0);
  for (int i = 0; i < 6; ++i) log.Append(EntryKind::kStdout, Bytes(10));
  log.MoveHold(reading, 6, 6);
  ASSERT_TRUE(log.Full());
  EXPECT_EQ(log.DropBlockingHolds(), 1u);
  EXPECT_FALSE(log.HasHold(stalled));
  EXPECT_TRUE(log.HasHold(reading));
  EXPECT_FALSE(log.Full());
  EXPECT_EQ(space, 1);
  // The dropped reader's place is remembered: its gap is exact.
  auto slice = log.Read(0, 1000);
  ASSERT_TRUE(slice.gap.has_value());
  EXPECT_EQ(slice.gap->bytes, std::optional<uint64_t>(10));
}

TEST(OutputLogHoldTest, ANewReaderTakesOverFromParkedOnes) {
  OutputLog log(LogLimits{50, 1000});
  const auto parked = log.AddHold(2, 4, true);
  for (int i = 0; i < 8; ++i) log.Append(EntryKind::kStdout, Bytes(10));
  EXPECT_TRUE(log.Full());
  EXPECT_EQ(log.first_retained_seq(), 3u) << "the parked reader keeps what its client may miss";
  const auto resumed = log.AddHold(4);
  EXPECT_FALSE(log.HasHold(parked));
  EXPECT_TRUE(log.HasHold(resumed));
  EXPECT_EQ(log.first_retained_seq(), 4u);  // 4..8 fit the window
}

TEST(OutputLogHoldTest, AReleasedParkedReaderIsResumedWithAnExactGap) {
  OutputLog log(LogLimits{50, 1000});
  for (int i = 0; i < 4; ++i) log.Append(EntryKind::kStdout, Bytes(10));  // 1..4
  const auto parked = log.AddHold(1, 3, true);
  log.ReleaseHold(parked);  // the grace passed; the client had seq 2 or 3
  for (int i = 0; i < 4000; ++i) log.Append(EntryKind::kStdout, Bytes(5 + i % 7));
  auto slice = log.Read(3, 1000);
  ASSERT_TRUE(slice.gap.has_value());
  EXPECT_EQ(slice.gap->from_seq, 4u);
  ASSERT_TRUE(slice.gap->bytes.has_value());
  EXPECT_EQ(*slice.gap->bytes, slice.entries.front()->offset - 30);
  slice = log.Read(2, 1000);
  ASSERT_TRUE(slice.gap->bytes.has_value());
  EXPECT_EQ(*slice.gap->bytes, slice.entries.front()->offset - 20);
}

TEST(OutputLogHoldTest, TrimDropsHolds) {
  OutputLog log(LogLimits{50, 1000});
  log.AddHold(0);
  for (int i = 0; i < 10; ++i) log.Append(EntryKind::kStdout, Bytes(10));
  log.Trim(20);
  EXPECT_EQ(log.hold_count(), 0u);
  EXPECT_EQ(log.retained_bytes(), 20u);
  EXPECT_FALSE(log.Full());
}

TEST(OutputLogTest, LastSeqEndingBy) {
  OutputLog log;
  log.Append(EntryKind::kStart, {});      // 1, ends at 0
  log.Append(EntryKind::kStdout, "abc");  // 2, ends at 3
  log.Append(EntryKind::kStdout, "de");   // 3, ends at 5
  EXPECT_EQ(log.LastSeqEndingBy(0, 99), 1u);
  EXPECT_EQ(log.LastSeqEndingBy(2, 99), 1u);
  EXPECT_EQ(log.LastSeqEndingBy(3, 99), 2u);
  EXPECT_EQ(log.LastSeqEndingBy(4, 99), 2u);
  EXPECT_EQ(log.LastSeqEndingBy(100, 99), 3u);
  OutputLog empty;
  EXPECT_EQ(empty.LastSeqEndingBy(10, 99), 99u);
}

// ---- storage ----

// A pipe as a process's stdout is: its read end non-blocking.
Pipe OutputPipe() {
  auto pipe = MakePipe(true);
  if (!pipe) throw std::runtime_error(pipe.error().message);
  return std::move(*pipe);
}

void Write(const Pipe& pipe, std::string_view bytes) {
  ASSERT_EQ(::write(pipe.write.get(), bytes.data(), bytes.size()),
            static_cast<ssize_t>(bytes.size()));
}

// Takes everything the pipe holds.
void TakeAll(OutputLog& log, EntryKind kind, const Pipe& pipe) {
  while (log.Take(kind, pipe.read.get(), 64u << 10) > 0) {
  }
}

std::string Text(const OutputLog& log, EntryKind kind) {
  std::string out;
  for (const LogEntry& e : log.entries()) {
    if (e.kind == kind) out += e.data;
  }
  return out;
}

TEST(OutputLogStorageTest, OutputIsTakenStraightIntoTheLog) {
  for (bool persistent : {false, true}) {
    OutputLog log(LogLimits{}, persistent);
    Pipe out = OutputPipe();
    Write(out, "hello");
    EXPECT_EQ(log.Take(EntryKind::kStdout, out.read.get(), 1000), 5);
    Write(out, "!");
    EXPECT_EQ(log.Take(EntryKind::kStderr, out.read.get(), 1000), 1);
    EXPECT_EQ(log.Take(EntryKind::kStdout, out.read.get(), 1000), -1);
    EXPECT_EQ(errno, EAGAIN);
    auto slice = log.Read(0, 1000);
    ASSERT_EQ(slice.entries.size(), 2u);
    EXPECT_EQ(slice.entries[0]->data, "hello");
    EXPECT_EQ(slice.entries[1]->data, "!");
    EXPECT_EQ(slice.entries[1]->offset, 5u);
    out.write.reset();
    EXPECT_EQ(log.Take(EntryKind::kStdout, out.read.get(), 1000), 0);
  }
}

TEST(OutputLogStorageTest, ACodePointCutByAReadWaitsForTheRestOfIt) {
  OutputLog log(LogLimits{}, true);
  Pipe out = OutputPipe();
  Write(out, "price: \xE2\x82");
  TakeAll(log, EntryKind::kStdout, out);
  EXPECT_EQ(Text(log, EntryKind::kStdout), "price: ");
  EXPECT_EQ(log.carry(EntryKind::kStdout), "\xE2\x82");
  Write(out, "\xAC 5");
  TakeAll(log, EntryKind::kStdout, out);
  EXPECT_EQ(log.entries().back().data, "\xE2\x82\xAC 5");
  // A stream that ends inside one gives up the bytes it has.
  Write(out, "\xF0\x9F");
  TakeAll(log, EntryKind::kStdout, out);
  log.FlushCarry(EntryKind::kStdout);
  EXPECT_EQ(Text(log, EntryKind::kStdout), "price: \xE2\x82\xAC 5\xF0\x9F");
  EXPECT_EQ(log.carry(EntryKind::kStdout), "");
}

TEST(OutputLogStorageTest, ALoudLogStaysWithinItsRingAndTrimGivesItBack) {
  OutputLog loud(LogLimits{4u << 20, 1u << 20});
  Pipe out = OutputPipe();
  const std::string block(64u << 10, 'a');
  for (int i = 0; i < 400; ++i) {
    Write(out, block);
    TakeAll(loud, EntryKind::kStdout, out);
  }
  EXPECT_EQ(loud.total_bytes(), 400u * block.size());
  EXPECT_EQ(loud.total_bytes(), loud.evicted_bytes() + loud.retained_bytes());
  EXPECT_LE(loud.retained_bytes(), 4u << 20);
  // The window plus its records' headers and the headroom, whatever went through.
  EXPECT_LE(loud.allocated_bytes(), (4u << 20) + (1u << 20) * 40 + (3u << 20));
  for (const LogEntry& e : loud.entries()) {
    ASSERT_FALSE(e.data.empty());
    EXPECT_EQ(e.data.find_first_not_of('a'), std::string_view::npos);
  }
  loud.Trim(100);
  EXPECT_LE(loud.allocated_bytes(), 128u * 1024);
  EXPECT_LE(loud.retained_bytes(), 100u + 64 * 1024);
}

TEST(OutputLogStorageTest, AnEndedLogLeavesItsMemfdAndKeepsItsEntriesAndHolds) {
  OutputLog log(LogLimits{1024, 100}, true);
  log.Append(EntryKind::kStart, {});
  Pipe out = OutputPipe();
  Write(out, "hello ");
  TakeAll(log, EntryKind::kStdout, out);
  log.Append(EntryKind::kStderr, "world");
  const OutputLog::HoldId hold = log.AddHold(1);
  log.Detach();  // not ended: nothing changes
  EXPECT_GE(log.ring_fd(), 0);
  log.Append(EntryKind::kExit, {});
  const size_t window = log.allocated_bytes();
  log.Detach();
  EXPECT_EQ(log.ring_fd(), -1);
  EXPECT_LT(log.allocated_bytes(), window);
  EXPECT_TRUE(log.HasHold(hold));
  EXPECT_TRUE(log.ended());
  const auto slice = log.Read(0, UINT64_MAX);
  EXPECT_EQ(Seqs(slice), (std::vector<uint64_t>{1, 2, 3, 4}));
  EXPECT_EQ(Joined(slice), "hello world");
  EXPECT_EQ(slice.entries[2]->offset, 6u);
  EXPECT_EQ(log.Append(EntryKind::kStdout, "more"), 0u);
}

TEST(OutputLogStorageTest, CopiesLargerThanABlockAreWhole) {
  OutputLog log(LogLimits{8u << 20, 100});
  const std::string big(3u << 20, 'z');
  log.Append(EntryKind::kStdout, "a");
  log.Append(EntryKind::kStdout, big);
  log.Append(EntryKind::kStdout, "b");
  auto slice = log.Read(0, UINT64_MAX);
  ASSERT_EQ(slice.entries.size(), 3u);
  EXPECT_EQ(slice.entries[1]->data, big);
  EXPECT_EQ(slice.entries[2]->data, "b");
}

// ---- a log that outlives its writer ----

// The log's memfd as a keeper holds it: the same open file, file position included.
UniqueFd Kept(const OutputLog& log) {
  return UniqueFd(::fcntl(log.ring_fd(), F_DUPFD_CLOEXEC, 3));
}

// The memfd of a persistent log whose daemon took `bytes` from `out` and is gone, as its keeper
// holds it.
UniqueFd KeptAfter(const LogLimits& limits, const Pipe& out, EntryKind kind,
                   std::string_view bytes) {
  OutputLog log(limits, true);
  UniqueFd kept = Kept(log);
  Write(out, bytes);
  TakeAll(log, kind, out);
  return kept;
}

// The ring of a kept memfd, as another writer (the next daemon) maps it.
LogRing Reopened(const UniqueFd& kept) {
  auto ring = LogRing::Open(UniqueFd(::fcntl(kept.get(), F_DUPFD_CLOEXEC, 3)));
  if (!ring) throw std::runtime_error(ring.error().message);
  return std::move(*ring);
}

TEST(OutputLogAdoptTest, APersistentLogIsFoundWholeByTheNextDaemon) {
  const LogLimits limits{64u << 10, 1000};
  UniqueFd kept;
  std::vector<std::pair<uint64_t, std::string>> expected;
  uint64_t total = 0;
  {
    OutputLog log(limits, true);
    ASSERT_GE(log.ring_fd(), 0);
    kept = Kept(log);
    Pipe out = OutputPipe();
    log.Append(EntryKind::kStart, {});
    std::mt19937 rng(7);
    // Far more than the ring holds: it wraps many times.
    for (int i = 0; i < 3000; ++i) {
      Write(out, std::string(1 + rng() % 3000, static_cast<char>('a' + i % 26)));
      TakeAll(log, i % 2 ? EntryKind::kStderr : EntryKind::kStdout, out);
    }
    Write(out, "\xE2\x82");
    TakeAll(log, EntryKind::kStdout, out);
    for (const LogEntry& e : log.entries()) expected.emplace_back(e.seq, std::string(e.data));
    total = log.total_bytes();
    EXPECT_LE(log.retained_bytes(), limits.max_bytes);
  }  // the daemon is gone; the memfd lives on in `kept`
  auto adopted = OutputLog::Adopt(limits, std::move(kept));
  ASSERT_TRUE(adopted.ok()) << adopted.error().message;
  OutputLog& log = **adopted;
  EXPECT_EQ(log.total_bytes(), total);
  EXPECT_EQ(log.next_seq(), 3002u);
  EXPECT_EQ(log.carry(EntryKind::kStdout), "\xE2\x82");
  ASSERT_EQ(log.entries().size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(log.entries()[i].seq, expected[i].first);
    EXPECT_EQ(log.entries()[i].data, expected[i].second);
  }
  // It carries on: sequence numbers and offsets continue.
  EXPECT_EQ(log.Append(EntryKind::kStdout, "more"), 3002u);
  EXPECT_EQ(log.entries().back().offset, total);
  auto slice = log.Read(1, 1u << 30);
  ASSERT_TRUE(slice.gap.has_value());
  EXPECT_EQ(slice.gap->from_seq, 2u);
}

// How far a daemon got into OutputLog::Take (LogRing::Fill's steps, then the entry's) before a
// SIGKILL stopped it.
enum class KilledAfter { kRecord, kMove, kCarry, kCommit };

// Takes from `pipe` into the ring a keeper holds as `kept` (its log's daemon is gone), as Take
// does, and stops after `step`, as a daemon killed there. With no pipe, flushes the stream's
// carry as FlushCarry does.
void TakeUntil(const UniqueFd& kept, const Pipe* pipe, EntryKind kind, KilledAfter step) {
  LogRing ring = Reopened(kept);
  RingState& s = ring.state();
  const int stream = kind == EntryKind::kStderr ? 1 : 0;
  const std::string carry(reinterpret_cast<const char*>(s.carry[stream]), s.carry_len[stream]);
  RingIntake intake{};
  intake.time_ns = 1700000000000000000;
  intake.kind = static_cast<uint8_t>(kind);
  intake.carry_len = static_cast<uint8_t>(carry.size());
  std::span<char> room = ring.Room(carry.size() + 4096, false);
  std::memcpy(room.data(), carry.data(), carry.size());
  ASSERT_EQ(ring.Fill(room, intake, -1, true), 0);  // recorded, nothing moved yet
  if (step == KilledAfter::kRecord) return;
  ssize_t moved = 0;
  if (pipe != nullptr) {
    moved = ::splice(pipe->read.get(), nullptr, ring.fd(), nullptr, room.size() - carry.size(),
                     SPLICE_F_NONBLOCK);
    ASSERT_GT(moved, 0);
  }
  if (step == KilledAfter::kMove) return;
  const std::string_view bytes(room.data(), carry.size() + static_cast<size_t>(moved));
  const size_t complete = pipe != nullptr ? Utf8CompletePrefix(bytes) : bytes.size();
  s.carry_len[stream] = static_cast<uint8_t>(bytes.size() - complete);
  std::memcpy(s.carry[stream], bytes.data() + complete, bytes.size() - complete);
  if (step == KilledAfter::kCarry) return;
  // Killed before the counters that follow the record were saved, too.
  ring.Commit(s.next_seq, s.total_bytes, intake.time_ns, intake.kind, complete);
}

TEST(OutputLogAdoptTest, OutputAKillCutOnItsWayInIsFoundOnce) {
  const LogLimits limits{1u << 20, 100};
  for (KilledAfter step :
       {KilledAfter::kRecord, KilledAfter::kMove, KilledAfter::kCarry, KilledAfter::kCommit}) {
    SCOPED_TRACE(static_cast<int>(step));
    Pipe out = OutputPipe();
    // Ends inside the euro sign, which the next bytes complete; they cut an o-umlaut.
    UniqueFd kept = KeptAfter(limits, out, EntryKind::kStdout, "one\ntwo \xE2\x82");
    Write(out, "\xAC three\nfo\xC3");
    TakeUntil(kept, &out, EntryKind::kStdout, step);
    auto adopted = OutputLog::Adopt(limits, std::move(kept));
    ASSERT_TRUE(adopted.ok()) << adopted.error().message;
    OutputLog& log = **adopted;
    // The next daemon's reader: what the pipe still holds, then what comes after.
    TakeAll(log, EntryKind::kStdout, out);
    EXPECT_EQ(log.carry(EntryKind::kStdout), "\xC3");
    Write(out, "\xB6ur\n");
    TakeAll(log, EntryKind::kStdout, out);
    EXPECT_EQ(Text(log, EntryKind::kStdout), "one\ntwo \xE2\x82\xAC three\nfo\xC3\xB6ur\n");
    EXPECT_EQ(log.total_bytes(), Text(log, EntryKind::kStdout).size());
    for (size_t i = 0; i < log.entries().size(); ++i) EXPECT_EQ(log.entries()[i].seq, i + 1);
  }
}

TEST(OutputLogAdoptTest, AStreamsLastBytesAreFlushedOnceWhereverAKillCutTheFlush) {
  const LogLimits limits{1u << 20, 100};
  for (KilledAfter step : {KilledAfter::kRecord, KilledAfter::kCarry, KilledAfter::kCommit}) {
    SCOPED_TRACE(static_cast<int>(step));
    Pipe out = OutputPipe();
    UniqueFd kept = KeptAfter(limits, out, EntryKind::kStderr, "end \xE2\x82");
    TakeUntil(kept, nullptr, EntryKind::kStderr, step);
    auto adopted = OutputLog::Adopt(limits, std::move(kept));
    ASSERT_TRUE(adopted.ok()) << adopted.error().message;
    // The next daemon's reader finds the pipe at its end, and flushes.
    (*adopted)->FlushCarry(EntryKind::kStderr);
    EXPECT_EQ(Text(**adopted, EntryKind::kStderr), "end \xE2\x82");
  }
}

TEST(OutputLogAdoptTest, AnIntakeThatOnlyCarriedIsTakenOnce) {
  const LogLimits limits{1u << 20, 100};
  Pipe out = OutputPipe();
  // An intake that made no entry: its record stays at the tail.
  UniqueFd kept = KeptAfter(limits, out, EntryKind::kStdout, "\xE2");
  auto adopted = OutputLog::Adopt(limits, std::move(kept));
  ASSERT_TRUE(adopted.ok()) << adopted.error().message;
  OutputLog& log = **adopted;
  EXPECT_TRUE(log.entries().empty());
  EXPECT_EQ(log.carry(EntryKind::kStdout), "\xE2");
  Write(out, "\x82\xAC");
  TakeAll(log, EntryKind::kStdout, out);
  EXPECT_EQ(Text(log, EntryKind::kStdout), "\xE2\x82\xAC");
}

TEST(OutputLogAdoptTest, BytesWrittenOverAnIntakeEndIt) {
  const LogLimits limits{1u << 20, 100};
  Pipe out = OutputPipe();
  UniqueFd kept = KeptAfter(limits, out, EntryKind::kStdout, "\xE2");
  // A write of other bytes into the same room, killed before its record.
  std::memcpy(Reopened(kept).Room(8, true).data(), "stderr!!", 8);
  auto adopted = OutputLog::Adopt(limits, std::move(kept));
  ASSERT_TRUE(adopted.ok()) << adopted.error().message;
  EXPECT_TRUE((*adopted)->entries().empty());
  EXPECT_EQ((*adopted)->carry(EntryKind::kStdout), "\xE2");
}

TEST(OutputLogAdoptTest, ARecordTornByACrashIsNotAnEntry) {
  UniqueFd kept;
  {
    OutputLog log(LogLimits{1u << 20, 100}, true);
    kept = Kept(log);
    log.Append(EntryKind::kStdout, "whole");
  }
  // Bytes written into the ring whose record was never committed.
  std::memcpy(Reopened(kept).Room(10, true).data(), "half-read!", 10);
  auto adopted = OutputLog::Adopt(LogLimits{1u << 20, 100}, std::move(kept));
  ASSERT_TRUE(adopted.ok());
  ASSERT_EQ((*adopted)->entries().size(), 1u);
  EXPECT_EQ((*adopted)->entries()[0].data, "whole");
}

TEST(OutputLogAdoptTest, AnythingElseIsRefused) {
  UniqueFd fd(::memfd_create("not-a-ring", MFD_CLOEXEC));
  ASSERT_EQ(::ftruncate(fd.get(), 1 << 16), 0);
  EXPECT_FALSE(OutputLog::Adopt(LogLimits{}, std::move(fd)).ok());
}

}  // namespace
}  // namespace sandstream
