// The pipes of a process without a terminal, the same for every runtime: the child's ends to
// hand to the new process, the daemon's ends to keep in its SpawnedProcess.
#pragma once

#include "base/result.h"
#include "platform/fd.h"
#include "sandbox/runtime.h"

namespace sandstream::sandbox {

class StdioPipes {
 public:
  // stdout always (non-blocking read end, a 1 MiB buffer); stderr unless merged into stdout;
  // stdin when the spec opens it.
  static Result<StdioPipes> Make(const ProcessSpec& spec);

  int child_stdin() const { return in_.read.get(); }  // -1 without stdin
  int child_stdout() const { return out_.write.get(); }
  int child_stderr() const { return err_.write ? err_.write.get() : out_.write.get(); }
  // The daemon's ends: stdout's read end, stderr's (-1 when merged), stdin's write end (-1).
  int parent_stdout() const { return out_.read.get(); }
  int parent_stderr() const { return err_.read ? err_.read.get() : -1; }
  int parent_stdin() const { return in_.write ? in_.write.get() : -1; }
  // Once the child holds its copies: the daemon keeps none, so EOF comes with the child's exit.
  void CloseChildEnds();
  // Moves the daemon's ends into `p`.
  void HandOver(SpawnedProcess& p);

 private:
  Pipe out_, err_, in_;
};

}  // namespace sandstream::sandbox
