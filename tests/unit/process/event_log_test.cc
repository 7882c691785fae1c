// Unit tests of EventLog: events rendered once, sequence numbers, the bounded window and the gap
// a late reader sees, the end, tails and listeners.
#include "process/event_log.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace sandstream {
namespace {

std::vector<std::string> Names(const EventLog::Slice& slice) {
  std::vector<std::string> names;
  for (const Event* e : slice.entries) names.push_back(e->name);
  return names;
}

TEST(EventLogTest, AppendsAndReadsInOrder) {
  EventLog log(LogLimits{1 << 20, 100});
  EXPECT_EQ(log.Append("a", "{\"n\":1}", "{\"s\":1}"), 1u);
  EXPECT_EQ(log.Append("b", "{}"), 2u);
  auto slice = log.Read(0, 1000);
  EXPECT_FALSE(slice.gap.has_value());
  EXPECT_EQ(Names(slice), std::vector<std::string>({"a", "b"}));
  EXPECT_EQ(slice.entries[0]->data, "{\"n\":1}");
  EXPECT_EQ(slice.entries[0]->summary, "{\"s\":1}");
  EXPECT_EQ(Names(log.Read(1, 1000)), std::vector<std::string>({"b"}));
  EXPECT_TRUE(log.Read(2, 1000).entries.empty());
}

TEST(EventLogTest, ALateReaderGetsAGapWithoutBytes) {
  EventLog log(LogLimits{1 << 20, 3});
  for (int i = 0; i < 5; ++i) log.Append("e", "{}");
  auto slice = log.Read(0, 1000);
  ASSERT_TRUE(slice.gap.has_value());
  EXPECT_EQ(slice.gap->from_seq, 1u);
  EXPECT_EQ(slice.gap->to_seq, 2u);
  EXPECT_FALSE(slice.gap->bytes.has_value());
  EXPECT_EQ(slice.entries.size(), 3u);
}

TEST(EventLogTest, TheByteLimitKeepsTheNewest) {
  EventLog log(LogLimits{10, 100});
  log.Append("a", "12345");
  log.Append("b", "12345");
  log.Append("c", "123456789012");  // alone over the limit: still kept
  EXPECT_EQ(Names(log.Read(0, 1000)), std::vector<std::string>({"c"}));
}

TEST(EventLogTest, EndsWithItsLastEventOrWithout) {
  EventLog log(LogLimits{1 << 20, 100});
  log.Append("x", "{}");
  log.Append("exit", "{}", {}, true);
  EXPECT_TRUE(log.ended());
  EXPECT_EQ(log.Append("late", "{}"), 0u);
  EXPECT_EQ(log.last_seq(), 2u);
  EventLog other(LogLimits{1 << 20, 100});
  other.End();
  EXPECT_TRUE(other.ended());
  EXPECT_EQ(other.last_seq(), 0u);
}

TEST(EventLogTest, SeqBeforeTail) {
  EventLog log(LogLimits{1 << 20, 100});
  for (int i = 0; i < 5; ++i) log.Append("e", "{}");
  EXPECT_EQ(log.SeqBeforeTail(2), 3u);
  EXPECT_EQ(log.SeqBeforeTail(0), 5u);
  EXPECT_EQ(log.SeqBeforeTail(10), 0u);
}

TEST(EventLogTest, ListenersAreToldOfAppendsAndTheEnd) {
  struct Counter : EventLog::Listener {
    void OnAppend() override { ++calls; }
    int calls = 0;
  } counter;
  EventLog log(LogLimits{1 << 20, 100});
  log.AddListener(&counter);
  log.Append("a", "{}");
  log.End();
  log.RemoveListener(&counter);
  log.Append("b", "{}");
  EXPECT_EQ(counter.calls, 2);
}

}  // namespace
}  // namespace sandstream
