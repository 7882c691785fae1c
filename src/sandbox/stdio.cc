// StdioPipes (stdio.h).
#include "sandbox/stdio.h"

namespace sandstream::sandbox {

Result<StdioPipes> StdioPipes::Make(const ProcessSpec& spec) {
  StdioPipes s;
  auto out = MakePipe(true);
  if (!out) return std::move(out).error();
  s.out_ = std::move(*out);
  GrowPipe(s.out_.write.get(), 1 << 20);
  if (!spec.merge_stderr) {
    auto err = MakePipe(true);
    if (!err) return std::move(err).error();
    s.err_ = std::move(*err);
  }
  if (spec.open_stdin) {
    auto in = MakePipe(false);
    if (!in) return std::move(in).error();
    s.in_ = std::move(*in);
  }
  return s;
}

void StdioPipes::CloseChildEnds() {
  out_.write.reset();
  err_.write.reset();
  in_.read.reset();
}

void StdioPipes::HandOver(SpawnedProcess& p) {
  p.stdout_fd = std::move(out_.read);
  p.stderr_fd = std::move(err_.read);
  p.stdin_fd = std::move(in_.write);
}

}  // namespace sandstream::sandbox
