//! An interactive run's own terminal. When warden-run's standard input and
//! output are a terminal, the box gets a pseudo-terminal of the run's
//! instead of the user's terminal: the agent's session has a controlling
//! terminal (Ctrl-C reaches the agent, a TUI sees its size and every
//! resize), and nothing in the box holds the user's terminal, so it cannot
//! push input into it (`TIOCSTI`) or change its settings. warden-run puts
//! the user's terminal in raw mode and copies bytes both ways; the suspend
//! character is off in the box (no shell there would resume a stopped
//! agent).

use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;

use rustix::fs::{Mode, OFlags};
use rustix::pty::OpenptFlags;
use rustix::termios::{OptionalActions, SpecialCodeIndex, Termios};

/// Whether warden-run's standard input and output are a terminal.
pub fn interactive() -> bool {
    rustix::termios::isatty(io::stdin()) && rustix::termios::isatty(io::stdout())
}

/// A pseudo-terminal for the box.
#[derive(Debug)]
pub struct Pty {
    master: File,
    slave: File,
}

impl Pty {
    /// A new one with the settings and size of the user's terminal (on
    /// standard input), its suspend character off.
    pub fn new() -> io::Result<Self> {
        let master = rustix::pty::openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC)?;
        rustix::pty::grantpt(&master)?;
        rustix::pty::unlockpt(&master)?;
        let name = rustix::pty::ptsname(&master, Vec::new())?;
        let slave: OwnedFd =
            rustix::fs::open(name.as_c_str(), OFlags::RDWR | OFlags::NOCTTY | OFlags::CLOEXEC, Mode::empty())?;
        let mut settings: Termios = rustix::termios::tcgetattr(io::stdin())?;
        settings.special_codes[SpecialCodeIndex::VSUSP] = 0;
        rustix::termios::tcsetattr(&slave, OptionalActions::Now, &settings)?;
        if let Ok(size) = rustix::termios::tcgetwinsize(io::stdin()) {
            rustix::termios::tcsetwinsize(&slave, size)?;
        }
        Ok(Self { master: File::from(master), slave: File::from(slave) })
    }

    /// The terminal's side the box gets (standard input, output and error).
    pub fn slave(&self) -> io::Result<File> {
        self.slave.try_clone()
    }

    /// warden-run's side, once the box holds the other: the copies of the
    /// slave here are closed, so reading it ends when the box has ended.
    pub fn into_master(self) -> File {
        self.master
    }
}

/// The user's terminal in raw mode, put back as it was when dropped.
#[derive(Debug)]
pub struct Raw {
    saved: Termios,
}

impl Raw {
    /// Puts standard input's terminal in raw mode.
    pub fn enter() -> io::Result<Self> {
        let saved = rustix::termios::tcgetattr(io::stdin())?;
        let mut raw = saved.clone();
        raw.make_raw();
        rustix::termios::tcsetattr(io::stdin(), OptionalActions::Now, &raw)?;
        Ok(Self { saved })
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        let _ = rustix::termios::tcsetattr(io::stdin(), OptionalActions::Now, &self.saved);
    }
}

/// Gives `master` the size of the user's terminal (after a resize).
pub fn follow_size(master: &File) {
    if let Ok(size) = rustix::termios::tcgetwinsize(io::stdin()) {
        let _ = rustix::termios::tcsetwinsize(master, size);
    }
}

/// Copies the user's keys to `master` (on a thread that lives as long as
/// the process), and what the box writes to standard output until the box
/// has ended: the handle ends then.
pub fn relay(master: File) -> io::Result<std::thread::JoinHandle<()>> {
    let keys_to = master.try_clone()?;
    std::thread::spawn(move || pump(io::stdin(), keys_to));
    // Reading the box's side fails (EIO) once no process holds it.
    Ok(std::thread::spawn(move || pump(master, io::stdout())))
}

/// Which of standard input, output and error are a terminal: a run that is
/// not interactive gives the box none of them (settings such as `stty
/// -echo` would outlive the run).
pub fn terminals() -> [bool; 3] {
    [rustix::termios::isatty(io::stdin()), rustix::termios::isatty(io::stdout()), rustix::termios::isatty(io::stderr())]
}

/// Copies what the box writes to a pipe onto `to`, until the box is done.
pub fn copy_out(
    from: impl io::Read + Send + 'static,
    to: impl io::Write + Send + 'static,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || pump(from, to))
}

/// Copies `from` to `to` as it comes, until either ends.
fn pump(mut from: impl io::Read, mut to: impl io::Write) {
    let mut buffer = [0u8; 8192];
    while let Ok(n) = from.read(&mut buffer) {
        let Some(read) = buffer.get(..n).filter(|read| !read.is_empty()) else { return };
        if to.write_all(read).and_then(|()| to.flush()).is_err() {
            return;
        }
    }
}

/// In the box: takes standard input's terminal (the run's pseudo-terminal)
/// as the session's controlling terminal, when it is one.
pub fn control() -> io::Result<bool> {
    if !rustix::termios::isatty(io::stdin()) {
        return Ok(false);
    }
    // bubblewrap's new session is its own process's, whose child this is:
    // a session of this process's own, then (a process group's leader
    // cannot start one, and then is the session's already).
    let _ = rustix::process::setsid();
    rustix::process::ioctl_tiocsctty(io::stdin())?;
    Ok(true)
}
