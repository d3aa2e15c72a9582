//! Inside the box (`warden-run __inside`): the relay from the box's own
//! loopback to the run's proxy socket outside, and the agent, whose exit is
//! the run's.

use std::io;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};

/// Listens on `address` (before the agent starts, so its first request
/// finds it) and copies each connection to and from the unix socket
/// `socket`, on threads of its own, for as long as the process lives.
pub fn relay(address: &str, socket: &Path) -> io::Result<std::net::SocketAddr> {
    let listener = TcpListener::bind(address)?;
    let bound = listener.local_addr()?;
    let socket: PathBuf = socket.to_owned();
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let socket = socket.clone();
            std::thread::spawn(move || {
                // A proxy that cannot be reached: the client sees its
                // connection closed, and nothing leaves.
                if let Ok(upstream) = UnixStream::connect(&socket) {
                    let _ = pipe(client, upstream);
                }
            });
        }
    });
    Ok(bound)
}

/// Copies both ways until each side is done.
fn pipe(client: TcpStream, upstream: UnixStream) -> io::Result<()> {
    let (mut client_read, mut upstream_write) = (client.try_clone()?, upstream.try_clone()?);
    let outward = std::thread::spawn(move || {
        let _ = io::copy(&mut client_read, &mut upstream_write);
        let _ = upstream_write.shutdown(Shutdown::Write);
    });
    let (mut upstream_read, mut client_write) = (upstream, client);
    let _ = io::copy(&mut upstream_read, &mut client_write);
    let _ = client_write.shutdown(Shutdown::Write);
    let _ = outward.join();
    Ok(())
}

/// Keeps this process (the agent's supervisor in the box) alive through
/// the interrupt and quit keys of the run's terminal, which signal the
/// whole foreground process group: the agent decides what they do to it.
/// Handled, not ignored: a handler does not pass to the agent.
pub struct Outlive {
    _runtime: tokio::runtime::Runtime,
    _signals: Vec<tokio::signal::unix::Signal>,
}

impl Outlive {
    /// Installs the handlers, for as long as the value lives.
    pub fn interrupts() -> io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let signals = runtime.block_on(async {
            [SignalKind::interrupt(), SignalKind::quit()].into_iter().map(signal).collect::<io::Result<Vec<_>>>()
        })?;
        Ok(Self { _runtime: runtime, _signals: signals })
    }
}

/// Runs `argv` and waits for it.
pub fn run(argv: &[String]) -> io::Result<ExitStatus> {
    let (program, args) = argv.split_first().ok_or_else(|| io::Error::other("no command to run"))?;
    Command::new(program).args(args).status()
}

/// The exit code that says `status`: its own, or 128 + the signal that
/// ended it, as a shell says.
pub fn code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(1),
        (None, Some(signal)) => u8::try_from(128 + (signal & 0x7f)).unwrap_or(1),
        (None, None) => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::net::UnixListener;

    #[test]
    fn the_relay_carries_a_connection_both_ways_to_the_socket() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("proxy.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut asked = String::new();
            stream.read_to_string(&mut asked).unwrap();
            stream.write_all(format!("heard: {asked}").as_bytes()).unwrap();
        });
        let address = relay("127.0.0.1:0", &socket).unwrap();
        let mut client = TcpStream::connect(address).unwrap();
        client.write_all(b"GET / HTTP/1.1").unwrap();
        client.shutdown(Shutdown::Write).unwrap();
        let mut answer = String::new();
        client.read_to_string(&mut answer).unwrap();
        assert_eq!(answer, "heard: GET / HTTP/1.1");
    }

    #[test]
    fn an_exit_is_its_code_or_128_and_the_signal() {
        assert_eq!(code(run(&["sh".into(), "-c".into(), "exit 7".into()]).unwrap()), 7);
        assert_eq!(code(run(&["sh".into(), "-c".into(), "kill -TERM $$".into()]).unwrap()), 143);
        assert!(run(&[]).is_err());
    }
}
