#include "coordinator/store/store.h"

#include <sqlite3.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/base/status_macros.h"
#include "google/protobuf/util/time_util.h"

namespace mt::coordinator {
namespace {

using google::protobuf::util::TimeUtil;

// Migration i takes the schema from version i to i + 1. Never edit a released migration;
// append a new one and bump kSchemaVersion.
constexpr const char* kMigrations[] = {
    R"sql(
      CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
      CREATE TABLE jobs (
        id INTEGER PRIMARY KEY,
        request_id TEXT UNIQUE,
        name TEXT NOT NULL,
        state INTEGER NOT NULL,
        priority INTEGER NOT NULL,
        create_ns INTEGER NOT NULL,
        job BLOB NOT NULL);
      CREATE INDEX jobs_by_state ON jobs (state, priority DESC, id);
      CREATE TABLE job_events (
        job_id INTEGER NOT NULL REFERENCES jobs (id),
        seq INTEGER NOT NULL,
        time_ns INTEGER NOT NULL,
        state INTEGER NOT NULL,
        attempt INTEGER NOT NULL,
        reason TEXT NOT NULL,
        PRIMARY KEY (job_id, seq));
      CREATE TABLE workers (id INTEGER PRIMARY KEY, worker BLOB NOT NULL);
    )sql",
    // 2: the checkpoint catalog.
    R"sql(
      CREATE TABLE checkpoints (
        id INTEGER PRIMARY KEY,
        job_id TEXT NOT NULL,
        step INTEGER NOT NULL,
        directory TEXT NOT NULL,
        state INTEGER NOT NULL,
        create_ns INTEGER NOT NULL,
        checkpoint BLOB NOT NULL);
      CREATE INDEX checkpoints_by_job ON checkpoints (job_id, step);
      CREATE INDEX checkpoints_by_directory ON checkpoints (directory);
    )sql",
    // 3: worker identities (the SHA-256 of the credential issued with each id) and the
    // rendezvous keys of live attempts, so that both outlive a coordinator restart.
    R"sql(
      CREATE TABLE worker_identities (id INTEGER PRIMARY KEY, credential_sha256 TEXT NOT NULL);
      CREATE TABLE rendezvous (
        job_id TEXT NOT NULL,
        attempt INTEGER NOT NULL,
        key TEXT NOT NULL,
        value BLOB NOT NULL,
        PRIMARY KEY (job_id, attempt, key));
    )sql",
    // 4: catalog entries by state, so that the periodic settling of WRITING entries reads those
    // only, not the whole catalog (which keeps every entry of every job, DELETED ones too).
    R"sql(
      CREATE INDEX checkpoints_by_state ON checkpoints (state, id);
    )sql",
};
static_assert(sizeof(kMigrations) / sizeof(kMigrations[0]) == Store::kSchemaVersion);

// A prepared statement that finalizes itself.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) : db_(db) {
    rc_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr);
  }
  ~Stmt() { sqlite3_finalize(stmt_); }
  absl::Status status() const {
    if (rc_ == SQLITE_OK) return absl::OkStatus();
    return absl::InternalError(absl::StrCat("sqlite prepare: ", sqlite3_errmsg(db_)));
  }
  void Bind(int i, int64_t v) { sqlite3_bind_int64(stmt_, i, v); }
  void Bind(int i, const std::string& v) {
    sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  }
  void BindBlob(int i, const std::string& v) {
    sqlite3_bind_blob(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  }
  void BindNull(int i) { sqlite3_bind_null(stmt_, i); }
  // SQLITE_ROW, SQLITE_DONE, or an error code.
  int Step() { return sqlite3_step(stmt_); }
  int64_t Int(int col) { return sqlite3_column_int64(stmt_, col); }
  std::string Text(int col) {
    const void* p = sqlite3_column_blob(stmt_, col);
    return p ? std::string(static_cast<const char*>(p), sqlite3_column_bytes(stmt_, col))
             : std::string();
  }
  absl::Status Done(int rc) {
    if (rc == SQLITE_DONE || rc == SQLITE_ROW) return absl::OkStatus();
    if (rc == SQLITE_FULL) return absl::ResourceExhaustedError("sqlite: disk full");
    if (rc == SQLITE_CONSTRAINT) {
      return absl::AlreadyExistsError(absl::StrCat("sqlite: ", sqlite3_errmsg(db_)));
    }
    return absl::InternalError(absl::StrCat("sqlite: ", sqlite3_errmsg(db_)));
  }

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  int rc_;
};

template <typename Message>
absl::StatusOr<Message> ParseBlob(const std::string& bytes, absl::string_view what) {
  Message m;
  if (!m.ParseFromString(bytes)) {
    return absl::DataLossError(absl::StrCat("stored ", what, " does not parse"));
  }
  return m;
}

int64_t IdNumber(const std::string& id, absl::string_view prefix) {
  absl::string_view digits = id;
  int64_t n = 0;
  if (!absl::ConsumePrefix(&digits, prefix) || !absl::SimpleAtoi(digits, &n)) return -1;
  return n;
}

}  // namespace

absl::StatusOr<int64_t> ParseJobId(const std::string& id) {
  int64_t n = IdNumber(id, "j-");
  if (n <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("job_id '", id.substr(0, 64), "' is not a job id (like j-3)"));
  }
  return n;
}

absl::StatusOr<int64_t> ParseCheckpointId(const std::string& id) {
  int64_t n = IdNumber(id, "c-");
  if (n <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint_id '",
                                                   absl::CHexEscape(id.substr(0, 64)),
                                                   "' is not a checkpoint id (like c-3)"));
  }
  return n;
}

absl::StatusOr<std::unique_ptr<Store>> Store::Open(const std::string& state_dir) {
  if (state_dir.empty()) {
    return absl::InvalidArgumentError("--state-dir is empty; give a directory for the database");
  }
  if (::mkdir(state_dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::FailedPreconditionError(
        absl::StrCat("--state-dir ", state_dir, ": ", std::strerror(errno)));
  }
  const std::string path = state_dir + "/coordinator.db";
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) !=
      SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return absl::FailedPreconditionError(absl::StrCat("opening ", path, ": ", msg));
  }
  sqlite3_busy_timeout(db, 5000);
  std::unique_ptr<Store> store(new Store(db));
  absl::MutexLock lock(&store->mu_);
  // WAL keeps readers off the writer's back; NORMAL sync is durable across process crashes.
  // The page cache is bounded explicitly (kPageCacheKiB): SQLite's default (2 MiB) fills only
  // as queries touch pages, so a coordinator's RSS rose by up to that much long after start
  // (issue 19's chaos soak). The working set (live jobs, the catalog by job and by state,
  // through indexes) is far smaller; other pages come from the OS's file cache.
  MT_RETURN_IF_ERROR(store->Exec(
      absl::StrCat("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON; "
                   "PRAGMA cache_size=-",
                   kPageCacheKiB, ";")));
  MT_RETURN_IF_ERROR(Annotate(store->Migrate(), path));
  return store;
}

Store::~Store() {
  absl::MutexLock lock(&mu_);
  sqlite3_close(db_);
}

absl::Status Store::Exec(const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    return absl::InternalError(absl::StrCat("sqlite: ", msg));
  }
  return absl::OkStatus();
}

absl::Status Store::Migrate() {
  int version = 0;
  {
    Stmt has_meta(db_, "SELECT count(*) FROM sqlite_master WHERE type='table' AND name='meta'");
    MT_RETURN_IF_ERROR(has_meta.status());
    if (has_meta.Step() == SQLITE_ROW && has_meta.Int(0) == 1) {
      Stmt get(db_, "SELECT value FROM meta WHERE key='schema_version'");
      MT_RETURN_IF_ERROR(get.status());
      if (get.Step() == SQLITE_ROW && !absl::SimpleAtoi(get.Text(0), &version)) {
        return absl::DataLossError("meta.schema_version is not a number");
      }
    }
  }
  if (version > kSchemaVersion) {
    return absl::FailedPreconditionError(absl::StrCat("database schema version ", version,
                                                      " is newer than this mt's (", kSchemaVersion,
                                                      "); upgrade mt-coordinator"));
  }
  for (; version < kSchemaVersion; ++version) {
    MT_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
    absl::Status s = Exec(kMigrations[version]);
    if (s.ok()) {
      s = Exec(absl::StrCat("INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', '",
                            version + 1, "')"));
    }
    if (!s.ok()) {
      (void)Exec("ROLLBACK");
      return Annotate(s, absl::StrCat("migrating to schema version ", version + 1));
    }
    MT_RETURN_IF_ERROR(Exec("COMMIT"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Store::GetOrPutMeta(const std::string& key,
                                                const std::string& value_if_absent) {
  if (key == "schema_version" || key == "max_deleted_job_id") {
    return absl::InvalidArgumentError(absl::StrCat("meta key '", key, "' is the store's own"));
  }
  absl::MutexLock lock(&mu_);
  {
    Stmt put(db_, "INSERT OR IGNORE INTO meta (key, value) VALUES (?1, ?2)");
    MT_RETURN_IF_ERROR(put.status());
    put.Bind(1, key);
    put.Bind(2, value_if_absent);
    MT_RETURN_IF_ERROR(put.Done(put.Step()));
  }
  Stmt get(db_, "SELECT value FROM meta WHERE key = ?1");
  MT_RETURN_IF_ERROR(get.status());
  get.Bind(1, key);
  if (get.Step() != SQLITE_ROW) {
    return absl::InternalError(absl::StrCat("meta key '", key, "' vanished after its insert"));
  }
  return get.Text(0);
}

absl::Status Store::InsertEvent(int64_t job_id, const mt::v1::JobEvent& event) {
  Stmt st(
      db_,
      "INSERT INTO job_events (job_id, seq, time_ns, state, attempt, reason) VALUES "
      "(?1, (SELECT coalesce(max(seq), 0) + 1 FROM job_events WHERE job_id = ?1), ?2, ?3, ?4, ?5)");
  MT_RETURN_IF_ERROR(st.status());
  st.Bind(1, job_id);
  st.Bind(2, TimeUtil::TimestampToNanoseconds(event.time()));
  st.Bind(3, static_cast<int64_t>(event.state()));
  st.Bind(4, static_cast<int64_t>(event.attempt()));
  st.Bind(5, event.reason());
  return st.Done(st.Step());
}

absl::StatusOr<std::optional<mt::v1::Job>> Store::FindByRequestId(const std::string& request_id) {
  absl::MutexLock lock(&mu_);
  return FindByRequestIdLocked(request_id);
}

absl::StatusOr<std::optional<mt::v1::Job>> Store::FindByRequestIdLocked(
    const std::string& request_id) {
  if (request_id.empty()) return std::nullopt;
  Stmt find(db_, "SELECT job FROM jobs WHERE request_id = ?1");
  MT_RETURN_IF_ERROR(find.status());
  find.Bind(1, request_id);
  if (find.Step() != SQLITE_ROW) return std::nullopt;
  return ParseBlob<mt::v1::Job>(find.Text(0), "job");
}

absl::StatusOr<mt::v1::Job> Store::CreateJob(mt::v1::Job job, const std::string& request_id,
                                             const mt::v1::JobEvent& first_event) {
  absl::MutexLock lock(&mu_);
  MT_ASSIGN_OR_RETURN(std::optional<mt::v1::Job> earlier, FindByRequestIdLocked(request_id));
  if (earlier.has_value()) return *std::move(earlier);
  MT_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
  auto rollback = [&](absl::Status s) {
    (void)Exec("ROLLBACK");
    return s;
  };
  int64_t id = 0;
  {
    // Past every id ever issued, deleted jobs' included: an id names one job forever.
    Stmt next(db_,
              "SELECT max(coalesce((SELECT max(id) FROM jobs), 0), "
              "coalesce((SELECT CAST(value AS INTEGER) FROM meta WHERE key = "
              "'max_deleted_job_id'), 0)) + 1");
    if (!next.status().ok() || next.Step() != SQLITE_ROW) return rollback(next.status());
    id = next.Int(0);
  }
  job.set_id(absl::StrCat("j-", id));
  {
    Stmt ins(db_,
             "INSERT INTO jobs (id, request_id, name, state, priority, create_ns, job) "
             "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)");
    if (!ins.status().ok()) return rollback(ins.status());
    ins.Bind(1, id);
    if (request_id.empty()) {
      ins.BindNull(2);
    } else {
      ins.Bind(2, request_id);
    }
    ins.Bind(3, job.spec().name());
    ins.Bind(4, static_cast<int64_t>(job.state()));
    ins.Bind(5, static_cast<int64_t>(job.spec().priority()));
    ins.Bind(6, TimeUtil::TimestampToNanoseconds(job.create_time()));
    ins.BindBlob(7, job.SerializeAsString());
    if (absl::Status s = ins.Done(ins.Step()); !s.ok()) return rollback(s);
  }
  if (absl::Status s = InsertEvent(id, first_event); !s.ok()) return rollback(s);
  MT_RETURN_IF_ERROR(Exec("COMMIT"));
  return job;
}

absl::Status Store::UpdateJob(const mt::v1::Job& job,
                              const std::optional<mt::v1::JobEvent>& event) {
  MT_ASSIGN_OR_RETURN(int64_t id, ParseJobId(job.id()));
  absl::MutexLock lock(&mu_);
  MT_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
  Stmt up(db_, "UPDATE jobs SET state = ?2, job = ?3 WHERE id = ?1");
  absl::Status s = up.status();
  if (s.ok()) {
    up.Bind(1, id);
    up.Bind(2, static_cast<int64_t>(job.state()));
    mt::v1::Job stored = job;
    stored.clear_events();
    up.BindBlob(3, stored.SerializeAsString());
    s = up.Done(up.Step());
  }
  if (s.ok() && sqlite3_changes(db_) != 1)
    s = absl::NotFoundError(absl::StrCat("no job ", job.id()));
  if (s.ok() && event.has_value()) s = InsertEvent(id, *event);
  if (!s.ok()) {
    (void)Exec("ROLLBACK");
    return s;
  }
  return Exec("COMMIT");
}

absl::Status Store::DeleteJob(const std::string& job_id) {
  MT_ASSIGN_OR_RETURN(int64_t id, ParseJobId(job_id));
  absl::MutexLock lock(&mu_);
  MT_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
  absl::Status s = absl::OkStatus();
  for (const char* sql :
       {"DELETE FROM job_events WHERE job_id = ?1", "DELETE FROM jobs WHERE id = ?1",
        "INSERT INTO meta (key, value) VALUES ('max_deleted_job_id', ?1) ON CONFLICT (key) DO "
        "UPDATE SET value = max(CAST(value AS INTEGER), excluded.value)"}) {
    Stmt st(db_, sql);
    s = st.status();
    if (!s.ok()) break;
    st.Bind(1, id);
    s = st.Done(st.Step());
    if (s.ok() && absl::string_view(sql).find("FROM jobs") != absl::string_view::npos &&
        sqlite3_changes(db_) != 1) {
      s = absl::NotFoundError(absl::StrCat("no job ", job_id));
    }
    if (!s.ok()) break;
  }
  if (!s.ok()) {
    (void)Exec("ROLLBACK");
    return s;
  }
  return Exec("COMMIT");
}

absl::StatusOr<mt::v1::Job> Store::GetJob(const std::string& job_id) {
  MT_ASSIGN_OR_RETURN(int64_t id, ParseJobId(job_id));
  absl::MutexLock lock(&mu_);
  Stmt st(db_, "SELECT job FROM jobs WHERE id = ?1");
  MT_RETURN_IF_ERROR(st.status());
  st.Bind(1, id);
  if (st.Step() != SQLITE_ROW) return absl::NotFoundError(absl::StrCat("no job ", job_id));
  return ParseBlob<mt::v1::Job>(st.Text(0), "job");
}

absl::StatusOr<std::vector<mt::v1::JobEvent>> Store::Events(const std::string& job_id) {
  MT_ASSIGN_OR_RETURN(int64_t id, ParseJobId(job_id));
  absl::MutexLock lock(&mu_);
  Stmt st(db_,
          "SELECT time_ns, state, attempt, reason FROM job_events WHERE job_id = ?1 ORDER BY seq");
  MT_RETURN_IF_ERROR(st.status());
  st.Bind(1, id);
  std::vector<mt::v1::JobEvent> out;
  int rc;
  while ((rc = st.Step()) == SQLITE_ROW) {
    mt::v1::JobEvent& e = out.emplace_back();
    *e.mutable_time() = TimeUtil::NanosecondsToTimestamp(st.Int(0));
    e.set_state(static_cast<mt::v1::JobState>(st.Int(1)));
    e.set_attempt(static_cast<int32_t>(st.Int(2)));
    e.set_reason(st.Text(3));
  }
  MT_RETURN_IF_ERROR(st.Done(rc));
  return out;
}

absl::StatusOr<std::vector<mt::v1::Job>> Store::AllJobs() {
  absl::MutexLock lock(&mu_);
  Stmt st(db_, "SELECT job FROM jobs ORDER BY id");
  MT_RETURN_IF_ERROR(st.status());
  std::vector<mt::v1::Job> out;
  int rc;
  while ((rc = st.Step()) == SQLITE_ROW) {
    MT_ASSIGN_OR_RETURN(mt::v1::Job job, ParseBlob<mt::v1::Job>(st.Text(0), "job"));
    out.push_back(std::move(job));
  }
  MT_RETURN_IF_ERROR(st.Done(rc));
  return out;
}

absl::Status Store::PutWorker(const mt::v1::Worker& worker) {
  int64_t id = IdNumber(worker.id(), "w-");
  if (id <= 0) return absl::InvalidArgumentError(absl::StrCat("bad worker id ", worker.id()));
  absl::MutexLock lock(&mu_);
  Stmt st(db_, "INSERT OR REPLACE INTO workers (id, worker) VALUES (?1, ?2)");
  MT_RETURN_IF_ERROR(st.status());
  st.Bind(1, id);
  st.BindBlob(2, worker.SerializeAsString());
  return st.Done(st.Step());
}

absl::StatusOr<std::vector<mt::v1::Worker>> Store::AllWorkers() {
  absl::MutexLock lock(&mu_);
  Stmt st(db_, "SELECT worker FROM workers ORDER BY id");
  MT_RETURN_IF_ERROR(st.status());
  std::vector<mt::v1::Worker> out;
  int rc;
  while ((rc = st.Step()) == SQLITE_ROW) {
    MT_ASSIGN_OR_RETURN(mt::v1::Worker w, ParseBlob<mt::v1::Worker>(st.Text(0), "worker"));
    out.push_back(std::move(w));
  }
  MT_RETURN_IF_ERROR(st.Done(rc));
  return out;
}

absl::Status Store::PutWorkerIdentity(int64_t id, const std::string& credential_sha256) {
  if (id <= 0) return absl::InvalidArgumentError(absl::StrCat("bad worker id number ", id));
  absl::MutexLock lock(&mu_);
  Stmt st(db_, "INSERT OR REPLACE INTO worker_identities (id, credential_sha256) VALUES (?1, ?2)");
  MT_RETURN_IF_ERROR(st.status());
  st.Bind(1, id);
  st.Bind(2, credential_sha256);
  return st.Done(st.Step());
}

absl::StatusOr<std::vector<Store::WorkerIdentity>> Store::AllWorkerIdentities() {
  absl::MutexLock lock(&mu_);
  Stmt st(db_, "SELECT id, credential_sha256 FROM worker_identities ORDER BY id");
  MT_RETURN_IF_ERROR(st.status());
  std::vector<WorkerIdentity> out;
  int rc;
  while ((rc = st.Step()) == SQLITE_ROW) out.push_back({st.Int(0), st.Text(1)});
  MT_RETURN_IF_ERROR(st.Done(rc));
  return out;
}

absl::Status Store::PutRendezvousKey(const std::string& job_id, int attempt, const std::string& key,
                                     const std::string& value) {
  absl::MutexLock lock(&mu_);
  Stmt st(db_,
          "INSERT OR REPLACE INTO rendezvous (job_id, attempt, key, value) "
          "VALUES (?1, ?2, ?3, ?4)");
  MT_RETURN_IF_ERROR(st.status());
  st.Bind(1, job_id);
  st.Bind(2, attempt);
  st.Bind(3, key);
  st.BindBlob(4, value);
  return st.Done(st.Step());
}

absl::Status Store::DropRendezvousSpace(const std::string& job_id, int attempt) {
  absl::MutexLock lock(&mu_);
  Stmt st(db_, "DELETE FROM rendezvous WHERE job_id = ?1 AND attempt = ?2");
  MT_RETURN_IF_ERROR(st.status());
  st.Bind(1, job_id);
  st.Bind(2, attempt);
  return st.Done(st.Step());
}

absl::StatusOr<std::vector<Store::RendezvousKey>> Store::AllRendezvousKeys() {
  absl::MutexLock lock(&mu_);
  Stmt st(db_, "SELECT job_id, attempt, key, value FROM rendezvous ORDER BY job_id, attempt");
  MT_RETURN_IF_ERROR(st.status());
  std::vector<RendezvousKey> out;
  int rc;
  while ((rc = st.Step()) == SQLITE_ROW) {
    out.push_back({st.Text(0), static_cast<int>(st.Int(1)), st.Text(2), st.Text(3)});
  }
  MT_RETURN_IF_ERROR(st.Done(rc));
  return out;
}

absl::StatusOr<mt::v1::Checkpoint> Store::CreateCheckpoint(mt::v1::Checkpoint checkpoint) {
  absl::MutexLock lock(&mu_);
  MT_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
  auto rollback = [&](absl::Status s) {
    (void)Exec("ROLLBACK");
    return s;
  };
  int64_t id = 0;
  {
    Stmt next(db_, "SELECT coalesce(max(id), 0) + 1 FROM checkpoints");
    if (!next.status().ok() || next.Step() != SQLITE_ROW) return rollback(next.status());
    id = next.Int(0);
  }
  checkpoint.set_id(absl::StrCat("c-", id));
  checkpoint.clear_loading_job_ids();  // computed when read, never stored
  Stmt ins(db_,
           "INSERT INTO checkpoints (id, job_id, step, directory, state, create_ns, checkpoint) "
           "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)");
  if (!ins.status().ok()) return rollback(ins.status());
  ins.Bind(1, id);
  ins.Bind(2, checkpoint.job_id());
  ins.Bind(3, checkpoint.step());
  ins.Bind(4, checkpoint.directory());
  ins.Bind(5, static_cast<int64_t>(checkpoint.state()));
  ins.Bind(6, TimeUtil::TimestampToNanoseconds(checkpoint.create_time()));
  ins.BindBlob(7, checkpoint.SerializeAsString());
  if (absl::Status s = ins.Done(ins.Step()); !s.ok()) return rollback(s);
  MT_RETURN_IF_ERROR(Exec("COMMIT"));
  return checkpoint;
}

absl::Status Store::UpdateCheckpoint(const mt::v1::Checkpoint& checkpoint) {
  MT_ASSIGN_OR_RETURN(int64_t id, ParseCheckpointId(checkpoint.id()));
  absl::MutexLock lock(&mu_);
  Stmt up(db_,
          "UPDATE checkpoints SET job_id = ?2, step = ?3, directory = ?4, state = ?5, "
          "checkpoint = ?6 WHERE id = ?1");
  MT_RETURN_IF_ERROR(up.status());
  mt::v1::Checkpoint stored = checkpoint;
  stored.clear_loading_job_ids();
  up.Bind(1, id);
  up.Bind(2, stored.job_id());
  up.Bind(3, stored.step());
  up.Bind(4, stored.directory());
  up.Bind(5, static_cast<int64_t>(stored.state()));
  up.BindBlob(6, stored.SerializeAsString());
  MT_RETURN_IF_ERROR(up.Done(up.Step()));
  if (sqlite3_changes(db_) != 1) {
    return absl::NotFoundError(absl::StrCat("no checkpoint ", checkpoint.id()));
  }
  return absl::OkStatus();
}

absl::StatusOr<mt::v1::Checkpoint> Store::GetCheckpoint(const std::string& checkpoint_id) {
  MT_ASSIGN_OR_RETURN(int64_t id, ParseCheckpointId(checkpoint_id));
  absl::MutexLock lock(&mu_);
  Stmt st(db_, "SELECT checkpoint FROM checkpoints WHERE id = ?1");
  MT_RETURN_IF_ERROR(st.status());
  st.Bind(1, id);
  if (st.Step() != SQLITE_ROW) {
    return absl::NotFoundError(absl::StrCat("no checkpoint ", checkpoint_id));
  }
  return ParseBlob<mt::v1::Checkpoint>(st.Text(0), "checkpoint");
}

absl::StatusOr<std::vector<mt::v1::Checkpoint>> Store::ListCheckpoints(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  Stmt st(db_, job_id.empty() ? "SELECT checkpoint FROM checkpoints ORDER BY id"
                              : "SELECT checkpoint FROM checkpoints WHERE job_id = ?1 ORDER BY id");
  MT_RETURN_IF_ERROR(st.status());
  if (!job_id.empty()) st.Bind(1, job_id);
  std::vector<mt::v1::Checkpoint> out;
  int rc;
  while ((rc = st.Step()) == SQLITE_ROW) {
    MT_ASSIGN_OR_RETURN(mt::v1::Checkpoint c,
                        ParseBlob<mt::v1::Checkpoint>(st.Text(0), "checkpoint"));
    out.push_back(std::move(c));
  }
  MT_RETURN_IF_ERROR(st.Done(rc));
  return out;
}

absl::StatusOr<std::vector<mt::v1::Checkpoint>> Store::ListCheckpointsInState(
    mt::v1::CheckpointState state) {
  absl::MutexLock lock(&mu_);
  Stmt st(db_, "SELECT checkpoint FROM checkpoints WHERE state = ?1 ORDER BY id");
  MT_RETURN_IF_ERROR(st.status());
  st.Bind(1, static_cast<int64_t>(state));
  std::vector<mt::v1::Checkpoint> out;
  int rc;
  while ((rc = st.Step()) == SQLITE_ROW) {
    MT_ASSIGN_OR_RETURN(mt::v1::Checkpoint c,
                        ParseBlob<mt::v1::Checkpoint>(st.Text(0), "checkpoint"));
    out.push_back(std::move(c));
  }
  MT_RETURN_IF_ERROR(st.Done(rc));
  return out;
}

absl::StatusOr<std::optional<mt::v1::Checkpoint>> Store::FindCheckpointByDirectory(
    const std::string& directory) {
  absl::MutexLock lock(&mu_);
  Stmt st(db_,
          "SELECT checkpoint FROM checkpoints WHERE directory = ?1 AND state != ?2 "
          "ORDER BY id DESC LIMIT 1");
  MT_RETURN_IF_ERROR(st.status());
  st.Bind(1, directory);
  st.Bind(2, static_cast<int64_t>(mt::v1::CHECKPOINT_STATE_DELETED));
  const int rc = st.Step();
  if (rc == SQLITE_ROW) {
    MT_ASSIGN_OR_RETURN(mt::v1::Checkpoint c,
                        ParseBlob<mt::v1::Checkpoint>(st.Text(0), "checkpoint"));
    return std::optional<mt::v1::Checkpoint>(std::move(c));
  }
  MT_RETURN_IF_ERROR(st.Done(rc));
  return std::optional<mt::v1::Checkpoint>();
}

}  // namespace mt::coordinator
