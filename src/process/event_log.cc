#include "process/event_log.h"

#include <algorithm>

namespace sandstream {

uint64_t EventLog::Append(std::string name, std::string data, std::string summary, bool last,
                          SystemTime time) {
  if (ended_) return 0;
  Event e{next_seq_++, time, std::move(name), std::move(data), std::move(summary), last};
  retained_bytes_ += e.data.size() + e.summary.size();
  entries_.push_back(std::move(e));
  ended_ = last;
  while (entries_.size() > 1 &&
         (retained_bytes_ > limits_.max_bytes || entries_.size() > limits_.max_entries)) {
    retained_bytes_ -= entries_.front().data.size() + entries_.front().summary.size();
    entries_.pop_front();
  }
  Notify();
  return next_seq_ - 1;
}

void EventLog::End() {
  if (ended_) return;
  ended_ = true;
  Notify();
}

void EventLog::Notify() {
  // A listener may remove itself while being told; iterate over a copy.
  if (listeners_.empty()) return;
  auto copy = listeners_;
  for (Listener* l : copy) l->OnAppend();
}

EventLog::Slice EventLog::Read(uint64_t after_seq, uint64_t max_bytes) const {
  Slice slice;
  const uint64_t first = entries_.empty() ? next_seq_ : entries_.front().seq;
  if (after_seq + 1 < first) {
    slice.gap = Gap{after_seq + 1, first - 1, std::nullopt};
    after_seq = first - 1;
  }
  if (entries_.empty() || after_seq >= entries_.back().seq) return slice;
  uint64_t bytes = 0;
  for (size_t i = static_cast<size_t>(after_seq + 1 - first); i < entries_.size(); ++i) {
    const Event& e = entries_[i];
    if (!slice.entries.empty() && bytes + e.data.size() > max_bytes) break;
    bytes += e.data.size();
    slice.entries.push_back(&e);
  }
  return slice;
}

uint64_t EventLog::SeqBeforeTail(uint64_t n) const {
  if (n >= entries_.size()) return entries_.empty() ? last_seq() : entries_.front().seq - 1;
  return entries_[entries_.size() - n - 1].seq;
}

void EventLog::AddListener(Listener* l) { listeners_.push_back(l); }

void EventLog::RemoveListener(Listener* l) {
  listeners_.erase(std::remove(listeners_.begin(), listeners_.end(), l), listeners_.end());
}

}  // namespace sandstream
