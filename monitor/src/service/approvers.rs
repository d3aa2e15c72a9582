//! Approvers' passkeys: enrolment links, the list, revocation (admin), and
//! the audit records of each.

use super::*;
use crate::passkeys::{Book, Enrolled, PasskeyError};

impl From<PasskeyError> for CallError {
    fn from(error: PasskeyError) -> Self {
        match error {
            PasskeyError::Gone(m) | PasskeyError::Refused(m) => CallError::FailedPrecondition(m),
            PasskeyError::Unavailable(m) => CallError::FailedPrecondition(m),
            PasskeyError::Store(m) => CallError::Unavailable(m),
        }
    }
}

impl Monitor {
    /// The approvers' passkeys and the approval page's open ceremonies.
    pub(crate) fn passkeys(&self) -> Arc<Book> {
        Arc::clone(&self.passkeys)
    }

    /// Uses `book` for approvers' passkeys.
    pub(crate) fn with_passkeys(mut self, book: Book) -> Self {
        self.passkeys = Arc::new(book);
        self
    }

    /// A single-use enrolment link (valid for 10 minutes) for the approver
    /// credential `name` with `groups`, made by admin `caller`; audited.
    pub(crate) async fn enroll_link(
        &self,
        caller: &Caller,
        name: &str,
        groups: Vec<String>,
    ) -> Result<String, CallError> {
        let url = self.passkeys.link(name, groups, &caller.name)?;
        self.audit_passkey("approver.enroll-link", &caller.name, name, "").await?;
        Ok(url)
    }

    /// Every enrolled passkey.
    pub(crate) fn approvers(&self) -> Vec<Enrolled> {
        self.passkeys.list()
    }

    /// Confirms approver `name`'s passkey `key_id`, which the approver read
    /// out from the page after registering it: only then does it count; audited.
    pub(crate) async fn confirm_approver(
        &self,
        caller: &Caller,
        name: &str,
        key_id: &str,
    ) -> Result<Enrolled, CallError> {
        let (book, owned) = (Arc::clone(&self.passkeys), (name.to_owned(), key_id.to_owned()));
        let now = unix_ns(self.now());
        let confirmed = off_the_workers(move || book.confirm(&owned.0, &owned.1, now)).await?;
        self.audit_passkey("approver.confirmed", &caller.name, name, key_id).await?;
        Ok(confirmed)
    }

    /// Removes every passkey of approver `name` (and signs it out); audited.
    pub(crate) async fn revoke_approver(&self, caller: &Caller, name: &str) -> Result<usize, CallError> {
        let (book, owned) = (Arc::clone(&self.passkeys), name.to_owned());
        let removed = off_the_workers(move || book.revoke(&owned)).await?;
        if removed == 0 {
            return Err(CallError::NotFound(format!("approver `{name}` has no passkey enrolled")));
        }
        self.audit_passkey("approver.revoked", &caller.name, name, "").await?;
        Ok(removed)
    }

    /// One audit record of a passkey event: `kind`, by `caller`, for
    /// approver `name` (and the passkey `key_id`).
    pub(crate) async fn audit_passkey(
        &self,
        kind: &str,
        caller: &str,
        name: &str,
        key_id: &str,
    ) -> Result<(), CallError> {
        let mut reasons = vec![format!("approver `{name}`")];
        if !key_id.is_empty() {
            reasons.push(format!("passkey {key_id}"));
        }
        let entry = AuditEntry {
            time_unix_ns: unix_ns(self.now()),
            kind: kind.into(),
            caller: caller.into(),
            resource: format!("Approver::{name:?}"),
            reasons,
            policy_version: self.snapshot().version.clone(),
            ..AuditEntry::default()
        };
        self.store.commit(Commit::record(entry)).await?;
        Ok(())
    }
}

/// Runs `work` (which writes `passkeys.json`, an fsync) off the async workers.
async fn off_the_workers<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, PasskeyError> + Send + 'static,
) -> Result<T, CallError> {
    match tokio::task::spawn_blocking(work).await {
        Ok(done) => Ok(done?),
        Err(e) => Err(CallError::Unavailable(format!("the passkey store did not answer: {e}"))),
    }
}
