//! Standard output with its errors kept: every command prints through
//! [`outln!`] and [`out!`] (not `println!`, which panics when standard
//! output cannot be written, e.g. `> /dev/full` or a full disk), and
//! `main` ends with [`finish`], which flushes standard output and turns
//! the first write error into `error: cannot write standard output: ...`
//! and exit code 1 (as GNU tools' `close_stdout` does).
//!
//! A closed pipe (`tlbsim ... | head`) still ends the program at once and
//! quietly with exit code 141, as a shell reports a process killed by
//! SIGPIPE. After any other error the command goes on (its output files
//! are still written) but prints nothing more to standard output.

use std::fmt;
use std::io::{self, Write};
use std::process::ExitCode;
use std::sync::Mutex;

/// The first error writing standard output, if one happened.
static FAILED: Mutex<Option<io::Error>> = Mutex::new(None);

/// Exit code of a process whose standard output was a closed pipe (128 +
/// SIGPIPE), as a shell reports a tool killed by it.
pub const BROKEN_PIPE_EXIT: u8 = 141;

/// Handles an error writing standard output: a closed pipe ends the
/// program quietly (exit code [`BROKEN_PIPE_EXIT`]); any other error is
/// kept (the first one) for [`finish`].
pub fn failed(e: io::Error) {
    if e.kind() == io::ErrorKind::BrokenPipe {
        std::process::exit(i32::from(BROKEN_PIPE_EXIT));
    }
    let mut first = FAILED.lock().unwrap_or_else(|p| p.into_inner());
    first.get_or_insert(e);
}

/// Has writing standard output failed?
fn has_failed() -> bool {
    FAILED.lock().unwrap_or_else(|p| p.into_inner()).is_some()
}

/// Writes `args` to standard output (used by [`out!`] and [`outln!`]);
/// an error goes to [`failed`]. Nothing is written after an error.
pub fn print(args: fmt::Arguments<'_>) {
    if has_failed() {
        return;
    }
    if let Err(e) = io::stdout().lock().write_fmt(args) {
        failed(e);
    }
}

/// Flushes standard output and returns `code`, unless writing standard
/// output failed at any point: then prints `error: cannot write standard
/// output: REASON` on standard error and returns exit code 1 (or `code`
/// if it already says the command failed).
pub fn finish(code: ExitCode) -> ExitCode {
    if let Err(e) = io::stdout().lock().flush() {
        failed(e);
    }
    let first = FAILED.lock().unwrap_or_else(|p| p.into_inner()).take();
    match first {
        None => code,
        Some(e) => {
            eprintln!(
                "error: cannot write standard output: {}",
                crate::files::why(&e)
            );
            if code == ExitCode::SUCCESS {
                ExitCode::FAILURE
            } else {
                code
            }
        }
    }
}

/// `print!` whose errors are kept for [`finish`] instead of panicking.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::out::print(format_args!($($arg)*))
    };
}

/// `println!` whose errors are kept for [`finish`] instead of panicking.
macro_rules! outln {
    () => {
        $crate::out::print(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::out::print(format_args!("{}\n", format_args!($($arg)*)))
    };
}
