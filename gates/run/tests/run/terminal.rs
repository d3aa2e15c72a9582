//! An interactive run: warden-run on a terminal gives the box a terminal of
//! its own, of the user's size, whose interrupt key reaches the agent; the
//! user's terminal is put back as it was.

use std::io::{Read as _, Write as _};

use rustix::fs::{Mode, OFlags};
use rustix::pty::OpenptFlags;
use rustix::termios::{LocalModes, Winsize};

use super::*;

/// A pseudo-terminal standing for the user's: (its master, its slave).
fn user_terminal(rows: u16, columns: u16) -> (std::fs::File, std::fs::File) {
    let master = rustix::pty::openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC).unwrap();
    rustix::pty::grantpt(&master).unwrap();
    rustix::pty::unlockpt(&master).unwrap();
    let name = rustix::pty::ptsname(&master, Vec::new()).unwrap();
    let slave = rustix::fs::open(name.as_c_str(), OFlags::RDWR | OFlags::NOCTTY, Mode::empty()).unwrap();
    let size = Winsize { ws_row: rows, ws_col: columns, ws_xpixel: 0, ws_ypixel: 0 };
    rustix::termios::tcsetwinsize(&slave, size).unwrap();
    (std::fs::File::from(master), std::fs::File::from(slave))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interactive_run_has_a_terminal_of_its_own_whose_interrupt_key_reaches_the_agent() {
    if !sandbox_or_skip() {
        return;
    }
    let machine = Machine::new();
    let monitor = monitor().await;
    let (mut master, slave) = user_terminal(40, 100);
    let script = "stty size; [ -t 0 ] && echo ON-A-TERMINAL; trap 'echo INTERRUPTED; exit 3' INT; echo READY; \
                  sleep 30; echo NOT-INTERRUPTED";
    let mut command = machine.warden_run(&monitor.endpoint, &["--session", "tty-1", "--", "sh", "-c", script]);
    command.stdin(slave.try_clone().unwrap()).stdout(slave.try_clone().unwrap()).stderr(Stdio::piped());
    let child = command.spawn().unwrap();
    // What the user sees, as it comes.
    let screen = Arc::new(Mutex::new(String::new()));
    let shown = Arc::clone(&screen);
    let mut reader = master.try_clone().unwrap();
    std::thread::spawn(move || {
        let mut buffer = [0u8; 4096];
        while let Ok(n) = reader.read(&mut buffer) {
            if n == 0 {
                return;
            }
            shown.lock().unwrap().push_str(&String::from_utf8_lossy(&buffer[..n]));
        }
    });
    warden_tests::wait::eventually("the agent is ready", || {
        let ready = screen.lock().unwrap().contains("READY");
        async move { ready.then_some(()) }
    })
    .await;
    // The interrupt key, as the user presses it.
    master.write_all(b"\x03").unwrap();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap()).await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    warden_tests::wait::eventually("the box's last words", || {
        let said = screen.lock().unwrap().contains("INTERRUPTED");
        async move { said.then_some(()) }
    })
    .await;
    let seen = screen.lock().unwrap().clone();
    assert!(seen.contains("40 100"), "the box's terminal has the user's size: {seen}");
    assert!(seen.contains("ON-A-TERMINAL"), "{seen}");
    assert!(!seen.contains("NOT-INTERRUPTED"), "the interrupt did not reach the agent: {seen}");
    assert_eq!(out.status.code(), Some(3), "the agent's code is the run's: {stderr}\n{seen}");
    assert!(stderr.contains("session tty-1 ended with exit code 3"), "{stderr}");
    // The user's terminal is as it was (not left raw).
    let settings = rustix::termios::tcgetattr(&slave).unwrap();
    assert!(settings.local_modes.contains(LocalModes::ICANON | LocalModes::ECHO), "left raw: {settings:?}");
    monitor.server.stop().await.unwrap();
}

/// A run that is not interactive (its output a terminal, its input not)
/// gives the box none of the user's terminals: what the box writes reaches
/// the terminal through warden-run, and a setting changed from inside the
/// box (`stty -echo` on its output) does not outlive the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_output_alone_is_a_terminal_does_not_give_the_box_that_terminal() {
    if !sandbox_or_skip() {
        return;
    }
    let machine = Machine::new();
    let monitor = monitor().await;
    let (mut master, slave) = user_terminal(40, 100);
    let script = "stty -echo <&1 2>/dev/null; [ -t 1 ] && echo OUT-IS-A-TERMINAL || echo OUT-IS-NOT-A-TERMINAL";
    let mut command = machine.warden_run(&monitor.endpoint, &["--session", "tty-2", "--", "sh", "-c", script]);
    command.stdin(Stdio::null()).stdout(slave.try_clone().unwrap()).stderr(Stdio::piped());
    let out = tokio::task::spawn_blocking(move || command.output().unwrap()).await.unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut buffer = [0u8; 4096];
    let n = master.read(&mut buffer).unwrap();
    let seen = String::from_utf8_lossy(&buffer[..n]).into_owned();
    assert!(seen.contains("OUT-IS-NOT-A-TERMINAL"), "{seen}");
    let settings = rustix::termios::tcgetattr(&slave).unwrap();
    assert!(settings.local_modes.contains(LocalModes::ECHO), "the box changed the user's terminal: {settings:?}");
    monitor.server.stop().await.unwrap();
}
