//! `Untouched`: a loopback endpoint that a test expects no client to reach.

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
