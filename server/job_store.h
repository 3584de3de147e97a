// headroomd's persistence: jobs, their plans, timelines and checkpoints, and profiles, kept in
// one SQLite database so that they survive a restart (or a SIGKILL) of the daemon.
#ifndef HEADROOM_SERVER_JOB_STORE_H_
#define HEADROOM_SERVER_JOB_STORE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "google/protobuf/message_lite.h"
#include "proto/headroom.pb.h"

struct sqlite3;

namespace headroom::server {

// The fields of a checkpoint besides its tensors, for PutCheckpoint() from a reader.
struct CheckpointHeader {
  std::string job_id;
  uint64_t step = 0;
  double loss = 0;
};

// A checkpoint tensor's TensorValue without its data, and the size of the data that
// PutCheckpoint()'s reader will give.
struct CheckpointTensorInfo {
  std::string name;
  std::vector<int64_t> shape;
  proto::DType dtype = proto::DTYPE_FLOAT32;
  uint64_t bytes = 0;
};

// Fills `dst` (exactly the tensor's bytes) with the data of tensor `index`; an error
// abandons the checkpoint.
using CheckpointTensorReader =
    absl::FunctionRef<absl::Status(size_t index, absl::Span<uint8_t> dst)>;

// A stored row that LoadJobs() or LoadProfiles() left out because it does not parse.
struct SkippedRow {
  // "job" or "profile".
  std::string noun;
  // Its job or profile id.
  std::string id;
  // Why ("stored JobInfo (2 bytes) does not parse").
  std::string reason;
};

// Returns ResourceExhausted with `message`, marked as a full disk (IsDiskFull).
absl::Status DiskFullError(absl::string_view message);
// Returns whether `status` says the state directory's disk is full: SQLite's SQLITE_FULL, an
// I/O error with ENOSPC, or DiskFullError().
bool IsDiskFull(const absl::Status& status);

// The daemon's write-through store. The daemon keeps every job in memory and writes each change
// here; on start it calls `Open()` and `LoadJobs()`/`LoadProfiles()` to get them all back.
//
// Phases: `Open()` once (it creates `state_dir`, the database and its schema, or migrates an
// older schema); then any mix of `NewJobId()`, `Put*()`, `Get*()`, `Load*()` and
// `DeleteCheckpoint()`; the destructor closes the database.
//
// Storage: `state_dir/headroom.db`, in WAL journal mode with synchronous=NORMAL. Every write is
// its own transaction, so once a `Put*()` returns OK the write survives the daemon being killed
// at any later moment (not a power cut: that needs synchronous=FULL). Messages are stored as
// serialized protobuf blobs beside indexed columns for what is queried (job id, state,
// submission time; checkpoint step; profile creation time). The schema version is SQLite's
// `user_version`; a database written by a newer headroomd is refused.
//
// Checkpoints, the large blobs, need not pass through memory whole: PutCheckpoint() from a
// reader writes one in place tensor by tensor, and GetCheckpoint() parses one as it reads it.
//
// A full disk: every write fails with ResourceExhausted naming the state directory
// (IsDiskFull), and leaves what was stored before intact; reads go on. Open() on a full disk
// succeeds when the database exists with the current schema: it then holds SQLite's
// exclusive lock for its life (the one way SQLite reads a WAL database without writing the
// shared-memory index beside it), so other connections cannot read it meanwhile.
//
// Limits: one checkpoint per job (the latest); a blob may not exceed SQLite's length limit
// (1e9 bytes by default). Plans, timelines and checkpoints are keyed by job id alone: the store
// does not require the job itself to have been put first.
//
// Ownership: the store owns its one SQLite connection. Results are copies.
//
// Thread-safety: thread-safe. One mutex (`mu_`) serializes every use of the connection, so
// each method's statements, and each multi-statement transaction, run alone.
class JobStore {
 public:
  // The schema version this build writes (SQLite's `PRAGMA user_version`).
  static constexpr int kSchemaVersion = 1;
  // The database's file name under `state_dir`.
  static constexpr absl::string_view kDatabaseFileName = "headroom.db";
  // How long a statement waits for a lock held by another connection to the same file.
  static constexpr int kBusyTimeoutMilliseconds = 5000;

  // Returns the store for `state_dir` (created with its parents if missing), opening or creating
  // `state_dir/headroom.db` and creating or migrating its schema. FailedPrecondition naming the
  // file if its schema version is newer than kSchemaVersion; other errors name the path and
  // carry SQLite's message (DataLoss for a file that is not a database).
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(const std::string& state_dir);

  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;
  // Closes the connection.
  ~JobStore();

  // Returns a fresh job id, unique across restarts: "job-000001", "job-000002", ...
  absl::StatusOr<std::string> NewJobId();
  // Returns a fresh profile id, unique across restarts: "profile-000001", ...
  absl::StatusOr<std::string> NewProfileId();

  // Inserts the job, or replaces the one with its job_id. REQUIRES: job.job_id() is non-empty
  // (InvalidArgument otherwise).
  absl::Status PutJob(const proto::JobInfo& job);
  // Returns every job, newest first (submitted_unix_seconds descending, then job_id
  // descending). A job that does not parse is left out and listed in SkippedRows(), so one
  // corrupt row does not keep the daemon from the others; errors only from SQLite.
  absl::StatusOr<std::vector<proto::JobInfo>> LoadJobs() const;
  // Returns the job `job_id`; NotFound("no job 'job_id'") when absent.
  absl::StatusOr<proto::JobInfo> GetJob(const std::string& job_id) const;

  // Inserts or replaces the plan of job `job_id` (non-empty).
  absl::Status PutPlan(const std::string& job_id, const proto::PlanResponse& plan);
  // Returns the plan of job `job_id`; NotFound naming the job when it has none.
  absl::StatusOr<proto::PlanResponse> GetPlan(const std::string& job_id) const;
  // Inserts or replaces the memory timeline of job `job_id` (non-empty); kept when it ends.
  absl::Status PutTimeline(const std::string& job_id, const proto::MemoryTimeline& timeline);
  // Returns the memory timeline of job `job_id`; NotFound naming the job when it has none.
  absl::StatusOr<proto::MemoryTimeline> GetTimeline(const std::string& job_id) const;

  // Replaces the checkpoint of job `checkpoint.job_id()` (non-empty) with `checkpoint`, in one
  // transaction: after a crash the job has either its old or its new checkpoint, whole.
  absl::Status PutCheckpoint(const proto::Checkpoint& checkpoint);
  // The same for the checkpoint made of `header` and `tensors`, stored byte for byte as the
  // proto::Checkpoint of them would be, without ever holding it whole: the row is sized
  // exactly up front and its blob filled tensor by tensor, `read` filling one host buffer
  // (the largest tensor's size) for each in turn. `read` runs under the store's lock and must
  // not call the store. When `read` fails the old checkpoint stays and its error comes back
  // naming the job, step and tensor; ResourceExhausted when the checkpoint would exceed
  // SQLite's blob limit.
  absl::Status PutCheckpoint(const CheckpointHeader& header,
                             absl::Span<const CheckpointTensorInfo> tensors,
                             CheckpointTensorReader read);
  // Returns the latest checkpoint of job `job_id`, or std::nullopt when it has none. The
  // stored blob is parsed as it is read, so the result is the only copy of it in memory.
  absl::StatusOr<std::optional<proto::Checkpoint>> GetCheckpoint(const std::string& job_id) const;
  // Drops the checkpoint of job `job_id` (when it ends); OK if it had none.
  absl::Status DeleteCheckpoint(const std::string& job_id);

  // Inserts the profile, or replaces the one with its profile_id (non-empty).
  absl::Status PutProfile(const proto::StoredProfile& profile);
  // Returns every profile, newest first (created_unix_seconds descending, then profile_id
  // descending). A profile that does not parse is left out and listed in SkippedRows().
  absl::StatusOr<std::vector<proto::StoredProfile>> LoadProfiles() const;
  // Returns the rows the latest LoadJobs() and LoadProfiles() left out, jobs first, each
  // with its id and why, for the daemon to report.
  std::vector<SkippedRow> SkippedRows() const ABSL_LOCKS_EXCLUDED(mu_);

  // Returns the database file's path.
  const std::string& path() const { return path_; }
  // Returns the state directory (the database's).
  std::string state_dir() const;
  // Returns the bytes free to this process on the state directory's filesystem.
  absl::StatusOr<uint64_t> FreeDiskBytes() const;

 private:
  class Statement;
  class Transaction;
  class Blob;

  JobStore(std::string path, sqlite3* db) : path_(std::move(path)), db_(db) {}

  // Returns the store on `path`, initialized; `exclusive`: in SQLite's exclusive locking mode.
  static absl::StatusOr<std::unique_ptr<JobStore>> OpenDatabase(std::string path, bool exclusive);
  // Sets the connection's pragmas and brings the schema to kSchemaVersion.
  absl::Status Initialize() ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status MigrateLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Returns the schema version (SQLite's user_version).
  absl::StatusOr<int64_t> SchemaVersionLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Returns `sql` prepared on the connection.
  absl::StatusOr<Statement> PrepareLocked(const char* sql) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs `sql` (constant SQL without values: pragmas, DDL, BEGIN/COMMIT).
  absl::Status ExecLocked(const char* sql, absl::string_view doing) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Returns the error for SQLite result `rc` while `doing` ("writing job 'job-000001'"), naming
  // the database and carrying SQLite's message.
  absl::Status SqliteError(int rc, absl::string_view doing) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Returns the blob in column `column` of row `rowid` of `table`, open for incremental I/O
  // (writable: for writing, in place, without changing its size).
  absl::StatusOr<Blob> OpenBlobLocked(const char* table, const char* column, int64_t rowid,
                                      bool writable, absl::string_view doing) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Increments the counter `name` in a transaction; returns "<name>-NNNNNN".
  absl::StatusOr<std::string> NextId(const char* name) ABSL_LOCKS_EXCLUDED(mu_);
  // Steps `statement`, which returns no rows, to its end.
  absl::Status RunLocked(Statement& statement, absl::string_view doing) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Returns the message of type T in the first column of the row that `sql` selects with
  // `key` bound to ?1; NotFound("no <what>") when there is none, DataLoss naming `what` when
  // it does not parse.
  template <typename T>
  absl::StatusOr<T> GetStored(const char* sql, const std::string& key,
                              const std::string& what) const ABSL_LOCKS_EXCLUDED(mu_);
  // Returns the messages of type T of every row that `sql` selects as (id, message), in its
  // order, leaving out (and recording in skipped_, replacing those of `noun`) the ones that
  // do not parse; errors name `doing`.
  template <typename T>
  absl::StatusOr<std::vector<T>> LoadStored(const char* sql, absl::string_view noun,
                                            absl::string_view doing) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Serializes `message` and runs `sql` with the values `bind` binds (the blob among them);
  // the errors name `what` ("job 'job-000001'").
  absl::Status PutStored(const char* sql, const google::protobuf::MessageLite& message,
                         const std::string& what,
                         absl::FunctionRef<void(Statement&, const std::string& blob)> bind)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Writes `message` serialized with `sql`, binding job_id to ?1 and the blob to ?2; the
  // errors name "<noun> of job '<job_id>'". REQUIRES: job_id is non-empty (InvalidArgument).
  absl::Status PutForJob(const char* sql, const std::string& job_id,
                         const google::protobuf::MessageLite& message, absl::string_view noun)
      ABSL_LOCKS_EXCLUDED(mu_);

  const std::string path_;
  // Guards the connection and every statement prepared on it.
  mutable absl::Mutex mu_;
  sqlite3* const db_ ABSL_PT_GUARDED_BY(mu_);
  // The rows the latest loads left out.
  mutable std::vector<SkippedRow> skipped_ ABSL_GUARDED_BY(mu_);
};

}  // namespace headroom::server

#endif  // HEADROOM_SERVER_JOB_STORE_H_
