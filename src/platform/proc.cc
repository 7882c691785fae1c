#include "platform/proc.h"

#include <sstream>
#include <string>

#include "platform/fd.h"

namespace sandstream {

std::vector<pid_t> StatusIds(pid_t pid, std::string_view field) {
  std::vector<pid_t> ids;
  auto status = ReadFile("/proc/" + std::to_string(pid) + "/status");
  if (!status) return ids;
  const std::string key = "\n" + std::string(field) + ":";
  const size_t at = status->find(key);
  if (at == std::string::npos) return ids;
  const size_t begin = at + key.size();
  std::istringstream line(status->substr(begin, status->find('\n', begin) - begin));
  for (pid_t id = 0; line >> id;) ids.push_back(id);
  return ids;
}

}  // namespace sandstream
