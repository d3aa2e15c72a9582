//! Approvers' passkeys in PostgreSQL: one document, the list as
//! `passkeys.json` holds it, so a passkey enrolled through one monitor signs
//! in and approves on the page of any other.

use super::*;
use crate::passkeys::{Enrolled, Keep, PasskeyError};

/// Keeps the list in `warden_passkeys`, each change a transaction of its
/// own under the row's lock (from the list as kept, not this monitor's
/// copy), told to the other monitors (`state`).
pub(crate) struct PgKeep {
    connector: Connector,
    runtime: tokio::runtime::Handle,
}

fn store_error(e: StoreError) -> PasskeyError {
    PasskeyError::Store(e.to_string())
}

impl Keep for PgKeep {
    fn update(
        &self,
        _current: &[Enrolled],
        change: &mut dyn FnMut(&mut Vec<Enrolled>) -> Result<(), PasskeyError>,
    ) -> Result<Vec<Enrolled>, PasskeyError> {
        self.runtime.block_on(async {
            let mut client = self.connector.connect().await.map_err(store_error)?;
            let tx = client.transaction().await.map_err(|e| store_error(pg_error(e)))?;
            let row = tx
                .query_one("SELECT document FROM warden_passkeys WHERE id = 1 FOR UPDATE", &[])
                .await
                .map_err(|e| store_error(pg_error(e)))?;
            let mut list: Vec<Enrolled> = from_json("warden_passkeys", "1", row.get(0)).map_err(store_error)?;
            change(&mut list)?;
            let document = json(&list).map_err(store_error)?;
            tx.execute("UPDATE warden_passkeys SET document = $1 WHERE id = 1", &[&document])
                .await
                .map_err(|e| store_error(pg_error(e)))?;
            tx.execute("SELECT pg_notify($1, 'state')", &[&super::listen::CHANNEL])
                .await
                .map_err(|e| store_error(pg_error(e)))?;
            tx.commit().await.map_err(|e| store_error(pg_error(e)))?;
            Ok(list)
        })
    }
}

impl Postgres {
    /// The enrolled passkeys, read now.
    pub(crate) async fn passkeys(&self) -> Result<Vec<Enrolled>, StoreError> {
        let client = self.readers.client().await?;
        let row = client.query_one("SELECT document FROM warden_passkeys WHERE id = 1", &[]).await.map_err(pg_error)?;
        from_json("warden_passkeys", "1", row.get(0))
    }

    /// A keeper of the passkeys in this database. The first monitor on it
    /// brings the passkeys of its data folder (`imported`) when the
    /// database has none yet.
    pub(crate) async fn passkey_keep(&self, imported: Vec<Enrolled>) -> Result<(PgKeep, Vec<Enrolled>), StoreError> {
        if !imported.is_empty() {
            let client = self.readers.client().await?;
            let document = json(&imported)?;
            let taken = client
                .execute("UPDATE warden_passkeys SET document = $1 WHERE id = 1 AND document = '[]'", &[&document])
                .await
                .map_err(pg_error)?;
            if taken > 0 {
                tracing::info!(passkeys = imported.len(), "the data folder's passkeys are now kept in PostgreSQL");
            }
        }
        let keep = PgKeep { connector: self.connector.clone(), runtime: tokio::runtime::Handle::current() };
        Ok((keep, self.passkeys().await?))
    }
}
