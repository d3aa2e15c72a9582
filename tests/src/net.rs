//! Loopback endpoints for clients' tests: `Untouched`, which no client may reach, and replicas that are down, crash, or die with a call on them.

/// A listener on `127.0.0.1:0` that accepts nothing, for a client that must
/// refuse before it connects.
pub struct Untouched(std::net::TcpListener);

impl Untouched {
    /// Binds it; returns it and its `http://` endpoint.
    pub fn bind() -> std::io::Result<(Self, String)> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let endpoint = format!("http://{}", listener.local_addr()?);
        Ok((Self(listener), endpoint))
    }

    /// Fails the test if any connection reached it.
    pub fn assert_untouched(&self) {
        let reached = self.0.accept();
        assert!(
            matches!(&reached, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
            "the endpoint was reached: {reached:?}"
        );
    }
}

/// An endpoint where nothing listens (a replica that is down): a loopback
/// port bound, then closed, so that a connection to it is refused.
pub fn dead_endpoint() -> std::io::Result<String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(format!("http://{}", listener.local_addr()?))
}

/// A replica's address in front of a real monitor, as a second replica
/// sharing its store would be: bytes relayed both ways until [`Relay::cut`],
/// which drops every connection on it and stops listening, as a replica
/// that crashes does.
pub struct Relay {
    endpoint: String,
    task: tokio::task::JoinHandle<()>,
}

impl Relay {
    /// Relays a loopback port to `to` (`127.0.0.1:PORT`).
    pub async fn start(to: std::net::SocketAddr) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let endpoint = format!("http://{}", listener.local_addr()?);
        let task = tokio::spawn(async move {
            // Owned by this task: aborting it drops the listener and every
            // connection.
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((mut inbound, _)) = listener.accept().await {
                connections.spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(to).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        });
        Ok(Self { endpoint, task })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Drops every connection and stops listening.
    pub fn cut(&self) {
        self.task.abort();
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A replica that dies with the call on it: it speaks HTTP/2 far enough to
/// read one request to the end of its body, then closes the connection
/// without answering. A call sent to it may have been served: only a call
/// that may be sent twice goes on to the next replica.
pub struct Swallow {
    endpoint: String,
    swallowed: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Swallow {
    /// Listens on a loopback port.
    pub async fn start() -> std::io::Result<Self> {
        use std::sync::atomic::Ordering;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let endpoint = format!("http://{}", listener.local_addr()?);
        let swallowed = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = std::sync::Arc::clone(&swallowed);
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                let counted = std::sync::Arc::clone(&counted);
                connections.spawn(async move {
                    if read_one_request(stream).await.unwrap_or(false) {
                        counted.fetch_add(1, Ordering::SeqCst);
                    }
                });
            }
        });
        Ok(Self { endpoint, swallowed, task })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// How many requests it read to the end.
    pub fn swallowed(&self) -> usize {
        self.swallowed.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for Swallow {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Sends the server's (empty) SETTINGS, reads the client's preface and its
/// frames until a DATA frame ends a stream; true when one did. The stream is
/// dropped (closed) on return.
async fn read_one_request(mut stream: tokio::net::TcpStream) -> std::io::Result<bool> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    const DATA: u8 = 0;
    const END_STREAM: u8 = 1;
    stream.write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0]).await?;
    let mut preface = [0u8; 24];
    stream.read_exact(&mut preface).await?;
    loop {
        let mut header = [0u8; 9];
        stream.read_exact(&mut header).await?;
        let [l0, l1, l2, kind, flags, ..] = header;
        let length = u32::from_be_bytes([0, l0, l1, l2]);
        let mut payload = vec![0u8; usize::try_from(length).unwrap_or(0)];
        stream.read_exact(&mut payload).await?;
        if kind == DATA && flags & END_STREAM != 0 {
            return Ok(true);
        }
    }
}
