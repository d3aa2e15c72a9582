//! The writer of one monitor: takes every commit waiting, and appends them
//! as one transaction that holds the chain's head (see the module above).

use std::collections::HashMap;

use futures_util::future::try_join_all;
use tokio_postgres::{Client, Statement, Transaction};

use super::listen::CHANNEL;
use super::*;

/// The rows a batch's guards read, taken in its transaction after the head:
/// no other monitor can change them until it commits.
#[derive(Default)]
struct PgView {
    requests: HashMap<(String, String), Remembered>,
    approvals: HashMap<String, ApprovalRecord>,
    sessions: HashMap<SessionKey, SessionRecord>,
    locks: HashMap<String, Lock>,
    /// Of the grants the batch's guards name, those stored.
    grants: std::collections::HashSet<String>,
    /// Approvals waiting, by session, of the batch's new approvals' sessions.
    waiting_sessions: HashMap<SessionKey, usize>,
    /// Approvals waiting, by harness, of the batch's new approvals' harnesses.
    waiting_harnesses: HashMap<String, usize>,
    /// For a retention commit: the oldest record stored, and the hash of
    /// the last one it removes.
    oldest: Option<(u64, u64, Option<String>)>,
}

impl View for PgView {
    fn request(&self, key: &[u8], _now_unix_ns: i64) -> Result<Option<Remembered>, StoreError> {
        Ok(split_request_key(key).and_then(|k| self.requests.get(&k).cloned()))
    }

    fn approval(&self, approval_id: &str) -> Result<Option<ApprovalRecord>, StoreError> {
        Ok(self.approvals.get(approval_id).cloned())
    }

    fn session(&self, key: &SessionKey) -> Result<Option<SessionRecord>, StoreError> {
        Ok(self.sessions.get(key).cloned())
    }

    fn lock(&self, target: &str) -> Result<Option<Lock>, StoreError> {
        Ok(self.locks.get(target).cloned())
    }

    fn may_have_locks(&self) -> bool {
        !self.locks.is_empty()
    }

    fn grant_exists(&self, grant_id: &str) -> Result<bool, StoreError> {
        Ok(self.grants.contains(grant_id))
    }

    fn waiting(&self, key: &SessionKey, harness: &str, _now_unix_ns: i64) -> Result<(usize, usize), StoreError> {
        // Counted at the earliest moment of the batch's new approvals: at
        // least as many as at any later one.
        Ok((
            self.waiting_sessions.get(key).copied().unwrap_or(0),
            self.waiting_harnesses.get(harness).copied().unwrap_or(0),
        ))
    }

    fn oldest_records(&self, first_seq: u64, last_seq: u64) -> Result<Option<String>, StoreError> {
        Ok(match &self.oldest {
            Some((oldest, last, hash)) if *oldest == first_seq && *last == last_seq => hash.clone(),
            _ => None,
        })
    }
}

/// `harness NUL request id` back into its parts.
fn split_request_key(key: &[u8]) -> Option<(String, String)> {
    let at = key.iter().position(|&b| b == 0)?;
    let (harness, rest) = key.split_at(at);
    let request_id = rest.get(1..)?;
    Some((String::from_utf8(harness.to_vec()).ok()?, String::from_utf8(request_id.to_vec()).ok()?))
}

/// The statements a batch runs, prepared once per connection.
struct Statements {
    head: Statement,
    requests: Statement,
    approvals: Statement,
    sessions: Statement,
    locks: Statement,
    grants: Statement,
    waiting_sessions: Statement,
    waiting_harnesses: Statement,
    oldest: Statement,
    insert_audit: Statement,
    put_requests: Statement,
    put_approvals: Statement,
    put_sessions: Statement,
    put_grant: Statement,
    remove_grant: Statement,
    put_lock: Statement,
    remove_lock: Statement,
    move_head: Statement,
    notify: Statement,
    remove_audit: Statement,
}

impl Statements {
    async fn prepare(client: &Client) -> Result<Self, StoreError> {
        let texts = [
            "SELECT seq, hash FROM warden_audit_head WHERE id = 1 FOR UPDATE",
            "SELECT r.harness, r.request_id, r.remembered FROM warden_requests r JOIN unnest($1::text[], \
             $2::text[]) AS k(harness, request_id) USING (harness, request_id)",
            "SELECT approval_id, record FROM warden_approvals WHERE approval_id = ANY($1::text[])",
            "SELECT s.record FROM warden_sessions s JOIN unnest($1::text[], $2::text[], $3::text[]) AS k(session, \
             harness, user_id) USING (session, harness, user_id)",
            "SELECT target, record FROM warden_locks",
            "SELECT grant_id FROM warden_grants WHERE grant_id = ANY($1::text[])",
            "SELECT a.harness, a.user_id, a.session, count(*) FROM warden_approvals a JOIN unnest($1::text[], \
             $2::text[], $3::text[]) AS k(harness, user_id, session) USING (harness, user_id, session) WHERE \
             a.pending AND a.expires_unix_ns > $4 GROUP BY 1, 2, 3",
            "SELECT harness, count(*) FROM warden_approvals WHERE pending AND expires_unix_ns > $2 AND harness = \
             ANY($1::text[]) GROUP BY 1",
            "SELECT (SELECT min(seq) FROM warden_audit), (SELECT record FROM warden_audit WHERE seq = $1)",
            "INSERT INTO warden_audit (seq, time_unix_ns, replica, record) SELECT seq, t, $3, r FROM \
             unnest($1::bigint[], $2::bigint[], $4::text[]) AS x(seq, t, r)",
            "INSERT INTO warden_requests (harness, request_id, decided_unix_ns, remembered) SELECT * FROM \
             unnest($1::text[], $2::text[], $3::bigint[], $4::text[]) ON CONFLICT (harness, request_id) DO UPDATE \
             SET decided_unix_ns = EXCLUDED.decided_unix_ns, remembered = EXCLUDED.remembered",
            "INSERT INTO warden_approvals (approval_id, pending, expires_unix_ns, harness, user_id, session, \
             record) SELECT * FROM unnest($1::text[], $2::bool[], $3::bigint[], $4::text[], $5::text[], \
             $6::text[], $7::text[]) ON CONFLICT (approval_id) DO UPDATE SET pending = EXCLUDED.pending, \
             expires_unix_ns = EXCLUDED.expires_unix_ns, record = EXCLUDED.record",
            "INSERT INTO warden_sessions (session, harness, user_id, record) SELECT * FROM unnest($1::text[], \
             $2::text[], $3::text[], $4::text[]) ON CONFLICT (session, harness, user_id) DO UPDATE SET record = \
             EXCLUDED.record",
            "INSERT INTO warden_grants (grant_id, record) VALUES ($1, $2) ON CONFLICT (grant_id) DO UPDATE SET \
             record = EXCLUDED.record",
            "DELETE FROM warden_grants WHERE grant_id = $1",
            "INSERT INTO warden_locks (target, record) VALUES ($1, $2) ON CONFLICT (target) DO UPDATE SET record \
             = EXCLUDED.record",
            "DELETE FROM warden_locks WHERE target = $1",
            "UPDATE warden_audit_head SET seq = $1, hash = $2 WHERE id = 1",
            "SELECT pg_notify($1, payload) FROM unnest($2::text[]) AS n(payload)",
            "DELETE FROM warden_audit WHERE seq BETWEEN $1 AND $2",
        ];
        let prepared = try_join_all(texts.iter().map(|text| client.prepare(text))).await.map_err(pg_error)?;
        // In the order of `texts`.
        let mut prepared = prepared.into_iter();
        let mut next = || prepared.next().ok_or_else(|| StoreError::Postgres("a statement was not prepared".into()));
        Ok(Self {
            head: next()?,
            requests: next()?,
            approvals: next()?,
            sessions: next()?,
            locks: next()?,
            grants: next()?,
            waiting_sessions: next()?,
            waiting_harnesses: next()?,
            oldest: next()?,
            insert_audit: next()?,
            put_requests: next()?,
            put_approvals: next()?,
            put_sessions: next()?,
            put_grant: next()?,
            remove_grant: next()?,
            put_lock: next()?,
            remove_lock: next()?,
            move_head: next()?,
            notify: next()?,
            remove_audit: next()?,
        })
    }
}

pub(super) struct WriteLoop {
    connector: Connector,
    client: Option<(Client, Statements)>,
    replica: Arc<str>,
    durable: Arc<watch::Sender<u64>>,
}

type Reply = oneshot::Sender<Result<Committed, StoreError>>;

/// The longest a batch's transaction may take before its callers are told
/// the store is unavailable.
const BATCH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

impl WriteLoop {
    /// A writer that connects when its first batch comes.
    pub(super) fn new(connector: Connector, replica: Arc<str>, durable: Arc<watch::Sender<u64>>) -> Self {
        Self { connector, client: None, replica, durable }
    }

    pub(super) async fn run(mut self, mut jobs: mpsc::Receiver<Job>, mut closing: oneshot::Receiver<()>) {
        let mut closed = false;
        loop {
            let first = tokio::select! {
                biased;
                _ = &mut closing, if !closed => {
                    // Commits already sent are still written.
                    jobs.close();
                    closed = true;
                    continue;
                }
                job = jobs.recv() => match job {
                    Some(job) => job,
                    None => break,
                },
            };
            self.write_batch(fill_batch(first, &mut jobs)).await;
        }
    }

    /// Writes one batch in one transaction and answers each commit: after
    /// the commit, or with the error when anything failed (then nothing of
    /// the batch is in the database, or, when the connection broke during
    /// COMMIT, maybe all of it: either way nobody was told ALLOW).
    async fn write_batch(&mut self, batch: Vec<Job>) {
        let (commits, replies): (Vec<Commit>, Vec<Reply>) = batch.into_iter().map(|j| (j.commit, j.reply)).unzip();
        let replica = Arc::clone(&self.replica);
        let result = match self.connected().await {
            Ok((client, statements)) => {
                match tokio::time::timeout(BATCH_TIMEOUT, transact(client, statements, &replica, commits)).await {
                    Ok(done) => done,
                    Err(_) => {
                        // Where the transaction stands is unknown: the
                        // connection goes (the database rolls it back).
                        self.client = None;
                        Err(StoreError::Postgres(format!("the batch took more than {BATCH_TIMEOUT:?}")))
                    }
                }
            }
            Err(e) => Err(e),
        };
        match result {
            Ok((head, answers)) => {
                self.durable.send_if_modified(|durable| {
                    let newer = head > *durable;
                    if newer {
                        *durable = head;
                    }
                    newer
                });
                for (reply, answer) in replies.into_iter().zip(answers) {
                    let _ = reply.send(answer);
                }
            }
            Err(e) => {
                if self.client.as_ref().is_some_and(|(client, _)| client.is_closed()) {
                    self.client = None;
                }
                tracing::error!(error = %e, "audit batch not written to PostgreSQL; its requests fail closed");
                for reply in replies {
                    let _ = reply.send(Err(StoreError::Postgres(e.to_string())));
                }
            }
        }
    }

    async fn connected(&mut self) -> Result<(&mut Client, &Statements), StoreError> {
        if self.client.as_ref().is_none_or(|(client, _)| client.is_closed()) {
            self.client = None;
            let client = self.connector.connect().await?;
            let statements = Statements::prepare(&client).await?;
            self.client = Some((client, statements));
        }
        match self.client.as_mut() {
            Some((client, statements)) => Ok((client, statements)),
            None => Err(StoreError::Postgres("no connection".into())),
        }
    }
}

/// The batch's transaction: returns the new head's seq and each commit's
/// answer, in order.
async fn transact(
    client: &mut Client,
    st: &Statements,
    replica: &str,
    commits: Vec<Commit>,
) -> Result<(u64, Vec<Result<Committed, StoreError>>), StoreError> {
    let tx = client.transaction().await.map_err(pg_error)?;
    let row = tx.query_one(&st.head, &[]).await.map_err(pg_error)?;
    let mut head = Head { seq: u64::try_from(row.get::<_, i64>(0)).unwrap_or(0), hash: row.get(1) };
    let view = read_view(&tx, st, &commits).await?;
    let mut overlay = Overlay::default();
    let mut answers = Vec::with_capacity(commits.len());
    let mut writes = Vec::new();
    for commit in commits {
        match plan(&view, &overlay, commit, &mut head) {
            Ok(Planned::Append(write)) => {
                overlay.add(&write);
                answers.push(Ok(write.committed()));
                writes.push(*write);
            }
            Ok(Planned::Answer(committed)) => answers.push(Ok(*committed)),
            Err(e) => answers.push(Err(e)),
        }
    }
    if writes.is_empty() {
        tx.commit().await.map_err(pg_error)?;
        return Ok((0, answers));
    }
    write(&tx, st, replica, &writes, &head).await?;
    tx.commit().await.map_err(pg_error)?;
    Ok((head.seq, answers))
}

/// The rows the batch's guards and session changes need.
async fn read_view(tx: &Transaction<'_>, st: &Statements, commits: &[Commit]) -> Result<PgView, StoreError> {
    let (mut harnesses, mut request_ids, mut approval_ids, mut grant_ids) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut capped, mut earliest) = (Vec::new(), i64::MAX);
    let mut removal = None;
    let (mut sessions, mut session_harnesses, mut users) = (Vec::new(), Vec::new(), Vec::new());
    for commit in commits {
        match &commit.guard {
            Guard::NewRequest { harness, request_id, .. } => {
                harnesses.push(harness.clone());
                request_ids.push(request_id.clone());
            }
            Guard::StillPending { approval_id } => approval_ids.push(approval_id.clone()),
            Guard::Answer { approval_id } if !approval_id.is_empty() => approval_ids.push(approval_id.clone()),
            Guard::GrantExists { grant_id } => grant_ids.push(grant_id.clone()),
            Guard::OldestRecords { first_seq, last_seq, .. } => removal = Some((*first_seq, *last_seq)),
            Guard::Answer { .. } | Guard::None => {}
        }
        if let Some(decision) = &commit.decision {
            grant_ids.extend(decision.grant_ids.iter().cloned());
        }
        if let (Some(_), Some(approval)) = (commit.caps, &commit.approval) {
            capped.push((
                approval.harness.clone(),
                approval.request.actor.user.clone(),
                approval.request.actor.session.clone(),
            ));
            earliest = earliest.min(approval.created_unix_ns);
        }
        if let Some(change) = &commit.session {
            let key = change.key();
            sessions.push(key.session.clone());
            session_harnesses.push(key.harness.clone());
            users.push(key.user.clone());
        }
    }
    let request_keys: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&harnesses, &request_ids];
    let approval_keys: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&approval_ids];
    let session_keys: [&(dyn tokio_postgres::types::ToSql + Sync); 3] = [&sessions, &session_harnesses, &users];
    let grant_keys: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&grant_ids];
    let capped_harnesses: Vec<String> = capped.iter().map(|(h, _, _)| h.clone()).collect();
    let capped_users: Vec<String> = capped.iter().map(|(_, u, _)| u.clone()).collect();
    let capped_sessions: Vec<String> = capped.iter().map(|(_, _, s)| s.clone()).collect();
    let waiting_of_sessions: [&(dyn tokio_postgres::types::ToSql + Sync); 4] =
        [&capped_harnesses, &capped_users, &capped_sessions, &earliest];
    let waiting_of_harnesses: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&capped_harnesses, &earliest];
    // Sent together: one round trip.
    // Only what the batch needs (each statement costs the database a plan
    // and an execution, which at one decision a batch is most of its time).
    let (requests, approvals, session_rows, locks, grants, waiting_sessions, waiting_harnesses) = tokio::try_join!(
        query_if(tx, !harnesses.is_empty(), &st.requests, &request_keys),
        query_if(tx, !approval_ids.is_empty(), &st.approvals, &approval_keys),
        query_if(tx, !sessions.is_empty(), &st.sessions, &session_keys),
        tx.query(&st.locks, &[]),
        query_if(tx, !grant_ids.is_empty(), &st.grants, &grant_keys),
        query_if(tx, !capped.is_empty(), &st.waiting_sessions, &waiting_of_sessions),
        query_if(tx, !capped.is_empty(), &st.waiting_harnesses, &waiting_of_harnesses),
    )
    .map_err(pg_error)?;
    let mut view = PgView::default();
    if let Some((_, last)) = removal {
        // Rare (a retention round), so not part of the round trip above.
        let last_seq = i64::try_from(last).unwrap_or(i64::MAX);
        let row = tx.query_one(&st.oldest, &[&last_seq]).await.map_err(pg_error)?;
        let oldest = row.get::<_, Option<i64>>(0).and_then(|seq| u64::try_from(seq).ok()).unwrap_or(0);
        let hash = match row.get::<_, Option<String>>(1) {
            Some(text) => Some(from_json::<AuditRecord>("warden_audit", &last.to_string(), &text)?.hash),
            None => None,
        };
        view.oldest = Some((oldest, last, hash));
    }
    for row in requests {
        let (harness, request_id): (String, String) = (row.get(0), row.get(1));
        let remembered: Remembered = from_json("warden_requests", &request_id, row.get(2))?;
        view.requests.insert((harness, request_id), remembered);
    }
    for row in approvals {
        let id: String = row.get(0);
        let approval: ApprovalRecord = from_json(trees::APPROVALS, &id, row.get(1))?;
        view.approvals.insert(id, approval);
    }
    for row in session_rows {
        let session: SessionRecord = from_json(trees::SESSIONS, "", row.get(0))?;
        view.sessions.insert(session.key(), session);
    }
    view.grants = grants.iter().map(|row| row.get(0)).collect();
    for row in waiting_sessions {
        let key = SessionKey { harness: row.get(0), user: row.get(1), session: row.get(2) };
        view.waiting_sessions.insert(key, usize::try_from(row.get::<_, i64>(3)).unwrap_or(usize::MAX));
    }
    for row in waiting_harnesses {
        view.waiting_harnesses.insert(row.get(0), usize::try_from(row.get::<_, i64>(1)).unwrap_or(usize::MAX));
    }
    for row in locks {
        let target: String = row.get(0);
        let lock: Lock = from_json(trees::LOCKS, &target, row.get(1))?;
        view.locks.insert(target, lock);
    }
    Ok(view)
}

/// The batch's records and state, and what the other monitors are told.
async fn write(
    tx: &Transaction<'_>,
    st: &Statements,
    replica: &str,
    writes: &[Write],
    head: &Head,
) -> Result<(), StoreError> {
    let mut seqs = Vec::with_capacity(writes.len());
    let mut times = Vec::with_capacity(writes.len());
    let mut records = Vec::with_capacity(writes.len());
    // The last value of each key: one statement may not change a row twice.
    let mut requests: HashMap<(String, String), &Remembered> = HashMap::new();
    let mut approvals: HashMap<&str, &ApprovalRecord> = HashMap::new();
    let mut sessions: HashMap<SessionKey, &SessionRecord> = HashMap::new();
    let mut notices = vec![format!("audit {}", head.seq)];
    let mut state_changed = false;
    for w in writes {
        seqs.push(i64::try_from(w.record.seq).unwrap_or(i64::MAX));
        times.push(w.record.time_unix_ns);
        records.push(json(&w.record)?);
        if let Some((key, remembered)) = &w.remembered
            && let Some(key) = split_request_key(key)
        {
            requests.insert(key, remembered);
        }
        if let Some(approval) = &w.approval {
            approvals.insert(&approval.approval_id, approval);
        }
        if let Some(session) = &w.session {
            sessions.insert(session.key(), session);
        }
        state_changed |= w.grant.is_some() || w.lock.is_some();
    }
    let (mut r_harness, mut r_id, mut r_time, mut r_value) = (vec![], vec![], vec![], vec![]);
    for ((harness, request_id), remembered) in requests {
        r_harness.push(harness);
        r_id.push(request_id);
        r_time.push(remembered.decided_unix_ns);
        r_value.push(json(remembered)?);
    }
    let (mut a_id, mut a_pending, mut a_expires, mut a_harness, mut a_user, mut a_session, mut a_value) =
        (vec![], vec![], vec![], vec![], vec![], vec![], vec![]);
    for (id, approval) in approvals {
        notices.push(format!("approval {id}"));
        a_id.push(id.to_owned());
        a_pending.push(approval.state == ApprovalState::Pending);
        a_expires.push(approval.expires_unix_ns);
        a_harness.push(approval.harness.clone());
        a_user.push(approval.request.actor.user.clone());
        a_session.push(approval.request.actor.session.clone());
        a_value.push(json(approval)?);
    }
    let (mut s_session, mut s_harness, mut s_user, mut s_value) = (vec![], vec![], vec![], vec![]);
    for (key, session) in sessions {
        s_session.push(key.session);
        s_harness.push(key.harness);
        s_user.push(key.user);
        s_value.push(json(session)?);
    }
    if state_changed {
        notices.push("state".into());
    }
    let head_seq = i64::try_from(head.seq).unwrap_or(i64::MAX);
    let (r_id_empty, a_id_empty, s_empty) = (r_id.is_empty(), a_id.is_empty(), s_session.is_empty());
    type Param<'a> = &'a (dyn tokio_postgres::types::ToSql + Sync);
    let audit: [Param<'_>; 4] = [&seqs, &times, &replica, &records];
    let put_requests: [Param<'_>; 4] = [&r_harness, &r_id, &r_time, &r_value];
    let put_approvals: [Param<'_>; 7] = [&a_id, &a_pending, &a_expires, &a_harness, &a_user, &a_session, &a_value];
    let put_sessions: [Param<'_>; 4] = [&s_session, &s_harness, &s_user, &s_value];
    let move_head: [Param<'_>; 2] = [&head_seq, &head.hash];
    let notify: [Param<'_>; 2] = [&CHANNEL, &notices];
    // Sent together: one round trip.
    tokio::try_join!(
        tx.execute(&st.insert_audit, &audit),
        execute_if(tx, !r_id_empty, &st.put_requests, &put_requests),
        execute_if(tx, !a_id_empty, &st.put_approvals, &put_approvals),
        execute_if(tx, !s_empty, &st.put_sessions, &put_sessions),
        tx.execute(&st.move_head, &move_head),
        tx.execute(&st.notify, &notify),
    )
    .map_err(pg_error)?;
    // Grants and locks (rare) one at a time, in order.
    for w in writes {
        match &w.grant {
            Some(GrantChange::Put(grant)) => {
                tx.execute(&st.put_grant, &[&grant.grant_id, &json(grant.as_ref())?]).await.map_err(pg_error)?;
            }
            Some(GrantChange::Remove(id)) => {
                tx.execute(&st.remove_grant, &[id]).await.map_err(pg_error)?;
            }
            None => {}
        }
        match &w.lock {
            Some(LockChange::Put(lock)) => {
                tx.execute(&st.put_lock, &[&lock.target, &json(lock)?]).await.map_err(pg_error)?;
            }
            Some(LockChange::Remove(target)) => {
                tx.execute(&st.remove_lock, &[target]).await.map_err(pg_error)?;
            }
            None => {}
        }
        if let Some((first, last)) = w.removes {
            let (first, last) = (i64::try_from(first).unwrap_or(i64::MAX), i64::try_from(last).unwrap_or(i64::MAX));
            tx.execute(&st.remove_audit, &[&first, &last]).await.map_err(pg_error)?;
        }
    }
    Ok(())
}

type Params<'a> = [&'a (dyn tokio_postgres::types::ToSql + Sync)];

/// `statement`'s rows, or none without asking when `needed` is false.
async fn query_if(
    tx: &Transaction<'_>,
    needed: bool,
    statement: &Statement,
    params: &Params<'_>,
) -> Result<Vec<tokio_postgres::Row>, tokio_postgres::Error> {
    if needed { tx.query(statement, params).await } else { Ok(Vec::new()) }
}

/// Runs `statement` when `needed`.
async fn execute_if(
    tx: &Transaction<'_>,
    needed: bool,
    statement: &Statement,
    params: &Params<'_>,
) -> Result<u64, tokio_postgres::Error> {
    if needed { tx.execute(statement, params).await } else { Ok(0) }
}
