#include "process/output_log.h"

#include <algorithm>

namespace sandstream {

uint64_t OutputLog::Append(EntryKind kind, std::string_view data, SystemTime time) {
  if (ended_) return 0;
  LogEntry e;
  e.seq = next_seq_++;
  e.kind = kind;
  e.time = time;
  e.data.assign(data);
  e.offset = total_bytes_;
  total_bytes_ += data.size();
  if (e.seq == 1) first_entry_end_ = total_bytes_;
  retained_bytes_ += data.size();
  entries_.push_back(std::move(e));
  if (kind == EntryKind::kExit) ended_ = true;
  Evict();
  // A listener may remove itself while being told; iterate over a copy.
  if (!listeners_.empty()) {
    auto copy = listeners_;
    for (Listener* l : copy) l->OnAppend();
  }
  return next_seq_ - 1;
}

void OutputLog::Trim(uint64_t max_bytes) {
  const LogLimits saved = limits_;
  limits_.max_bytes = std::min(limits_.max_bytes, max_bytes);
  Evict();
  limits_ = saved;
  entries_.shrink_to_fit();
}

void OutputLog::Evict() {
  // Never evict the newest entry: a reader must always be able to get the latest state.
  while (entries_.size() > 1 &&
         (retained_bytes_ > limits_.max_bytes || entries_.size() > limits_.max_entries)) {
    const LogEntry& old = entries_.front();
    retained_bytes_ -= old.data.size();
    evicted_bytes_ += old.data.size();
    ++evicted_entries_;
    entries_.pop_front();
  }
}

OutputLog::Slice OutputLog::Read(uint64_t after_seq, uint64_t max_bytes,
                                 std::optional<uint64_t> known_offset) const {
  Slice slice;
  const uint64_t first = first_retained_seq();
  if (after_seq + 1 < first) {
    Gap gap{after_seq + 1, first - 1, std::nullopt};
    // A reader at the very start knows where it is without having said so.
    if (!known_offset && after_seq == 0) known_offset = 0;
    if (!known_offset && after_seq == 1) known_offset = first_entry_end_;
    const uint64_t first_offset = entries_.empty() ? total_bytes_ : entries_.front().offset;
    if (known_offset) gap.bytes = first_offset - std::min(first_offset, *known_offset);
    slice.gap = gap;
    after_seq = first - 1;
  }
  if (entries_.empty() || after_seq >= entries_.back().seq) return slice;
  size_t index = static_cast<size_t>(after_seq + 1 - entries_.front().seq);
  uint64_t bytes = 0;
  for (; index < entries_.size(); ++index) {
    const LogEntry& e = entries_[index];
    if (!slice.entries.empty() && bytes + e.data.size() > max_bytes) break;
    bytes += e.data.size();
    slice.entries.push_back(&e);
  }
  return slice;
}

uint64_t OutputLog::SeqBeforeTail(uint64_t n) const {
  uint64_t chunks = 0;
  for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
    if (it->kind == EntryKind::kStdout || it->kind == EntryKind::kStderr) {
      if (chunks == n) return it->seq;
      ++chunks;
    }
  }
  // Fewer than n chunks retained: everything, start included.
  return first_retained_seq() - 1;
}

void OutputLog::Restore(std::vector<LogEntry> entries) {
  for (auto& e : entries) {
    if (!entries_.empty() && e.seq <= entries_.back().seq) continue;
    next_seq_ = e.seq + 1;
    if (e.seq == 1) first_entry_end_ = e.offset + e.data.size();
    retained_bytes_ += e.data.size();
    total_bytes_ = e.offset + e.data.size();
    if (e.kind == EntryKind::kExit) ended_ = true;
    entries_.push_back(std::move(e));
  }
}

void OutputLog::AddListener(Listener* l) { listeners_.push_back(l); }

void OutputLog::RemoveListener(Listener* l) {
  listeners_.erase(std::remove(listeners_.begin(), listeners_.end(), l), listeners_.end());
}

}  // namespace sandstream
