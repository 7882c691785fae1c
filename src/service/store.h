// Durable state in one SQLite file: sandboxes, and each process's record with its exit and
// retained output tail. Synchronous; called from the io_context thread (writes are small).
#pragma once

#include <sqlite3.h>

#include <memory>
#include <string>
#include <vector>

#include "base/result.h"

namespace sandstream {

class Store {
 public:
  struct SandboxRow {
    std::string id;
    std::string record;  // JSON of the sandbox
  };
  struct ProcessRow {
    std::string sandbox_id;
    std::string id;
    std::string record;  // JSON of the process, exit and tail included
  };

  static Result<std::unique_ptr<Store>> Open(const std::string& path);
  ~Store();

  Result<void> PutSandbox(const std::string& id, const std::string& record);
  Result<void> DeleteSandbox(const std::string& id);  // and its processes
  Result<void> PutProcess(const std::string& sandbox_id, const std::string& id,
                          const std::string& record);
  Result<std::vector<SandboxRow>> Sandboxes();
  Result<std::vector<ProcessRow>> Processes();

 private:
  explicit Store(sqlite3* db) : db_(db) {}
  Result<void> Exec(const char* sql);
  Result<void> Run(const char* sql, std::initializer_list<std::string_view> args);

  sqlite3* db_;
};

}  // namespace sandstream
