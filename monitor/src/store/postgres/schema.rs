//! The tables in PostgreSQL and their migrations: each monitor applies the
//! ones its database lacks at start, one at a time, under an advisory lock
//! (two replicas starting together do not both migrate), and refuses a
//! database made by a newer version.

use tokio_postgres::Client;

use super::pg_error;
use crate::store::StoreError;

/// The migrations, in order; the schema version is how many are applied.
const MIGRATIONS: &[&str] = &[
    // 1: the audit chain and the state of every monitor on the database.
    r"
    CREATE TABLE warden_schema (version integer NOT NULL);
    INSERT INTO warden_schema VALUES (0);
    -- The chain's head: one row, locked by every batch that appends, so
    -- that seqs are given in order and without gaps across monitors and
    -- every guard is checked against what all of them committed.
    CREATE TABLE warden_audit_head (
        id integer PRIMARY KEY CHECK (id = 1),
        seq bigint NOT NULL,
        hash text NOT NULL
    );
    INSERT INTO warden_audit_head VALUES (1, 0, repeat('0', 64));
    -- Each record as JSON (what `audit export` prints), with the monitor
    -- that appended it.
    CREATE TABLE warden_audit (
        seq bigint PRIMARY KEY,
        time_unix_ns bigint NOT NULL,
        replica text NOT NULL,
        record text NOT NULL
    );
    CREATE INDEX warden_audit_time ON warden_audit (time_unix_ns);
    -- Decisions by idempotency key, for the replay window.
    CREATE TABLE warden_requests (
        harness text NOT NULL,
        request_id text NOT NULL,
        decided_unix_ns bigint NOT NULL,
        remembered text NOT NULL,
        PRIMARY KEY (harness, request_id)
    );
    CREATE INDEX warden_requests_decided ON warden_requests (decided_unix_ns);
    CREATE TABLE warden_approvals (
        approval_id text PRIMARY KEY,
        pending boolean NOT NULL,
        expires_unix_ns bigint NOT NULL,
        harness text NOT NULL,
        user_id text NOT NULL,
        session text NOT NULL,
        record text NOT NULL
    );
    CREATE INDEX warden_approvals_due ON warden_approvals (expires_unix_ns) WHERE pending;
    CREATE INDEX warden_approvals_session ON warden_approvals (harness, user_id, session) WHERE pending;
    CREATE TABLE warden_grants (grant_id text PRIMARY KEY, record text NOT NULL);
    CREATE TABLE warden_locks (target text PRIMARY KEY, record text NOT NULL);
    CREATE TABLE warden_sessions (
        session text NOT NULL,
        harness text NOT NULL,
        user_id text NOT NULL,
        record text NOT NULL,
        PRIMARY KEY (session, harness, user_id)
    );
    -- Rate limits' token buckets, shared: a harness's rate holds across
    -- monitors, not once per monitor. A bucket past `full_unix_ns` has
    -- refilled and is the same as none.
    CREATE TABLE warden_rate (
        key text PRIMARY KEY,
        tokens double precision NOT NULL,
        at_unix_ns bigint NOT NULL,
        refusing boolean NOT NULL,
        full_unix_ns bigint NOT NULL
    );
    CREATE INDEX warden_rate_full ON warden_rate (full_unix_ns);
    -- Approvers' passkeys: one document (the list, as passkeys.json holds
    -- it), changed under its row lock by whichever monitor enrolls,
    -- confirms, revokes or counts a use.
    CREATE TABLE warden_passkeys (id integer PRIMARY KEY CHECK (id = 1), document text NOT NULL);
    INSERT INTO warden_passkeys VALUES (1, '[]');
    -- The monitors that use the database: what each serves, seen when.
    CREATE TABLE warden_replicas (
        replica text PRIMARY KEY,
        started_unix_ns bigint NOT NULL,
        seen_unix_ns bigint NOT NULL,
        policy_version text NOT NULL,
        policy_loaded_unix_ns bigint NOT NULL,
        policy_error text NOT NULL DEFAULT ''
    );
    ",
    // 2: retention. The checkpoints that close each removal, for every
    // monitor's verifier (signed by the checkpoint key, which the database
    // never holds: a row forged here vouches for nothing), and each
    // monitor's checkpoint key, so that one removes records only when all
    // verify with the same key.
    r"
    CREATE TABLE warden_checkpoints (seq bigint NOT NULL, line text NOT NULL);
    CREATE INDEX warden_checkpoints_seq ON warden_checkpoints (seq);
    ALTER TABLE warden_replicas ADD COLUMN checkpoint_key text NOT NULL DEFAULT '';
    ",
];

/// The schema version this monitor writes.
pub(crate) const VERSION: i32 = MIGRATIONS.len() as i32;

/// A key for `pg_advisory_lock` taken while migrating.
const MIGRATION_LOCK: i64 = 0x5741_5244_454e_0001;

/// Brings the database to [`VERSION`]; refuses one that is newer.
pub(super) async fn migrate(client: &mut Client) -> Result<(), StoreError> {
    client.execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK]).await.map_err(pg_error)?;
    let done = apply(client).await;
    // Released on every path; a failed unlock is a closed connection,
    // which releases it too.
    let _ = client.execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK]).await;
    done
}

async fn apply(client: &mut Client) -> Result<(), StoreError> {
    let exists = client
        .query_one("SELECT to_regclass('warden_schema') IS NOT NULL", &[])
        .await
        .map_err(pg_error)?
        .get::<_, bool>(0);
    let mut version: i32 = if exists {
        client.query_one("SELECT version FROM warden_schema", &[]).await.map_err(pg_error)?.get(0)
    } else {
        0
    };
    if version > VERSION {
        return Err(StoreError::Postgres(format!(
            "the database's schema is version {version}, made by a newer wardend; this one knows up to version \
             {VERSION}: upgrade this monitor"
        )));
    }
    while version < VERSION {
        let Some(migration) = MIGRATIONS.get(usize::try_from(version).unwrap_or(usize::MAX)) else { break };
        let tx = client.transaction().await.map_err(pg_error)?;
        tx.batch_execute(migration).await.map_err(pg_error)?;
        version += 1;
        tx.execute("UPDATE warden_schema SET version = $1", &[&version]).await.map_err(pg_error)?;
        tx.commit().await.map_err(pg_error)?;
        tracing::info!(version, "PostgreSQL schema migrated");
    }
    Ok(())
}
