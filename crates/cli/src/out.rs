//! Standard output that a closed pipe cannot end a run through. `tessera run … | tee log` whose
//! `tee` dies, or `tessera inspect FILE | head`, leave this process writing into a pipe nobody
//! reads. A command that runs something (a run, a unit, a front end) carries on and drains,
//! writing its summary files as ever: what it would have printed goes nowhere. A one-shot
//! command (inspect, verify, a listing) has nothing left to do for its reader and ends quietly
//! with status 0, as Unix tools do.

use std::io::{ErrorKind, Write};
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether a closed standard output ends this process (a one-shot command) or is ignored.
static ONE_SHOT: AtomicBool = AtomicBool::new(false);

/// This command's output is all it does: a closed standard output ends it quietly.
pub fn one_shot() {
    ONE_SHOT.store(true, Ordering::Relaxed);
}

/// Writes `text` to standard output; a reader that has gone ends a one-shot command quietly,
/// and is otherwise ignored with every other write error (there is nobody to tell).
pub fn write_stdout(text: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(text).and_then(|()| out.flush()) {
        gone(&e);
    }
}

/// Writes `text` to standard error, as [`write_stdout`] does to standard output.
pub fn write_stderr(text: std::fmt::Arguments<'_>) {
    if let Err(e) = std::io::stderr().lock().write_fmt(text) {
        gone(&e);
    }
}

/// A write failed with `e`: a one-shot command whose reader has gone ends now.
pub fn gone(e: &std::io::Error) {
    if e.kind() == ErrorKind::BrokenPipe && ONE_SHOT.load(Ordering::Relaxed) {
        std::process::exit(0);
    }
}

/// Whether a progress line is shown in place on the terminal (written without its newline).
static LINE_SHOWN: AtomicBool = AtomicBool::new(false);

/// Shows `line` in place of the last progress line on the terminal.
pub fn show_in_place(line: &str) {
    // Back to the line's start; what is left of a longer line before is cleared.
    write_stderr(format_args!("\r{line}\x1b[K"));
    LINE_SHOWN.store(true, Ordering::Relaxed);
}

/// Ends the progress line shown in place, if one is: what is said next starts a line of its own.
pub fn end_line() {
    if LINE_SHOWN.swap(false, Ordering::Relaxed) {
        write_stderr(format_args!("\n"));
    }
}

/// The log's writer: standard error, the progress line shown in place ended first, so that a
/// message from any thread never lands in the middle of it.
pub struct LogWriter;

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        end_line();
        std::io::stderr().write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// Whether `e` comes from a reader that has gone (a closed pipe) somewhere in its chain.
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == ErrorKind::BrokenPipe))
}

/// `println!` through [`write_stdout`]: declared before the other modules (`#[macro_use]`).
macro_rules! say {
    () => {
        $crate::out::write_stdout(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::out::write_stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `eprintln!` through [`write_stderr`].
macro_rules! say_err {
    () => {
        $crate::out::write_stderr(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::out::write_stderr(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` through [`write_stdout`].
macro_rules! say_part {
    ($($arg:tt)*) => {
        $crate::out::write_stdout(format_args!($($arg)*))
    };
}
