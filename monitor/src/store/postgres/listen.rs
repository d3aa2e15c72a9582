//! The listener: one connection per monitor that `LISTEN`s on `warden`,
//! where every batch's transaction says what it changed (`NOTIFY`, sent
//! by PostgreSQL at commit): `audit SEQ` (the new head, for followers of
//! the log), `approval ID` (read and handed to waiters and watchers),
//! `state` (grants or locks changed: each monitor reloads its copies).
//! While the connection is down nothing is heard: on every (re)connect the
//! head is read again and the grants and locks reloaded, and waiters read
//! the store now and then on their own.

use std::pin::Pin;

use futures_util::Stream;
use tokio_postgres::AsyncMessage;

use super::*;

/// The channel every monitor listens on.
pub(super) const CHANNEL: &str = "warden";

/// A connection's messages (its notifications), whatever its TLS.
pub(super) struct Messages(Pin<Box<dyn Stream<Item = Result<AsyncMessage, tokio_postgres::Error>> + Send>>);

impl Messages {
    pub(super) fn new<S, T>(mut connection: tokio_postgres::Connection<S, T>) -> Self
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
        T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        Self(Box::pin(futures_util::stream::poll_fn(move |cx| connection.poll_message(cx))))
    }

    async fn next(&mut self) -> Option<Result<AsyncMessage, tokio_postgres::Error>> {
        std::future::poll_fn(|cx| self.0.as_mut().poll_next(cx)).await
    }
}

pub(super) struct Listener {
    pub(super) connector: Connector,
    pub(super) store: Postgres,
}

impl Listener {
    pub(super) async fn run(self, mut stop: oneshot::Receiver<()>) {
        loop {
            match self.connector.connect_listening().await {
                Ok((client, messages)) => {
                    tokio::select! {
                        _ = &mut stop => return,
                        () = self.listen(client, messages) => {}
                    }
                    tracing::warn!("the PostgreSQL listener's connection ended; connecting again");
                }
                Err(e) => tracing::warn!(error = %e, "the PostgreSQL listener cannot connect; trying again"),
            }
            tokio::select! {
                _ = &mut stop => return,
                () = tokio::time::sleep(std::time::Duration::from_millis(500)) => {}
            }
        }
    }

    /// Listens until the connection ends.
    async fn listen(&self, client: tokio_postgres::Client, mut messages: Messages) {
        // The connection's messages must be read while LISTEN runs: a task
        // hands the notifications over.
        let (tx, mut notifications) = mpsc::unbounded_channel::<String>();
        let reader = tokio::spawn(async move {
            while let Some(message) = messages.next().await {
                match message {
                    Ok(AsyncMessage::Notification(n)) => {
                        if tx.send(n.payload().to_owned()).is_err() {
                            return;
                        }
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "the PostgreSQL listener's connection failed");
                        return;
                    }
                }
            }
        });
        if let Err(e) = client.batch_execute(&format!("LISTEN {CHANNEL}")).await {
            tracing::warn!(error = %e, "LISTEN failed");
            reader.abort();
            return;
        }
        // What may have been missed while not listening.
        self.catch_up(&client).await;
        while let Some(payload) = notifications.recv().await {
            self.heard(&payload).await;
        }
        reader.abort();
    }

    async fn catch_up(&self, client: &tokio_postgres::Client) {
        match client.query_one("SELECT seq FROM warden_audit_head WHERE id = 1", &[]).await {
            Ok(row) => self.advance(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0)),
            Err(e) => tracing::warn!(error = %e, "reading the audit head"),
        }
        self.store.state_changes.send_modify(|generation| *generation += 1);
    }

    fn advance(&self, seq: u64) {
        self.store.durable.send_if_modified(|durable| {
            let newer = seq > *durable;
            if newer {
                *durable = seq;
            }
            newer
        });
    }

    async fn heard(&self, payload: &str) {
        match payload.split_once(' ') {
            // A hint only (anyone who can connect can NOTIFY): the head is
            // read from the database.
            Some(("audit", _)) => match self.store.head_seq().await {
                Ok(seq) => self.advance(seq),
                Err(e) => tracing::warn!(error = %e, "reading the audit head"),
            },
            Some(("approval", id)) => match self.store.approval(id).await {
                Ok(Some(approval)) => {
                    let _ = self.store.approval_events.send(ApprovalEvent { approval });
                }
                Ok(None) => {}
                Err(e) => tracing::warn!(error = %e, approval_id = id, "reading a changed approval"),
            },
            _ if payload == "state" => self.store.state_changes.send_modify(|generation| *generation += 1),
            _ => tracing::debug!(payload, "unknown notification"),
        }
    }
}
