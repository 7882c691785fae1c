#include "service/store.h"

#include <memory>
#include <optional>

namespace sandstream {
namespace {

Error DbError(sqlite3* db, std::string_view step) {
  return Error{ErrorCode::kInternal, "sqlite: " + std::string(step) + ": " + sqlite3_errmsg(db)};
}

using Stmt = std::unique_ptr<sqlite3_stmt, Store::StmtDeleter>;

}  // namespace

Result<std::unique_ptr<Store>> Store::Open(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                      nullptr) != SQLITE_OK) {
    Error e{ErrorCode::kInternal,
            "sqlite: open " + path + ": " + (db ? sqlite3_errmsg(db) : "out of memory")};
    sqlite3_close(db);
    return e;
  }
  std::unique_ptr<Store> store(new Store(db));
  // WAL + NORMAL: a crash loses at most the last transactions, never consistency.
  for (const char* sql :
       {"PRAGMA journal_mode=WAL", "PRAGMA synchronous=NORMAL", "PRAGMA foreign_keys=ON",
        "CREATE TABLE IF NOT EXISTS sandboxes (id TEXT PRIMARY KEY, "
        "record TEXT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS processes (sandbox_id TEXT NOT NULL "
        "REFERENCES sandboxes(id) ON DELETE CASCADE, id TEXT NOT NULL, "
        "seq INTEGER PRIMARY KEY AUTOINCREMENT, record TEXT NOT NULL, "
        "UNIQUE (sandbox_id, id))",
        "CREATE TABLE IF NOT EXISTS access (kind TEXT NOT NULL, id TEXT NOT NULL, "
        "record TEXT NOT NULL, PRIMARY KEY (kind, id))",
        "CREATE TABLE IF NOT EXISTS templates (name TEXT PRIMARY KEY, record TEXT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS volumes (id TEXT PRIMARY KEY, record TEXT NOT NULL)"}) {
    if (auto r = store->Exec(sql); !r) return std::move(r).error();
  }
  return store;
}

Store::~Store() {
  statements_.clear();  // finalized before the connection closes
  sqlite3_close(db_);
}

Result<void> Store::Exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    Error e{ErrorCode::kInternal, std::string("sqlite: ") + (err ? err : "error")};
    sqlite3_free(err);
    return e;
  }
  return Ok{};
}

Result<void> Store::Run(const char* sql, std::initializer_list<std::string_view> args) {
  auto& cached = statements_[sql];
  if (!cached) {
    sqlite3_stmt* raw = nullptr;
    if (sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, &raw, nullptr) != SQLITE_OK) {
      return DbError(db_, "prepare");
    }
    cached.reset(raw);
  }
  sqlite3_stmt* stmt = cached.get();
  int i = 1;
  for (std::string_view a : args) {
    sqlite3_bind_text(stmt, i++, a.data(), static_cast<int>(a.size()), SQLITE_STATIC);
  }
  std::optional<Error> failure;
  if (sqlite3_step(stmt) != SQLITE_DONE) failure = DbError(db_, "step");
  // Ready for the next use, and holding no pointer into `args`.
  sqlite3_reset(stmt);
  sqlite3_clear_bindings(stmt);
  if (failure) return *failure;
  return Ok{};
}

Result<void> Store::PutSandbox(const std::string& id, const std::string& record) {
  return Run(
      "INSERT INTO sandboxes (id, record) VALUES (?1, ?2) "
      "ON CONFLICT(id) DO UPDATE SET record = excluded.record",
      {id, record});
}

Result<void> Store::DeleteSandbox(const std::string& id) {
  return Run("DELETE FROM sandboxes WHERE id = ?1", {id});
}

Result<void> Store::PutProcess(const std::string& sandbox_id, const std::string& id,
                               const std::string& record) {
  return Run(
      "INSERT INTO processes (sandbox_id, id, record) VALUES (?1, ?2, ?3) "
      "ON CONFLICT(sandbox_id, id) DO UPDATE SET record = excluded.record",
      {sandbox_id, id, record});
}

Result<std::vector<Store::SandboxRow>> Store::Sandboxes() {
  sqlite3_stmt* raw = nullptr;
  if (sqlite3_prepare_v2(db_, "SELECT id, record FROM sandboxes ORDER BY rowid", -1, &raw,
                         nullptr) != SQLITE_OK) {
    return DbError(db_, "prepare");
  }
  Stmt stmt(raw);
  std::vector<SandboxRow> rows;
  while (sqlite3_step(raw) == SQLITE_ROW) {
    rows.push_back({reinterpret_cast<const char*>(sqlite3_column_text(raw, 0)),
                    reinterpret_cast<const char*>(sqlite3_column_text(raw, 1))});
  }
  return rows;
}

Result<void> Store::PutAccess(const std::string& kind, const std::string& id,
                              const std::string& record) {
  return Run(
      "INSERT INTO access (kind, id, record) VALUES (?1, ?2, ?3) "
      "ON CONFLICT (kind, id) DO UPDATE SET record = excluded.record",
      {kind, id, record});
}

Result<void> Store::DeleteAccess(const std::string& kind, const std::string& id) {
  return Run("DELETE FROM access WHERE kind = ?1 AND id = ?2", {kind, id});
}

Result<std::vector<Store::AccessRow>> Store::AccessRows() {
  sqlite3_stmt* raw = nullptr;
  if (sqlite3_prepare_v2(db_, "SELECT kind, id, record FROM access ORDER BY rowid", -1, &raw,
                         nullptr) != SQLITE_OK) {
    return DbError(db_, "prepare");
  }
  Stmt stmt(raw);
  std::vector<AccessRow> rows;
  while (sqlite3_step(raw) == SQLITE_ROW) {
    rows.push_back({reinterpret_cast<const char*>(sqlite3_column_text(raw, 0)),
                    reinterpret_cast<const char*>(sqlite3_column_text(raw, 1)),
                    reinterpret_cast<const char*>(sqlite3_column_text(raw, 2))});
  }
  return rows;
}

Result<void> Store::DeleteProcess(const std::string& sandbox_id, const std::string& id) {
  return Run("DELETE FROM processes WHERE sandbox_id = ?1 AND id = ?2", {sandbox_id, id});
}

Result<std::vector<Store::ProcessRow>> Store::Processes(size_t finished_per_sandbox) {
  sqlite3_stmt* raw = nullptr;
  if (sqlite3_prepare_v2(
          db_,
          "SELECT sandbox_id, id, record FROM ("
          "  SELECT sandbox_id, id, record, seq,"
          "    json_extract(record, '$.status') = 'running' AS running,"
          "    ROW_NUMBER() OVER (PARTITION BY sandbox_id,"
          "      json_extract(record, '$.status') = 'running' ORDER BY seq DESC) AS newest"
          "  FROM processes)"
          " WHERE running OR newest <= ?1 ORDER BY seq",
          -1, &raw, nullptr) != SQLITE_OK) {
    return DbError(db_, "prepare");
  }
  sqlite3_bind_int64(raw, 1, static_cast<sqlite3_int64>(finished_per_sandbox));
  Stmt stmt(raw);
  std::vector<ProcessRow> rows;
  while (sqlite3_step(raw) == SQLITE_ROW) {
    rows.push_back({reinterpret_cast<const char*>(sqlite3_column_text(raw, 0)),
                    reinterpret_cast<const char*>(sqlite3_column_text(raw, 1)),
                    reinterpret_cast<const char*>(sqlite3_column_text(raw, 2))});
  }
  return rows;
}

Result<void> Store::PutTemplate(const std::string& name, const std::string& record) {
  return Run(
      "INSERT INTO templates (name, record) VALUES (?1, ?2) "
      "ON CONFLICT (name) DO UPDATE SET record = excluded.record",
      {name, record});
}

Result<void> Store::DeleteTemplate(const std::string& name) {
  return Run("DELETE FROM templates WHERE name = ?1", {name});
}

Result<std::vector<std::string>> Store::Templates() {
  return Records("SELECT record FROM templates ORDER BY rowid");
}

Result<void> Store::PutVolume(const std::string& id, const std::string& record) {
  return Run(
      "INSERT INTO volumes (id, record) VALUES (?1, ?2) "
      "ON CONFLICT (id) DO UPDATE SET record = excluded.record",
      {id, record});
}

Result<void> Store::DeleteVolume(const std::string& id) {
  return Run("DELETE FROM volumes WHERE id = ?1", {id});
}

Result<std::vector<std::string>> Store::Volumes() {
  return Records("SELECT record FROM volumes ORDER BY rowid");
}

Result<std::vector<std::string>> Store::Records(const char* sql) {
  sqlite3_stmt* raw = nullptr;
  if (sqlite3_prepare_v2(db_, sql, -1, &raw, nullptr) != SQLITE_OK) {
    return DbError(db_, "prepare");
  }
  Stmt stmt(raw);
  std::vector<std::string> rows;
  while (sqlite3_step(raw) == SQLITE_ROW) {
    rows.emplace_back(reinterpret_cast<const char*>(sqlite3_column_text(raw, 0)));
  }
  return rows;
}

}  // namespace sandstream
