//! Standard output: every line wardenctl prints goes through here, so that
//! a reader that stops early (`wardenctl … | head -1`) ends the command
//! quietly, where `println!` would panic on the closed pipe.
//!
//! The exit status is then [`READER_GONE`], 141: what a shell reports for
//! a program that a closed pipe stopped (128 + SIGPIPE), as `seq 100000 |
//! head -1` does. Not 0, because wardenctl's status carries verdicts
//! (`audit verify`, `health`, `policy test`, `authorize --explain`): output
//! that was cut off must not read as a success under `set -o pipefail`.

use std::fmt;
use std::io::{self, Write as _};

/// The exit status when the reader of stdout went away: 128 + SIGPIPE.
pub(crate) const READER_GONE: u8 = 141;

/// A write to stdout failed.
#[derive(Debug)]
pub(crate) struct StdoutError(io::Error);

impl StdoutError {
    /// Whether the reader closed the pipe: the command ends quietly.
    pub(crate) fn reader_gone(&self) -> bool {
        self.0.kind() == io::ErrorKind::BrokenPipe
    }
}

impl From<io::Error> for StdoutError {
    fn from(error: io::Error) -> Self {
        Self(error)
    }
}

impl fmt::Display for StdoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot write to standard output: {}", self.0)
    }
}

impl std::error::Error for StdoutError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// Whether `error` is, or was caused by, a closed stdout pipe.
pub(crate) fn reader_gone(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| cause.downcast_ref::<StdoutError>().is_some_and(StdoutError::reader_gone))
}

/// Writes one line (what [`outln!`] formats).
pub(crate) fn line(args: fmt::Arguments<'_>) -> Result<(), StdoutError> {
    let mut out = io::stdout().lock();
    out.write_fmt(args)?;
    out.write_all(b"\n")?;
    Ok(())
}

/// Writes `bytes` as they are, and flushes.
pub(crate) fn bytes(bytes: &[u8]) -> Result<(), StdoutError> {
    let mut out = io::stdout().lock();
    out.write_all(bytes)?;
    out.flush()?;
    Ok(())
}

/// `println!` that returns a [`StdoutError`] instead of panicking.
macro_rules! outln {
    () => {
        $crate::out::line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::out::line(format_args!($($arg)*))
    };
}

pub(crate) use outln;
