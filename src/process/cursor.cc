#include "process/cursor.h"

#include <algorithm>

namespace sandstream {

std::optional<Flow> ParseFlow(std::string_view name) {
  if (name == "wait") return Flow::kWait;
  if (name == "skip") return Flow::kSkip;
  return std::nullopt;
}

std::string_view FlowName(Flow flow) { return flow == Flow::kWait ? "wait" : "skip"; }

OutputCursor::OutputCursor(std::shared_ptr<Process> process,
                           const boost::asio::any_io_executor& ex, uint64_t after_seq, Flow flow)
    : process_(std::move(process)), wake_(ex), after_(after_seq), kept_after_(after_seq) {
  OutputLog& log = process_->log();
  log.AddListener(this);
  // An ended log holds nothing back; a waiting reader of it is a reader like any other.
  if (flow == Flow::kWait && !log.ended()) hold_ = log.AddHold(after_seq);
}

OutputCursor::~OutputCursor() {
  OutputLog& log = process_->log();
  log.RemoveListener(this);
  if (hold_ != 0) log.RemoveHold(hold_);
}

Flow OutputCursor::flow() const {
  return hold_ != 0 && process_->log().HasHold(hold_) ? Flow::kWait : Flow::kSkip;
}

OutputLog::Slice OutputCursor::Next(uint64_t max_bytes) {
  auto slice = process_->log().Read(after_, max_bytes, offset_);
  if (slice.gap) after_ = slice.gap->to_seq;
  for (const LogEntry* e : slice.entries) {
    after_ = e->seq;
    offset_ = e->offset + e->data.size();
  }
  return slice;
}

void OutputCursor::Taken() {
  if (hold_ == 0) return;
  OutputLog& log = process_->log();
  if (!log.HasHold(hold_)) {
    hold_ = 0;  // dropped as stalled: a skipping cursor from now on
    return;
  }
  // What was taken stays for a while, so a client whose connection breaks with some of it
  // still in flight (socket buffers) can resume without a gap: half the window, in bytes and in
  // entries, so what is kept alone never fills it.
  const LogLimits& limits = log.limits();
  uint64_t keep = kept_after_;
  if (offset_ && *offset_ > limits.max_bytes / 2) {
    keep = std::max(keep, log.LastSeqEndingBy(*offset_ - limits.max_bytes / 2, keep));
  }
  if (after_ > limits.max_entries / 2) keep = std::max(keep, after_ - limits.max_entries / 2);
  kept_after_ = std::min(keep, after_);
  log.MoveHold(hold_, kept_after_, after_);
}

void OutputCursor::Park(SteadyClock::duration grace) {
  if (hold_ == 0 || !process_->log().HasHold(hold_) || process_->log().ended()) return;
  process_->Park(kept_after_, after_, grace);
}

bool OutputCursor::AtEnd() const {
  const OutputLog& log = process_->log();
  return log.ended() && after_ >= log.last_seq();
}

EventCursor::EventCursor(std::shared_ptr<EventLog> log, const boost::asio::any_io_executor& ex,
                         uint64_t after_seq)
    : log_(std::move(log)), wake_(ex), after_(after_seq) {
  log_->AddListener(this);
}

EventCursor::~EventCursor() { log_->RemoveListener(this); }

EventLog::Slice EventCursor::Next(uint64_t max_bytes) {
  auto slice = log_->Read(after_, max_bytes);
  if (slice.gap) after_ = slice.gap->to_seq;
  for (const Event* e : slice.entries) after_ = e->seq;
  return slice;
}

}  // namespace sandstream
