// Durable state in one SQLite file: sandboxes, and each process's record with its exit and
// retained output tail. Synchronous; called from the io_context thread (writes are small).
#pragma once

#include <memory>
#include <sqlite3.h>
#include <string>
#include <unordered_map>
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

  // A tenant, an API key or a scoped token (access.h): its kind, id and JSON record.
  struct AccessRow {
    std::string kind;
    std::string id;
    std::string record;
  };

  struct StmtDeleter {
    void operator()(sqlite3_stmt* s) const { sqlite3_finalize(s); }
  };

  static Result<std::unique_ptr<Store>> Open(const std::string& path);
  ~Store();

  Result<void> PutSandbox(const std::string& id, const std::string& record);
  Result<void> DeleteSandbox(const std::string& id);  // and its processes
  Result<void> PutProcess(const std::string& sandbox_id, const std::string& id,
                          const std::string& record);
  Result<std::vector<SandboxRow>> Sandboxes();
  Result<void> DeleteProcess(const std::string& sandbox_id, const std::string& id);
  // In start order: every process recorded running, and of each sandbox's finished ones the
  // newest `finished_per_sandbox` (what the service keeps in memory), so that a restart loads
  // a bounded number of rows whatever the database holds.
  Result<std::vector<ProcessRow>> Processes(size_t finished_per_sandbox);

  Result<void> PutAccess(const std::string& kind, const std::string& id, const std::string& record);
  Result<void> DeleteAccess(const std::string& kind, const std::string& id);
  Result<std::vector<AccessRow>> AccessRows();

  // Templates made through the API (templates.h): by name, their JSON records.
  Result<void> PutTemplate(const std::string& name, const std::string& record);
  Result<void> DeleteTemplate(const std::string& name);
  Result<std::vector<std::string>> Templates();

  // Volumes (volumes.h): by id, their JSON records.
  Result<void> PutVolume(const std::string& id, const std::string& record);
  Result<void> DeleteVolume(const std::string& id);
  Result<std::vector<std::string>> Volumes();

 private:
  explicit Store(sqlite3* db) : db_(db) {}
  Result<void> Exec(const char* sql);
  // Runs one of this file's statements; each is compiled once and kept (by its literal).
  Result<void> Run(const char* sql, std::initializer_list<std::string_view> args);
  // The first column of every row `sql` selects.
  Result<std::vector<std::string>> Records(const char* sql);

  sqlite3* db_;
  std::unordered_map<const char*, std::unique_ptr<sqlite3_stmt, StmtDeleter>> statements_;
};

}  // namespace sandstream
