#include "server/job_store.h"

#include <sqlite3.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <system_error>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/wire_format_lite.h"
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
    case SQLITE_CANTOPEN:
    case SQLITE_PROTOCOL:
      return absl::StatusCode::kUnavailable;
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_AUTH:
      return absl::StatusCode::kPermissionDenied;
    case SQLITE_TOOBIG:
    case SQLITE_FULL:
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

// The payload that marks a full disk (IsDiskFull).
constexpr absl::string_view kDiskFullPayload = "type.headroom/disk-full";

// Returns whether SQLite's result `rc` on `db` means its disk is full: SQLITE_FULL (SQLite's
// own reading of ENOSPC on a write), or an I/O error with ENOSPC, such as growing the WAL's
// shared-memory index (SQLITE_IOERR_SHMSIZE), which a reader needs too.
bool SqliteDiskFull(int rc, sqlite3* db) {
  if ((rc & 0xff) == SQLITE_FULL) return true;
  if ((rc & 0xff) != SQLITE_IOERR) return false;
  return sqlite3_system_errno(db) == ENOSPC || sqlite3_extended_errcode(db) == SQLITE_IOERR_SHMSIZE;
}

absl::Status RequireId(const std::string& id, absl::string_view what) {
  if (id.empty()) return absl::InvalidArgumentError(absl::StrCat(what, " has an empty id"));
  return absl::OkStatus();
}

}  // namespace

absl::Status DiskFullError(absl::string_view message) {
  absl::Status status = absl::ResourceExhaustedError(message);
  status.SetPayload(kDiskFullPayload, absl::Cord("1"));
  return status;
}

bool IsDiskFull(const absl::Status& status) {
  return status.GetPayload(kDiskFullPayload).has_value();
}

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

// A blob open for incremental I/O (sqlite3_blob_*), closed when it goes out of scope; it
// reads or writes in place and never changes the blob's size. Read() and Write() go on from
// where the last one stopped, and return SQLITE_OK or the error.
// REQUIRES: the store's mu_ is held for the blob's whole life.
class JobStore::Blob {
 public:
  explicit Blob(sqlite3_blob* blob) : blob_(blob) {}
  Blob(Blob&& other) noexcept
      : blob_(std::exchange(other.blob_, nullptr)), offset_(other.offset_) {}
  Blob& operator=(Blob&&) = delete;
  ~Blob() { sqlite3_blob_close(blob_); }

  // The blob's size; SQLite keeps it below 2^31.
  int bytes() const { return sqlite3_blob_bytes(blob_); }
  // The bytes read or written so far.
  int offset() const { return offset_; }

  // Writes `data` next. SQLITE_ERROR when it would run past the end.
  int Write(absl::Span<const uint8_t> data) {
    if (data.size() > static_cast<size_t>(bytes() - offset_)) return SQLITE_ERROR;
    const int n = static_cast<int>(data.size());
    const int rc = n == 0 ? SQLITE_OK : sqlite3_blob_write(blob_, data.data(), n, offset_);
    if (rc == SQLITE_OK) offset_ += n;
    return rc;
  }
  int Write(absl::string_view data) {
    return Write(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(data.data()), data.size()));
  }
  // Reads the next `n` bytes (REQUIRES: n <= bytes() - offset()) into `dst`.
  int Read(void* dst, int n) {
    const int rc = n == 0 ? SQLITE_OK : sqlite3_blob_read(blob_, dst, n, offset_);
    if (rc == SQLITE_OK) offset_ += n;
    return rc;
  }

 private:
  sqlite3_blob* blob_;
  int offset_ = 0;
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
  absl::StatusOr<std::unique_ptr<JobStore>> shared = OpenDatabase(path, /*exclusive=*/false);
  if (shared.ok() || !IsDiskFull(shared.status())) return shared;
  // A full disk: a reader of a WAL database writes its shared-memory index beside it, unless
  // the connection holds the exclusive lock (the index then lives in this process's memory).
  absl::StatusOr<std::unique_ptr<JobStore>> exclusive = OpenDatabase(path, /*exclusive=*/true);
  if (exclusive.ok()) return exclusive;
  return shared.status();
}

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::OpenDatabase(std::string path, bool exclusive) {
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
  if (exclusive) {
    absl::MutexLock lock(&store->mu_);
    RETURN_IF_ERROR(store->ExecLocked("PRAGMA locking_mode = EXCLUSIVE", "taking the lock"));
  }
  RETURN_IF_ERROR(store->Initialize());
  return store;
}

std::string JobStore::state_dir() const {
  return std::filesystem::path(path_).parent_path().string();
}

absl::StatusOr<uint64_t> JobStore::FreeDiskBytes() const {
  const std::string dir = state_dir();
  struct statvfs fs;
  if (statvfs(dir.c_str(), &fs) != 0) {
    return absl::UnavailableError(
        absl::StrCat("state directory '", dir, "': cannot read its free space: ", strerror(errno)));
  }
  return static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
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

absl::StatusOr<int64_t> JobStore::SchemaVersionLocked() const {
  ASSIGN_OR_RETURN(Statement read, PrepareLocked("PRAGMA user_version"));
  const int rc = read.Step();
  if (rc != SQLITE_ROW) return SqliteError(rc, "reading the schema version");
  return read.ColumnInt64(0);
}

absl::Status JobStore::MigrateLocked() {
  // A current database is opened without a write (a full disk allows none).
  ASSIGN_OR_RETURN(int64_t version, SchemaVersionLocked());
  if (version == kSchemaVersion) return absl::OkStatus();
  // The version is read again inside the write transaction, so two daemons opening one
  // fresh database do not both create the schema.
  Transaction transaction(this);
  RETURN_IF_ERROR(transaction.Begin("migrating the schema"));
  ASSIGN_OR_RETURN(version, SchemaVersionLocked());
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

absl::StatusOr<JobStore::Blob> JobStore::OpenBlobLocked(const char* table, const char* column,
                                                        int64_t rowid, bool writable,
                                                        absl::string_view doing) const {
  sqlite3_blob* blob = nullptr;
  const int rc = sqlite3_blob_open(db_, "main", table, column, rowid, writable ? 1 : 0, &blob);
  if (rc != SQLITE_OK) {
    sqlite3_blob_close(blob);
    return SqliteError(rc, doing);
  }
  return Blob(blob);
}

absl::Status JobStore::SqliteError(int rc, absl::string_view doing) const {
  // The connection's message is more specific, when it is about this result.
  const char* message = sqlite3_errcode(db_) == rc ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
  if (SqliteDiskFull(rc, db_)) {
    return DiskFullError(absl::StrCat("headroom database '", path_, "': ", doing,
                                      ": the disk holding the state directory '", state_dir(),
                                      "' is full (", message, ")"));
  }
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

template <typename T>
absl::StatusOr<T> JobStore::GetStored(const char* sql, const std::string& key,
                                      const std::string& what) const {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Statement get, PrepareLocked(sql));
  get.BindText(1, key);
  const int rc = get.Step();
  if (rc == SQLITE_DONE) return absl::NotFoundError(absl::StrCat("no ", what));
  if (rc != SQLITE_ROW) return SqliteError(rc, absl::StrCat("reading ", what));
  return ParseStored<T>(get.ColumnBlob(0), what, path_);
}

template <typename T>
absl::StatusOr<std::vector<T>> JobStore::LoadStored(const char* sql, absl::string_view noun,
                                                    absl::string_view doing) const {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Statement load, PrepareLocked(sql));
  std::vector<T> messages;
  std::vector<SkippedRow> skipped;
  int rc;
  while ((rc = load.Step()) == SQLITE_ROW) {
    const std::string id(load.ColumnText(0));
    const absl::string_view blob = load.ColumnBlob(1);
    T message;
    if (!message.ParseFromArray(blob.data(), static_cast<int>(blob.size()))) {
      skipped.push_back(SkippedRow{std::string(noun), id,
                                   absl::StrCat("stored ", T::descriptor()->name(), " (",
                                                blob.size(), " bytes) does not parse")});
      continue;
    }
    messages.push_back(std::move(message));
  }
  if (rc != SQLITE_DONE) return SqliteError(rc, doing);
  skipped_.erase(std::remove_if(skipped_.begin(), skipped_.end(),
                                [noun](const SkippedRow& row) { return row.noun == noun; }),
                 skipped_.end());
  skipped_.insert(noun == "job" ? skipped_.begin() : skipped_.end(), skipped.begin(),
                  skipped.end());
  return messages;
}

absl::Status JobStore::PutStored(const char* sql, const google::protobuf::MessageLite& message,
                                 const std::string& what,
                                 absl::FunctionRef<void(Statement&, const std::string&)> bind) {
  // Serialized before taking the lock.
  ASSIGN_OR_RETURN(const std::string blob, Serialize(message, what));
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Statement put, PrepareLocked(sql));
  bind(put, blob);
  return RunLocked(put, absl::StrCat("writing ", what));
}

absl::Status JobStore::PutForJob(const char* sql, const std::string& job_id,
                                 const google::protobuf::MessageLite& message,
                                 absl::string_view noun) {
  RETURN_IF_ERROR(RequireId(job_id, absl::StrCat(noun, "'s job")));
  return PutStored(sql, message, absl::StrCat(noun, " of job '", job_id, "'"),
                   [&job_id](Statement& put, const std::string& blob) {
                     put.BindText(1, job_id).BindBlob(2, blob);
                   });
}

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
  return PutStored("INSERT OR REPLACE INTO jobs (job_id, state, submitted_unix_seconds, info) "
                   "VALUES (?1, ?2, ?3, ?4)",
                   job, absl::StrCat("job '", job.job_id(), "'"),
                   [&job](Statement& put, const std::string& blob) {
                     put.BindText(1, job.job_id())
                         .BindInt64(2, job.state())
                         .BindDouble(3, job.submitted_unix_seconds())
                         .BindBlob(4, blob);
                   });
}

absl::StatusOr<std::vector<proto::JobInfo>> JobStore::LoadJobs() const {
  return LoadStored<proto::JobInfo>(
      "SELECT job_id, info FROM jobs ORDER BY submitted_unix_seconds DESC, job_id DESC", "job",
      "loading jobs");
}

absl::StatusOr<proto::JobInfo> JobStore::GetJob(const std::string& job_id) const {
  return GetStored<proto::JobInfo>("SELECT info FROM jobs WHERE job_id = ?1", job_id,
                                   absl::StrCat("job '", job_id, "'"));
}

// ---------------------------------------------------------------------------------------------
// Plans and timelines.
// ---------------------------------------------------------------------------------------------

absl::Status JobStore::PutPlan(const std::string& job_id, const proto::PlanResponse& plan) {
  return PutForJob("INSERT OR REPLACE INTO plans (job_id, plan) VALUES (?1, ?2)", job_id, plan,
                   "plan");
}

absl::StatusOr<proto::PlanResponse> JobStore::GetPlan(const std::string& job_id) const {
  return GetStored<proto::PlanResponse>("SELECT plan FROM plans WHERE job_id = ?1", job_id,
                                        absl::StrCat("plan of job '", job_id, "'"));
}

absl::Status JobStore::PutTimeline(const std::string& job_id,
                                   const proto::MemoryTimeline& timeline) {
  return PutForJob("INSERT OR REPLACE INTO timelines (job_id, timeline) VALUES (?1, ?2)",
                   job_id, timeline, "timeline");
}

absl::StatusOr<proto::MemoryTimeline> JobStore::GetTimeline(const std::string& job_id) const {
  return GetStored<proto::MemoryTimeline>("SELECT timeline FROM timelines WHERE job_id = ?1",
                                          job_id,
                                          absl::StrCat("timeline of job '", job_id, "'"));
}

// ---------------------------------------------------------------------------------------------
// Checkpoints.
// ---------------------------------------------------------------------------------------------

namespace {

using google::protobuf::io::CodedOutputStream;
using google::protobuf::internal::WireFormatLite;

// Protobuf writes a message's fields in field-number order; the streamed layout below
// depends on these numbers (and job_store_test on there being no others).
static_assert(proto::Checkpoint::kJobIdFieldNumber == 1 &&
                  proto::Checkpoint::kStepFieldNumber == 2 &&
                  proto::Checkpoint::kTensorsFieldNumber == 3 &&
                  proto::Checkpoint::kLossFieldNumber == 4,
              "Checkpoint's fields moved: update LayOutCheckpoint()");
static_assert(proto::TensorValue::kNameFieldNumber == 1 &&
                  proto::TensorValue::kShapeFieldNumber == 2 &&
                  proto::TensorValue::kDtypeFieldNumber == 3 &&
                  proto::TensorValue::kDataFieldNumber == 4,
              "TensorValue's fields moved: update LayOutCheckpoint()");

// How much of a stored checkpoint GetCheckpoint() reads from SQLite at a time.
constexpr int kCheckpointReadChunkBytes = 256 << 10;

// A checkpoint's stored bytes but for its tensors' data, cut where each tensor's data goes:
// the serialized proto::Checkpoint is `prefix`, then each tensor's `tensor_heads[i]` followed
// by its data, then `suffix`.
struct CheckpointLayout {
  // The Checkpoint's fields before `tensors`: job_id and step.
  std::string prefix;
  // Each tensor's key and length in the Checkpoint, its fields before `data` (name, shape,
  // dtype), and data's key and length (absent for empty data, as proto3 omits it).
  std::vector<std::string> tensor_heads;
  // The Checkpoint's fields after `tensors`: loss.
  std::string suffix;
  // The serialized Checkpoint's size, data included.
  uint64_t total_bytes = 0;
  uint64_t largest_tensor_bytes = 0;
};

void AppendVarint(uint64_t value, std::string* out) {
  uint8_t bytes[10];  // The longest varint.
  const uint8_t* end = CodedOutputStream::WriteVarint64ToArray(value, bytes);
  out->append(reinterpret_cast<const char*>(bytes), end - bytes);
}

// Appends the key of length-delimited field `number` and the length `length_bytes`.
void AppendFieldKeyAndLength(int number, uint64_t length_bytes, std::string* out) {
  AppendVarint(WireFormatLite::MakeTag(number, WireFormatLite::WIRETYPE_LENGTH_DELIMITED), out);
  AppendVarint(length_bytes, out);
}

// Returns the layout of the Checkpoint of `header` and `tensors`. The fields that are not
// data are serialized by protobuf itself (which leaves out proto3 defaults), so the bytes
// equal the Checkpoint's own serialization.
CheckpointLayout LayOutCheckpoint(const CheckpointHeader& header,
                                  absl::Span<const CheckpointTensorInfo> tensors) {
  CheckpointLayout layout;
  proto::Checkpoint fields;
  fields.set_job_id(header.job_id);
  fields.set_step(header.step);
  layout.prefix = fields.SerializeAsString();
  fields.Clear();
  fields.set_loss(header.loss);
  layout.suffix = fields.SerializeAsString();
  layout.total_bytes = layout.prefix.size() + layout.suffix.size();
  for (const CheckpointTensorInfo& tensor : tensors) {
    proto::TensorValue value;
    value.set_name(tensor.name);
    value.mutable_shape()->Add(tensor.shape.begin(), tensor.shape.end());
    value.set_dtype(tensor.dtype);
    std::string value_head = value.SerializeAsString();
    if (tensor.bytes > 0) {
      AppendFieldKeyAndLength(proto::TensorValue::kDataFieldNumber, tensor.bytes, &value_head);
    }
    std::string head;
    AppendFieldKeyAndLength(proto::Checkpoint::kTensorsFieldNumber,
                            value_head.size() + tensor.bytes, &head);
    head += value_head;
    layout.total_bytes += head.size() + tensor.bytes;
    layout.largest_tensor_bytes = std::max(layout.largest_tensor_bytes, tensor.bytes);
    layout.tensor_heads.push_back(std::move(head));
  }
  return layout;
}

// Writes the checkpoint `layout` lays out through `write`, in order, each tensor's data read
// by `read` into one buffer of the largest tensor's size. Returns the first error of
// `write`, or of `read` naming the tensor after `doing`.
absl::Status FillCheckpoint(const CheckpointLayout& layout,
                            absl::Span<const CheckpointTensorInfo> tensors,
                            CheckpointTensorReader read,
                            absl::FunctionRef<absl::Status(absl::string_view)> write,
                            absl::string_view doing) {
  // Not zeroed: `read` fills what is written.
  std::unique_ptr<char[]> buffer(new char[std::max<uint64_t>(layout.largest_tensor_bytes, 1)]);
  RETURN_IF_ERROR(write(layout.prefix));
  for (size_t i = 0; i < tensors.size(); ++i) {
    RETURN_IF_ERROR(write(layout.tensor_heads[i]));
    if (tensors[i].bytes == 0) continue;
    const absl::Status read_status =
        read(i, absl::MakeSpan(reinterpret_cast<uint8_t*>(buffer.get()), tensors[i].bytes));
    if (!read_status.ok()) {
      return absl::Status(read_status.code(),
                          absl::StrCat(doing, ": reading tensor '", tensors[i].name, "': ",
                                       read_status.message()));
    }
    RETURN_IF_ERROR(write(absl::string_view(buffer.get(), tensors[i].bytes)));
  }
  return write(layout.suffix);
}

// A protobuf input stream of `bytes` bytes that `read(dst, n)` gives in order, returning
// SQLITE_OK or the error (which rc() keeps).
class SqliteInputStream : public google::protobuf::io::CopyingInputStream {
 public:
  SqliteInputStream(int bytes, absl::FunctionRef<int(void* dst, int n)> read)
      : remaining_bytes_(bytes), read_(read) {}

  int Read(void* buffer, int size) override {
    const int n = std::min(size, remaining_bytes_);
    if (n <= 0) return 0;  // The end.
    rc_ = read_(buffer, n);
    if (rc_ != SQLITE_OK) return -1;
    remaining_bytes_ -= n;
    return n;
  }

  int rc() const { return rc_; }

 private:
  int remaining_bytes_;
  absl::FunctionRef<int(void*, int)> read_;
  int rc_ = SQLITE_OK;
};

}  // namespace

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

absl::Status JobStore::PutCheckpoint(const CheckpointHeader& header,
                                     absl::Span<const CheckpointTensorInfo> tensors,
                                     CheckpointTensorReader read) {
  RETURN_IF_ERROR(RequireId(header.job_id, "checkpoint's job"));
  const std::string doing = absl::StrCat("writing checkpoint of job '", header.job_id,
                                         "' at step ", header.step);
  // Laid out before taking the lock; only the tensors' data is read under it.
  const CheckpointLayout layout = LayOutCheckpoint(header, tensors);
  absl::MutexLock lock(&mu_);
  const int64_t limit_bytes = sqlite3_limit(db_, SQLITE_LIMIT_LENGTH, -1);
  if (layout.total_bytes > static_cast<uint64_t>(limit_bytes)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("headroom database '", path_, "': ", doing, ": it is ", layout.total_bytes,
                     " bytes, over SQLite's blob limit of ", limit_bytes, " bytes"));
  }
  // 1. Replace the row by one whose blob is `total_bytes` zeros, which SQLite writes to its
  //    pages without holding them in memory (the blob is the row's last column).
  Transaction transaction(this);
  RETURN_IF_ERROR(transaction.Begin(doing));
  {
    ASSIGN_OR_RETURN(Statement drop, PrepareLocked("DELETE FROM checkpoints WHERE job_id = ?1"));
    drop.BindText(1, header.job_id);
    RETURN_IF_ERROR(RunLocked(drop, doing));
  }
  {
    ASSIGN_OR_RETURN(Statement put, PrepareLocked("INSERT INTO checkpoints "
                                                  "(job_id, step, checkpoint) "
                                                  "VALUES (?1, ?2, zeroblob(?3))"));
    put.BindText(1, header.job_id)
        .BindInt64(2, static_cast<int64_t>(header.step))
        .BindInt64(3, static_cast<int64_t>(layout.total_bytes));
    RETURN_IF_ERROR(RunLocked(put, doing));
  }
  // 2. Write the blob in place, a tensor at a time; closed before the commit.
  {
    ASSIGN_OR_RETURN(Blob blob, OpenBlobLocked("checkpoints", "checkpoint",
                                               sqlite3_last_insert_rowid(db_),
                                               /*writable=*/true, doing));
    RETURN_IF_ERROR(FillCheckpoint(layout, tensors, read,
                                   [&](absl::string_view bytes) -> absl::Status {
                                     const int rc = blob.Write(bytes);
                                     return rc == SQLITE_OK ? absl::OkStatus()
                                                            : SqliteError(rc, doing);
                                   },
                                   doing));
    if (static_cast<uint64_t>(blob.offset()) != layout.total_bytes) {
      return absl::InternalError(absl::StrCat(doing, ": wrote ", blob.offset(), " of ",
                                              layout.total_bytes, " bytes: a bug"));
    }
  }
  return transaction.Commit(doing);
}

absl::StatusOr<std::optional<proto::Checkpoint>> JobStore::GetCheckpoint(
    const std::string& job_id) const {
  const std::string what = absl::StrCat("checkpoint of job '", job_id, "'");
  const std::string doing = absl::StrCat("reading ", what);
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Statement get,
                   PrepareLocked("SELECT rowid FROM checkpoints WHERE job_id = ?1"));
  get.BindText(1, job_id);
  const int rc = get.Step();
  if (rc == SQLITE_DONE) return std::optional<proto::Checkpoint>();
  if (rc != SQLITE_ROW) return SqliteError(rc, doing);
  // `get` stays on its row while the blob is read, so its read transaction keeps the row
  // as it was. The blob is parsed as it is read, without a copy of it whole.
  ASSIGN_OR_RETURN(Blob blob, OpenBlobLocked("checkpoints", "checkpoint", get.ColumnInt64(0),
                                             /*writable=*/false, doing));
  SqliteInputStream input(blob.bytes(), [&blob](void* dst, int n) { return blob.Read(dst, n); });
  google::protobuf::io::CopyingInputStreamAdaptor stream(&input, kCheckpointReadChunkBytes);
  proto::Checkpoint checkpoint;
  if (!checkpoint.ParseFromZeroCopyStream(&stream)) {
    if (input.rc() != SQLITE_OK) return SqliteError(input.rc(), doing);
    return absl::DataLossError(absl::StrCat(what, " in headroom database '", path_,
                                            "': stored Checkpoint (", blob.bytes(),
                                            " bytes) does not parse"));
  }
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
  return PutStored("INSERT OR REPLACE INTO profiles (profile_id, created_unix_seconds, profile) "
                   "VALUES (?1, ?2, ?3)",
                   profile, absl::StrCat("profile '", profile.profile_id(), "'"),
                   [&profile](Statement& put, const std::string& blob) {
                     put.BindText(1, profile.profile_id())
                         .BindDouble(2, profile.created_unix_seconds())
                         .BindBlob(3, blob);
                   });
}

absl::StatusOr<std::vector<proto::StoredProfile>> JobStore::LoadProfiles() const {
  return LoadStored<proto::StoredProfile>(
      "SELECT profile_id, profile FROM profiles "
      "ORDER BY created_unix_seconds DESC, profile_id DESC",
      "profile", "loading profiles");
}

std::vector<SkippedRow> JobStore::SkippedRows() const {
  absl::MutexLock lock(&mu_);
  return skipped_;
}

}  // namespace headroom::server
