#include "server/job_store.h"

#include <sqlite3.h>

#include <cstdint>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "util/status_macros.h"

namespace headroom::server {
namespace {

// Schema migrations: kMigrations[v] takes a database from user_version v to v + 1. Each runs in
// one transaction with the version bump, so a crash leaves the old schema or the new one.
constexpr const char* kMigrations[] = {
    // 0 -> 1: the first schema.
    R"sql(
      CREATE TABLE counters (
        name TEXT PRIMARY KEY NOT NULL,
        value INTEGER NOT NULL
      ) WITHOUT ROWID;
      INSERT INTO counters (name, value) VALUES ('job', 0), ('profile', 0);

      CREATE TABLE jobs (
        job_id TEXT PRIMARY KEY NOT NULL,
        state INTEGER NOT NULL,
        submitted_unix_seconds REAL NOT NULL,
        info BLOB NOT NULL
      );
      CREATE INDEX jobs_by_state ON jobs (state);
      CREATE INDEX jobs_by_submitted ON jobs (submitted_unix_seconds DESC, job_id DESC);

      CREATE TABLE plans (
        job_id TEXT PRIMARY KEY NOT NULL,
        plan BLOB NOT NULL
      );

      CREATE TABLE timelines (
        job_id TEXT PRIMARY KEY NOT NULL,
        timeline BLOB NOT NULL
      );

      CREATE TABLE checkpoints (
        job_id TEXT PRIMARY KEY NOT NULL,
        step INTEGER NOT NULL,
        checkpoint BLOB NOT NULL
      );
      CREATE INDEX checkpoints_by_step ON checkpoints (step);

      CREATE TABLE profiles (
        profile_id TEXT PRIMARY KEY NOT NULL,
        created_unix_seconds REAL NOT NULL,
        profile BLOB NOT NULL
      );
      CREATE INDEX profiles_by_created ON profiles (created_unix_seconds DESC, profile_id DESC);

      PRAGMA user_version = 1;
    )sql",
};
static_assert(sizeof(kMigrations) / sizeof(kMigrations[0]) == JobStore::kSchemaVersion,
              "one migration per schema version");

// The WAL file is truncated back to this size after a checkpoint of the database; large
// checkpoints would otherwise leave it as large as the largest transaction.
constexpr const char* kJournalSizeLimitPragma = "PRAGMA journal_size_limit = 67108864";

// Maps a SQLite result code to the closest absl status code.
absl::StatusCode CodeFor(int rc) {
  switch (rc & 0xff) {
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT:
      return absl::StatusCode::kDataLoss;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_IOERR:
    case SQLITE_FULL:
    case SQLITE_CANTOPEN:
    case SQLITE_PROTOCOL:
      return absl::StatusCode::kUnavailable;
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_AUTH:
      return absl::StatusCode::kPermissionDenied;
    case SQLITE_TOOBIG:
      return absl::StatusCode::kResourceExhausted;
    default:
      return absl::StatusCode::kInternal;
  }
}

// Returns `message` serialized, or InvalidArgument naming `what` if it cannot be (over 2 GiB).
absl::StatusOr<std::string> Serialize(const google::protobuf::MessageLite& message,
                                      absl::string_view what) {
  std::string bytes;
  if (!message.SerializeToString(&bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " does not serialize (", message.ByteSizeLong(), " bytes)"));
  }
  return bytes;
}

absl::Status RequireId(const std::string& id, absl::string_view what) {
  if (id.empty()) return absl::InvalidArgumentError(absl::StrCat(what, " has an empty id"));
  return absl::OkStatus();
}

}  // namespace

// A prepared statement, finalized when it goes out of scope. Bind*() remember the first
// failure, which Step() then returns. The bound strings must outlive the last Step().
class JobStore::Statement {
 public:
  explicit Statement(sqlite3_stmt* statement) : statement_(statement) {}
  Statement(Statement&& other) noexcept
      : statement_(std::exchange(other.statement_, nullptr)), bind_rc_(other.bind_rc_) {}
  Statement& operator=(Statement&&) = delete;
  ~Statement() { sqlite3_finalize(statement_); }

  Statement& BindText(int index, absl::string_view text) {
    return Check(sqlite3_bind_text64(statement_, index, text.data(), text.size(), SQLITE_STATIC,
                                     SQLITE_UTF8));
  }
  Statement& BindBlob(int index, absl::string_view bytes) {
    return Check(sqlite3_bind_blob64(statement_, index, bytes.data(), bytes.size(), SQLITE_STATIC));
  }
  Statement& BindInt64(int index, int64_t value) {
    return Check(sqlite3_bind_int64(statement_, index, value));
  }
  Statement& BindDouble(int index, double value) {
    return Check(sqlite3_bind_double(statement_, index, value));
  }

  // Returns SQLITE_ROW, SQLITE_DONE or the error.
  int Step() { return bind_rc_ != SQLITE_OK ? bind_rc_ : sqlite3_step(statement_); }

  // The current row's column `index` (valid until the next Step()).
  absl::string_view ColumnText(int index) {
    const unsigned char* text = sqlite3_column_text(statement_, index);
    const int size = sqlite3_column_bytes(statement_, index);
    return text == nullptr ? absl::string_view() : absl::string_view(
                                                        reinterpret_cast<const char*>(text), size);
  }
  absl::string_view ColumnBlob(int index) {
    const void* blob = sqlite3_column_blob(statement_, index);
    const int size = sqlite3_column_bytes(statement_, index);
    return blob == nullptr ? absl::string_view()
                           : absl::string_view(static_cast<const char*>(blob), size);
  }
  int64_t ColumnInt64(int index) { return sqlite3_column_int64(statement_, index); }

 private:
  Statement& Check(int rc) {
    if (bind_rc_ == SQLITE_OK) bind_rc_ = rc;
    return *this;
  }

  sqlite3_stmt* statement_;
  int bind_rc_ = SQLITE_OK;
};

// A write transaction (BEGIN IMMEDIATE), rolled back when it goes out of scope uncommitted.
// REQUIRES: the store's mu_ is held for the transaction's whole life.
class JobStore::Transaction {
 public:
  explicit Transaction(const JobStore* store) : store_(store) {}
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  ~Transaction() {
    // A failed statement may already have rolled the transaction back.
    if (began_ && !committed_ && !sqlite3_get_autocommit(store_->db_)) {
      sqlite3_exec(store_->db_, "ROLLBACK", nullptr, nullptr, nullptr);
    }
  }

  absl::Status Begin(absl::string_view doing) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    RETURN_IF_ERROR(store_->ExecLocked("BEGIN IMMEDIATE", doing));
    began_ = true;
    return absl::OkStatus();
  }
  absl::Status Commit(absl::string_view doing) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    RETURN_IF_ERROR(store_->ExecLocked("COMMIT", doing));
    committed_ = true;
    return absl::OkStatus();
  }

 private:
  const JobStore* const store_;
  bool began_ = false;
  bool committed_ = false;
};

// ---------------------------------------------------------------------------------------------
// Opening and the schema.
// ---------------------------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::Open(const std::string& state_dir) {
  if (state_dir.empty()) return absl::InvalidArgumentError("empty state directory");
  std::error_code error;
  std::filesystem::create_directories(state_dir, error);
  if (error) {
    return absl::UnavailableError(
        absl::StrCat("cannot create state directory '", state_dir, "': ", error.message()));
  }
  std::string path = (std::filesystem::path(state_dir) / std::string(kDatabaseFileName)).string();

  sqlite3* db = nullptr;
  // NOMUTEX: mu_ serializes every use of the connection.
  const int rc = sqlite3_open_v2(
      path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
      nullptr);
  if (rc != SQLITE_OK) {
    const std::string message = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close(db);
    return absl::Status(CodeFor(rc), absl::StrCat("cannot open headroom database '", path,
                                                  "': ", message));
  }
  std::unique_ptr<JobStore> store(new JobStore(std::move(path), db));
  RETURN_IF_ERROR(store->Initialize());
  return store;
}

JobStore::~JobStore() {
  absl::MutexLock lock(&mu_);
  sqlite3_close(db_);
}

absl::Status JobStore::Initialize() {
  absl::MutexLock lock(&mu_);
  sqlite3_busy_timeout(db_, kBusyTimeoutMilliseconds);

  // WAL: a commit appends to the log, so a killed process leaves the last committed state.
  {
    ASSIGN_OR_RETURN(Statement journal_mode, PrepareLocked("PRAGMA journal_mode = WAL"));
    const int rc = journal_mode.Step();
    if (rc != SQLITE_ROW) return SqliteError(rc, "setting WAL journal mode");
    if (journal_mode.ColumnText(0) != "wal") {
      return absl::FailedPreconditionError(
          absl::StrCat("headroom database '", path_, "': cannot use WAL journal mode (got '",
                       journal_mode.ColumnText(0), "')"));
    }
  }  // finalized: a statement in progress would keep the migration from committing
  // NORMAL syncs only at WAL checkpoints: safe against process crashes, not power loss.
  RETURN_IF_ERROR(ExecLocked("PRAGMA synchronous = NORMAL", "setting synchronous mode"));
  RETURN_IF_ERROR(ExecLocked(kJournalSizeLimitPragma, "setting the journal size limit"));
  return MigrateLocked();
}

absl::Status JobStore::MigrateLocked() {
  // The version is read inside the write transaction, so two daemons opening one fresh
  // database do not both create the schema.
  Transaction transaction(this);
  RETURN_IF_ERROR(transaction.Begin("migrating the schema"));
  int64_t version = 0;
  {
    ASSIGN_OR_RETURN(Statement read, PrepareLocked("PRAGMA user_version"));
    const int rc = read.Step();
    if (rc != SQLITE_ROW) return SqliteError(rc, "reading the schema version");
    version = read.ColumnInt64(0);
  }
  if (version > kSchemaVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "headroom database '", path_, "' has schema version ", version,
        ", newer than this headroomd's ", kSchemaVersion, ": it was written by a newer headroomd"));
  }
  if (version < 0) {
    return absl::DataLossError(absl::StrCat("headroom database '", path_,
                                            "' has a negative schema version ", version));
  }
  for (int64_t from = version; from < kSchemaVersion; ++from) {
    RETURN_IF_ERROR(ExecLocked(
        kMigrations[from], absl::StrCat("migrating the schema from version ", from, " to ",
                                        from + 1)));
  }
  return transaction.Commit("migrating the schema");
}

// ---------------------------------------------------------------------------------------------
// SQLite helpers.
// ---------------------------------------------------------------------------------------------

absl::StatusOr<JobStore::Statement> JobStore::PrepareLocked(const char* sql) const {
  sqlite3_stmt* statement = nullptr;
  const int rc = sqlite3_prepare_v2(db_, sql, -1, &statement, nullptr);
  if (rc != SQLITE_OK) {
    sqlite3_finalize(statement);
    return SqliteError(rc, absl::StrCat("preparing '", sql, "'"));
  }
  return Statement(statement);
}

absl::Status JobStore::ExecLocked(const char* sql, absl::string_view doing) const {
  const int rc = sqlite3_exec(db_, sql, nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return SqliteError(rc, doing);
  return absl::OkStatus();
}

absl::Status JobStore::RunLocked(Statement& statement, absl::string_view doing) const {
  const int rc = statement.Step();
  if (rc != SQLITE_DONE) return SqliteError(rc, doing);
  return absl::OkStatus();
}

absl::Status JobStore::SqliteError(int rc, absl::string_view doing) const {
  // The connection's message is more specific, when it is about this result.
  const char* message = sqlite3_errcode(db_) == rc ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
  return absl::Status(CodeFor(rc),
                      absl::StrCat("headroom database '", path_, "': ", doing, ": ", message));
}

namespace {

// Returns the message of type T parsed from `blob`, or DataLoss naming `what` and `path`.
template <typename T>
absl::StatusOr<T> ParseStored(absl::string_view blob, absl::string_view what,
                              const std::string& path) {
  T message;
  if (!message.ParseFromArray(blob.data(), static_cast<int>(blob.size()))) {
    return absl::DataLossError(absl::StrCat(what, " in headroom database '", path, "': stored ",
                                            T::descriptor()->name(), " (", blob.size(),
                                            " bytes) does not parse"));
  }
  return message;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Ids.
// ---------------------------------------------------------------------------------------------

absl::StatusOr<std::string> JobStore::NewJobId() { return NextId("job"); }

absl::StatusOr<std::string> JobStore::NewProfileId() { return NextId("profile"); }

absl::StatusOr<std::string> JobStore::NextId(const char* name) {
  const std::string doing = absl::StrCat("allocating a ", name, " id");
  absl::MutexLock lock(&mu_);
  Transaction transaction(this);
  RETURN_IF_ERROR(transaction.Begin(doing));
  {
    ASSIGN_OR_RETURN(Statement bump,
                     PrepareLocked("UPDATE counters SET value = value + 1 WHERE name = ?1"));
    bump.BindText(1, name);
    RETURN_IF_ERROR(RunLocked(bump, doing));
  }
  if (sqlite3_changes(db_) != 1) {
    return absl::DataLossError(absl::StrCat("headroom database '", path_, "': no '", name,
                                            "' counter in table counters"));
  }
  int64_t value = 0;
  {
    ASSIGN_OR_RETURN(Statement read, PrepareLocked("SELECT value FROM counters WHERE name = ?1"));
    read.BindText(1, name);
    const int rc = read.Step();
    if (rc != SQLITE_ROW) return SqliteError(rc, doing);
    value = read.ColumnInt64(0);
  }
  RETURN_IF_ERROR(transaction.Commit(doing));
  return absl::StrFormat("%s-%06d", name, value);
}

// ---------------------------------------------------------------------------------------------
// Jobs.
// ---------------------------------------------------------------------------------------------

absl::Status JobStore::PutJob(const proto::JobInfo& job) {
  RETURN_IF_ERROR(RequireId(job.job_id(), absl::StrCat("job named '", job.name(), "'")));
  const std::string what = absl::StrCat("job '", job.job_id(), "'");
  ASSIGN_OR_RETURN(const std::string blob, Serialize(job, what));
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Statement put,
                   PrepareLocked("INSERT OR REPLACE INTO jobs "
                                 "(job_id, state, submitted_unix_seconds, info) "
                                 "VALUES (?1, ?2, ?3, ?4)"));
  put.BindText(1, job.job_id())
      .BindInt64(2, job.state())
      .BindDouble(3, job.submitted_unix_seconds())
      .BindBlob(4, blob);
  return RunLocked(put, absl::StrCat("writing ", what));
}

absl::StatusOr<std::vector<proto::JobInfo>> JobStore::LoadJobs() const {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Statement load,
                   PrepareLocked("SELECT job_id, info FROM jobs "
                                 "ORDER BY submitted_unix_seconds DESC, job_id DESC"));
  std::vector<proto::JobInfo> jobs;
  int rc;
  while ((rc = load.Step()) == SQLITE_ROW) {
    ASSIGN_OR_RETURN(proto::JobInfo job,
                     ParseStored<proto::JobInfo>(
                         load.ColumnBlob(1), absl::StrCat("job '", load.ColumnText(0), "'"),
                         path_));
    jobs.push_back(std::move(job));
  }
  if (rc != SQLITE_DONE) return SqliteError(rc, "loading jobs");
  return jobs;
}

absl::StatusOr<proto::JobInfo> JobStore::GetJob(const std::string& job_id) const {
  const std::string what = absl::StrCat("job '", job_id, "'");
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Statement get, PrepareLocked("SELECT info FROM jobs WHERE job_id = ?1"));
  get.BindText(1, job_id);
  const int rc = get.Step();
  if (rc == SQLITE_DONE) return absl::NotFoundError(absl::StrCat("no ", what));
  if (rc != SQLITE_ROW) return SqliteError(rc, absl::StrCat("reading ", what));
  return ParseStored<proto::JobInfo>(get.ColumnBlob(0), what, path_);
}

// ---------------------------------------------------------------------------------------------
// Plans and timelines.
// ---------------------------------------------------------------------------------------------

absl::Status JobStore::PutPlan(const std::string& job_id, const proto::PlanResponse& plan) {
  RETURN_IF_ERROR(RequireId(job_id, "plan's job"));
  const std::string what = absl::StrCat("plan of job '", job_id, "'");
  ASSIGN_OR_RETURN(const std::string blob, Serialize(plan, what));
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Statement put,
                   PrepareLocked("INSERT OR REPLACE INTO plans (job_id, plan) VALUES (?1, ?2)"));
  put.BindText(1, job_id).BindBlob(2, blob);
  return RunLocked(put, absl::StrCat("writing ", what));
}

absl::StatusOr<proto::PlanResponse> JobStore::GetPlan(const std::string& job_id) const {
  const std::string what = absl::StrCat("plan of job '", job_id, "'");
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Statement get, PrepareLocked("SELECT plan FROM plans WHERE job_id = ?1"));
  get.BindText(1, job_id);
  const int rc = get.Step();
  if (rc == SQLITE_DONE) return absl::NotFoundError(absl::StrCat("no ", what));
  if (rc != SQLITE_ROW) return SqliteError(rc, absl::StrCat("reading ", what));
  return ParseStored<proto::PlanResponse>(get.ColumnBlob(0), what, path_);
}

absl::Status JobStore::PutTimeline(const std::string& job_id,
                                   const proto::MemoryTimeline& timeline) {
  RETURN_IF_ERROR(RequireId(job_id, "timeline's job"));
  const std::string what = absl::StrCat("timeline of job '", job_id, "'");
  ASSIGN_OR_RETURN(const std::string blob, Serialize(timeline, what));
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(
      Statement put,
      PrepareLocked("INSERT OR REPLACE INTO timelines (job_id, timeline) VALUES (?1, ?2)"));
  put.BindText(1, job_id).BindBlob(2, blob);
  return RunLocked(put, absl::StrCat("writing ", what));
}

absl::StatusOr<proto::MemoryTimeline> JobStore::GetTimeline(const std::string& job_id) const {
  const std::string what = absl::StrCat("timeline of job '", job_id, "'");
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Statement get,
                   PrepareLocked("SELECT timeline FROM timelines WHERE job_id = ?1"));
  get.BindText(1, job_id);
  const int rc = get.Step();
  if (rc == SQLITE_DONE) return absl::NotFoundError(absl::StrCat("no ", what));
  if (rc != SQLITE_ROW) return SqliteError(rc, absl::StrCat("reading ", what));
  return ParseStored<proto::MemoryTimeline>(get.ColumnBlob(0), what, path_);
}

// ---------------------------------------------------------------------------------------------
// Checkpoints.
// ---------------------------------------------------------------------------------------------

absl::Status JobStore::PutCheckpoint(const proto::Checkpoint& checkpoint) {
  RETURN_IF_ERROR(RequireId(checkpoint.job_id(), "checkpoint's job"));
  const std::string what = absl::StrCat("checkpoint of job '", checkpoint.job_id(), "' at step ",
                                        checkpoint.step());
  // Serialized before taking the lock: a large checkpoint takes a while.
  ASSIGN_OR_RETURN(const std::string blob, Serialize(checkpoint, what));
  const std::string doing = absl::StrCat("writing ", what);
  absl::MutexLock lock(&mu_);
  Transaction transaction(this);
  RETURN_IF_ERROR(transaction.Begin(doing));
  {
    ASSIGN_OR_RETURN(Statement drop, PrepareLocked("DELETE FROM checkpoints WHERE job_id = ?1"));
    drop.BindText(1, checkpoint.job_id());
    RETURN_IF_ERROR(RunLocked(drop, doing));
  }
  {
    ASSIGN_OR_RETURN(Statement put, PrepareLocked("INSERT INTO checkpoints "
                                                  "(job_id, step, checkpoint) "
                                                  "VALUES (?1, ?2, ?3)"));
    put.BindText(1, checkpoint.job_id())
        .BindInt64(2, static_cast<int64_t>(checkpoint.step()))
        .BindBlob(3, blob);
    RETURN_IF_ERROR(RunLocked(put, doing));
  }
  return transaction.Commit(doing);
}

absl::StatusOr<std::optional<proto::Checkpoint>> JobStore::GetCheckpoint(
    const std::string& job_id) const {
  const std::string what = absl::StrCat("checkpoint of job '", job_id, "'");
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Statement get,
                   PrepareLocked("SELECT checkpoint FROM checkpoints WHERE job_id = ?1"));
  get.BindText(1, job_id);
  const int rc = get.Step();
  if (rc == SQLITE_DONE) return std::optional<proto::Checkpoint>();
  if (rc != SQLITE_ROW) return SqliteError(rc, absl::StrCat("reading ", what));
  ASSIGN_OR_RETURN(proto::Checkpoint checkpoint,
                   ParseStored<proto::Checkpoint>(get.ColumnBlob(0), what, path_));
  return std::optional<proto::Checkpoint>(std::move(checkpoint));
}

absl::Status JobStore::DeleteCheckpoint(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Statement drop, PrepareLocked("DELETE FROM checkpoints WHERE job_id = ?1"));
  drop.BindText(1, job_id);
  return RunLocked(drop, absl::StrCat("deleting the checkpoint of job '", job_id, "'"));
}

// ---------------------------------------------------------------------------------------------
// Profiles.
// ---------------------------------------------------------------------------------------------

absl::Status JobStore::PutProfile(const proto::StoredProfile& profile) {
  RETURN_IF_ERROR(RequireId(profile.profile_id(), "profile"));
  const std::string what = absl::StrCat("profile '", profile.profile_id(), "'");
  ASSIGN_OR_RETURN(const std::string blob, Serialize(profile, what));
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Statement put,
                   PrepareLocked("INSERT OR REPLACE INTO profiles "
                                 "(profile_id, created_unix_seconds, profile) "
                                 "VALUES (?1, ?2, ?3)"));
  put.BindText(1, profile.profile_id())
      .BindDouble(2, profile.created_unix_seconds())
      .BindBlob(3, blob);
  return RunLocked(put, absl::StrCat("writing ", what));
}

absl::StatusOr<std::vector<proto::StoredProfile>> JobStore::LoadProfiles() const {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Statement load,
                   PrepareLocked("SELECT profile_id, profile FROM profiles "
                                 "ORDER BY created_unix_seconds DESC, profile_id DESC"));
  std::vector<proto::StoredProfile> profiles;
  int rc;
  while ((rc = load.Step()) == SQLITE_ROW) {
    ASSIGN_OR_RETURN(proto::StoredProfile profile,
                     ParseStored<proto::StoredProfile>(
                         load.ColumnBlob(1), absl::StrCat("profile '", load.ColumnText(0), "'"),
                         path_));
    profiles.push_back(std::move(profile));
  }
  if (rc != SQLITE_DONE) return SqliteError(rc, "loading profiles");
  return profiles;
}

}  // namespace headroom::server
