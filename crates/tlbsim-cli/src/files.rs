//! File handling shared by the commands: reading experiment and profile
//! files (the library does no I/O), command-line overrides, writing results
//! whole or not at all (or to standard output, a device or a FIFO), checking
//! outputs before any work, and quoting for printed command lines.

use crate::cleanup::{self, Registered};
use std::ffi::{OsStr, OsString};
use std::fs::{File, FileType, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU32, Ordering};
use tlbsim::config::limits::MAX_CONFIG_FILE_BYTES;
use tlbsim::config::{
    apply_sets, find_key_line, is_profile_path, parse_profile, parse_toml, Experiment,
};

/// Command-line overrides of an experiment file.
pub struct Overrides {
    /// `--policy`.
    pub policy: Option<String>,
    /// `--profile`.
    pub profile: Option<String>,
    /// `--set SECTION.KEY=VALUE` arguments.
    pub sets: Vec<String>,
}

/// [`load`], printing the error; exit code 2 (bad input) on failure.
pub fn load_or_report(path: &Path, sets: &[String]) -> Result<(Experiment, String), ExitCode> {
    load(path, sets).map_err(|e| {
        eprintln!("error: {e}");
        ExitCode::from(2)
    })
}

/// Reads and parses an experiment file, applies `--set` arguments and
/// loads a profile file it names; errors name file, line and field.
/// Returns the experiment and the file's text.
pub fn load(path: &Path, sets: &[String]) -> Result<(Experiment, String), String> {
    let name = path.display().to_string();
    let text = crate::input::read_limited(path, MAX_CONFIG_FILE_BYTES, "an experiment")
        .map_err(|e| format!("{name}: {e}"))?;
    let mut exp: Experiment = parse_toml(&name, &text).map_err(|e| e.to_string())?;
    if !sets.is_empty() {
        exp = apply_sets(&text, sets)?;
    }
    if is_profile_path(&exp.experiment.profile) {
        // A profile file is relative to the experiment file.
        let base = experiment_dir(path);
        let spec = exp.experiment.profile.clone();
        set_profile(&mut exp, &spec, base).map_err(|e| {
            match find_key_line(&text, "experiment", "profile") {
                Some(l) => format!("{name}:{l}: [experiment] profile: {e}"),
                None => format!("{name}: [experiment] profile: {e}"),
            }
        })?;
    }
    read_workload_files(&mut exp);
    Ok((exp, text))
}

/// Reads the files the workload's parameters name (a replay's `trace`,
/// relative to the working directory) into `exp.workload.files`, each as
/// [`tlbsim::trace::read_text`] reads a trace (line by line, at most
/// `MAX_TRACE_FILE_BYTES`): the library does no I/O. A file that cannot
/// be read is kept as its error, which the run reports naming the
/// parameter and the experiment's line, as it reports a bad value.
pub fn read_workload_files(exp: &mut Experiment) {
    for path in exp.workload.file_paths() {
        let text = read_trace(&path);
        exp.workload.files.insert(path, text);
    }
}

/// The text of the trace file `path`; errors name the file.
fn read_trace(path: &str) -> Result<std::sync::Arc<str>, String> {
    let file = File::open(path).map_err(|e| format!("{path}: cannot read: {e}"))?;
    let max = tlbsim::config::limits::MAX_TRACE_FILE_BYTES;
    tlbsim::trace::read_text(path, io::BufReader::new(file), max)
        .map(Into::into)
        .map_err(|e| e.to_string())
}

/// The profile file that the profile `spec` names, relative to `base`
/// (the experiment file's directory for `[experiment] profile`, none for
/// `--profile`), as [`set_profile`] reads it; `None` for a built-in name.
pub fn profile_file(spec: &str, base: &Path) -> Option<PathBuf> {
    is_profile_path(spec).then(|| base.join(spec))
}

/// The files that a command running the experiment file `path` (loaded
/// as `exp`, before `--profile` is applied) reads, for
/// [`check_outputs`]: the experiment file, the profile file its
/// `[experiment] profile` names and the `--profile` file (`profile`).
pub fn experiment_inputs(
    path: &Path,
    exp: &Experiment,
    profile: Option<&str>,
) -> Vec<(&'static str, PathBuf)> {
    let mut v = vec![("the experiment file", path.to_path_buf())];
    if let Some(p) = profile_file(&exp.experiment.profile, experiment_dir(path)) {
        v.push(("the experiment's profile file", p));
    }
    if let Some(p) = profile.and_then(|p| profile_file(p, Path::new(""))) {
        v.push(("--profile", p));
    }
    v
}

/// The directory an experiment file's profile file is relative to.
pub fn experiment_dir(path: &Path) -> &Path {
    path.parent().unwrap_or(Path::new(""))
}

/// Points `exp` at the machine profile `spec`: a built-in profile name, or
/// a profile file (ending in `.toml`) relative to `base`, which is read and
/// parsed here (the library does no I/O). Errors name the profile file,
/// line and field.
pub fn set_profile(exp: &mut Experiment, spec: &str, base: &Path) -> Result<(), String> {
    exp.experiment.profile = spec.to_string();
    exp.profile_data = None;
    if is_profile_path(spec) {
        let file = base.join(spec);
        let shown = file.display().to_string();
        let text =
            crate::input::read_limited(&file, MAX_CONFIG_FILE_BYTES, "a profile").map_err(|e| {
                match e.strip_prefix("cannot read: ") {
                    Some(why) => format!("cannot read profile file {shown}: {why}"),
                    None => format!("profile file {shown}: {e}"),
                }
            })?;
        let p = parse_profile(&shown, &text).map_err(|e| e.to_string())?;
        // Check the file's own values here, so that errors point into it
        // (messages start with the field, e.g. "topology.cpus = 0 ...").
        p.validate().map_err(|m| {
            let line = m
                .split([' ', ','])
                .next()
                .and_then(|f| f.split_once('.'))
                .and_then(|(section, key)| find_key_line(&text, section, key));
            match line {
                Some(l) => format!("{shown}:{l}: {m}"),
                None => format!("{shown}: {m}"),
            }
        })?;
        exp.profile_data = Some(p);
    }
    Ok(())
}

/// The output path that means standard output.
pub const STDOUT: &str = "-";

/// Is `path` the `-` that means standard output?
pub fn is_stdout(path: &Path) -> bool {
    path.as_os_str() == STDOUT
}

/// Most symbolic links followed from an output path to its file (as
/// Linux's `MAXSYMLINKS`).
const MAX_LINKS: usize = 40;

/// Where bytes written to an output path land.
enum Dest {
    /// `-`.
    Stdout,
    /// An existing file that is not a regular file or a directory (a
    /// character or block device, a FIFO, a socket), symbolic links
    /// followed: written in place.
    Special(PathBuf, FileType),
    /// A regular file or one that does not exist yet, symbolic links
    /// followed: replaced whole.
    Regular(PathBuf),
}

/// Classifies the output `path`. Errors (a directory, a name that is not
/// a file's, a loop of links) start with `path`.
fn dest(path: &Path) -> Result<Dest, String> {
    if is_stdout(path) {
        return Ok(Dest::Stdout);
    }
    let shown = if path.as_os_str().is_empty() {
        "\"\"".to_string()
    } else {
        path.display().to_string()
    };
    if path.file_name().is_none() || path.to_string_lossy().ends_with('/') {
        return Err(format!("{shown}: not a file name"));
    }
    // A device, FIFO or socket is written in place, so the kernel may
    // find it: `/dev/stdout` links to `/proc/self/fd/1`, whose link text
    // (`pipe:[123]`) names no file.
    if let Ok(m) = std::fs::metadata(path) {
        if !m.is_dir() && !m.is_file() {
            return Ok(Dest::Special(path.to_path_buf(), m.file_type()));
        }
    }
    let file = follow_links(path)?;
    match std::fs::metadata(&file) {
        Ok(m) if m.is_dir() => Err(format!("{shown}: is a directory")),
        Ok(m) if m.is_file() => Ok(Dest::Regular(file)),
        Ok(m) => Ok(Dest::Special(file, m.file_type())),
        // A new file (or one we cannot see: writing it will say why).
        Err(_) => Ok(Dest::Regular(file)),
    }
}

/// `path` with symbolic links followed to the file they finally name (a
/// relative target is relative to its link's directory), or `path` itself
/// if it is not a link; a dangling link gives the missing file it names.
fn follow_links(path: &Path) -> Result<PathBuf, String> {
    let mut p = path.to_path_buf();
    for _ in 0..MAX_LINKS {
        let is_link = std::fs::symlink_metadata(&p).is_ok_and(|m| m.file_type().is_symlink());
        if !is_link {
            return Ok(p);
        }
        let to = std::fs::read_link(&p)
            .map_err(|e| format!("{}: cannot read link: {}", path.display(), why(&e)))?;
        p = match p.parent() {
            Some(dir) => dir.join(to),
            None => to,
        };
    }
    Err(format!(
        "{}: too many levels of symbolic links",
        path.display()
    ))
}

/// An I/O error's description without Rust's ` (os error N)` suffix.
pub fn why(e: &io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// The directory `file` is in (`.` for a bare name).
fn parent_dir(file: &Path) -> &Path {
    file.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// Counter that, with the process id, names temporary files.
static TEMP_SEQ: AtomicU32 = AtomicU32::new(0);

/// Creates a new, empty file in `dir` named after `file`, this process
/// and a per-process counter (`.out.json.tmp<pid>.<n>`), so that no
/// concurrent process or thread picks the same name; an existing file
/// (one left by a killed process) is never opened, the next name is tried.
///
/// The file is registered for removal if a signal ends the process (see
/// `cleanup`) until the returned registration is dropped.
fn create_temp(dir: &Path, file: &Path) -> io::Result<(PathBuf, File, Registered)> {
    let base = file
        .file_name()
        .filter(|n| n.len() <= 200)
        .unwrap_or(OsStr::new("out"));
    let mut last = io::Error::from(io::ErrorKind::AlreadyExists);
    for _ in 0..100 {
        let n = TEMP_SEQ.fetch_add(1, Ordering::Relaxed);
        let mut name = OsString::from(".");
        name.push(base);
        name.push(format!(".tmp{}.{n}", std::process::id()));
        let tmp = dir.join(name);
        // Registered before it exists, so that no signal finds it unknown.
        let registered = cleanup::register(&tmp);
        cleanup::creating();
        let opened = OpenOptions::new().write(true).create_new(true).open(&tmp);
        // A file another process left is not ours to remove: `created`
        // only on success, `not_created` otherwise.
        match opened {
            Ok(f) => {
                cleanup::created(&tmp);
                return Ok((tmp, f, registered));
            }
            Err(e) => {
                cleanup::not_created();
                if e.kind() != io::ErrorKind::AlreadyExists {
                    return Err(e);
                }
                last = e;
            }
        }
    }
    Err(last)
}

/// Writes `bytes` to the output `path`:
/// - `-`: standard output, with a final newline added if `bytes` lack
///   one; a closed pipe ends the program quietly (exit 141), as a table
///   printed into `| head` does;
/// - an existing file that is not a regular file (a device such as
///   `/dev/null`, a FIFO, a socket), symbolic links followed: opened and
///   written in place, with no temporary file;
/// - otherwise (a regular file, a new path, or a symbolic link to either):
///   whole or not at all: a temporary file in the file's directory (for a
///   link, its target's directory) is written, flushed to disk (fsync) and
///   renamed onto the file, then the directory is flushed (best-effort). A
///   link stays a link: its target is replaced, keeping its permissions.
///   On failure, or when SIGINT, SIGTERM or SIGHUP ends the process, the
///   temporary file is removed and the file is unchanged.
///
/// The error is one line naming `path`, e.g. `/dev/full: cannot write: No
/// space left on device`.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let fail = |e: io::Error| format!("{}: cannot write: {}", path.display(), why(&e));
    match dest(path)? {
        Dest::Stdout => {
            write_stdout(bytes).map_err(|e| format!("cannot write standard output: {}", why(&e)))
        }
        Dest::Special(file, _) => write_in_place(&file, bytes).map_err(fail),
        Dest::Regular(file) => replace(&file, bytes).map_err(fail),
    }
}

/// `bytes` on standard output, ending with a newline.
fn write_stdout(bytes: &[u8]) -> io::Result<()> {
    let mut out = io::stdout().lock();
    let r = out
        .write_all(bytes)
        .and_then(|()| match bytes.last() {
            Some(b'\n') | None => Ok(()),
            Some(_) => out.write_all(b"\n"),
        })
        .and_then(|()| out.flush());
    if let Err(e) = &r {
        if e.kind() == io::ErrorKind::BrokenPipe {
            std::process::exit(i32::from(crate::out::BROKEN_PIPE_EXIT));
        }
    }
    r
}

/// `bytes` written into the existing non-regular file `file`.
fn write_in_place(file: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut f = OpenOptions::new().write(true).open(file)?;
    f.write_all(bytes)?;
    f.flush()
}

/// Replaces the regular (or new) file `file` with `bytes` through a
/// temporary file in its directory; see [`write_atomic`].
fn replace(file: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = parent_dir(file);
    let (tmp, f, registered) = create_temp(dir, file)?;
    if let Err(e) = fill_and_rename(f, &tmp, file, bytes) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    drop(registered);
    // The rename is durable once the directory is: best-effort, as some
    // file systems cannot sync a directory.
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Writes `bytes` into the temporary file `f` (at `tmp`), with the
/// permissions of `file` if it exists, syncs it and renames it onto `file`.
fn fill_and_rename(mut f: File, tmp: &Path, file: &Path, bytes: &[u8]) -> io::Result<()> {
    if let Ok(m) = std::fs::metadata(file) {
        f.set_permissions(m.permissions())?;
    }
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(tmp, file)
}

/// [`write_atomic`], printing the error; exit code 1 on failure.
pub fn write_or_report(path: &Path, bytes: &[u8]) -> ExitCode {
    match write_atomic(path, bytes) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Checks, before any work is done, that [`write_atomic`] can write the
/// output `path` that option `flag` names, so that a bad path is not found
/// after the work and the work lost:
/// - `-` (standard output) always can;
/// - an existing file that is not a regular file, symbolic links followed,
///   must open for writing; a FIFO is not opened (opening waits for a
///   reader, and closing would end the reader's input), only found;
/// - otherwise the file's directory (for a link, its target's) must exist
///   and take a new file: a probe file is created there and removed.
///
/// A directory, or a name ending in `/`, is an error. The error is one line
/// naming the flag and the path: `--json /nonexistent/x.json: directory
/// /nonexistent does not exist`.
pub fn check_output(flag: &str, path: &Path) -> Result<(), String> {
    let shown = path.display();
    match dest(path).map_err(|e| format!("{flag} {e}"))? {
        Dest::Stdout => Ok(()),
        Dest::Special(_, t) if is_fifo(&t) => Ok(()),
        Dest::Special(file, _) => OpenOptions::new()
            .write(true)
            .open(file)
            .map(drop)
            .map_err(|e| format!("{flag} {shown}: cannot open for writing: {}", why(&e))),
        Dest::Regular(file) => {
            probe_dir(parent_dir(&file), &file).map_err(|m| format!("{flag} {shown}: {m}"))
        }
    }
}

/// Checks, before any work, the files a command writes, given as `(flag,
/// path)` (a flag not given is `None`), against each other and against the
/// files it reads, given as `(what, path)` (`what` names the input in
/// errors: a flag such as `--profile`, or `the experiment file`):
/// - each output can be written ([`check_output`]);
/// - no output is one of the inputs, so that no input is overwritten;
/// - no two outputs are the same file, so that one does not replace the
///   other; at most one is standard output (`-`).
///
/// Files are compared by identity, not by name: the device and inode of a
/// file that exists, symbolic links followed (so `./x.toml`, `x.toml`, a
/// link to it and a hard link are one file), and for a file not yet
/// created (an output, or a file the command will keep, such as a sweep's
/// point files), its directory's device and inode and its name. `-` is the
/// file standard output is (a shell's `>> x.toml` makes it `x.toml`). A
/// character device (`/dev/null`, a terminal) may be given any number of
/// times. The error is one line naming both flags (or the input) and the
/// path: `--json x.toml: the experiment file x.toml is the same file; an
/// output must not replace an input`.
pub fn check_outputs(
    inputs: &[(&str, PathBuf)],
    outputs: &[(&str, Option<&Path>)],
) -> Result<(), String> {
    let given: Vec<(&str, &Path)> = outputs
        .iter()
        .filter_map(|(flag, p)| p.map(|p| (*flag, p)))
        .collect();
    let mut to_stdout = given.iter().filter(|(_, p)| is_stdout(p)).map(|(f, _)| *f);
    if let (Some(first), Some(second)) = (to_stdout.next(), to_stdout.next()) {
        return Err(format!("{second} -: {first} is standard output already"));
    }
    let ins: Vec<(&str, &Path, Identity)> = inputs
        .iter()
        .filter_map(|(what, p)| identity(p, false).map(|id| (*what, p.as_path(), id)))
        .collect();
    let mut outs: Vec<(&str, &Path, Identity)> = Vec::new();
    for (flag, path) in given {
        check_output(flag, path)?;
        let Some(id) = identity(path, true) else {
            continue;
        };
        let shown = path.display();
        if let Some((what, p, _)) = ins.iter().find(|(_, _, i)| *i == id) {
            return Err(format!(
                "{flag} {shown}: {what} {} is the same file; an output must not replace an input",
                p.display()
            ));
        }
        if let Some((other, p, _)) = outs.iter().find(|(_, _, i)| *i == id) {
            return Err(format!(
                "{flag} {shown}: {other} {} is the same file; give each output a file of its own",
                p.display()
            ));
        }
        outs.push((flag, path, id));
    }
    Ok(())
}

/// [`check_outputs`], printing the error; exit code 2 (bad arguments) on
/// failure.
pub fn check_outputs_or_report(
    inputs: &[(&str, PathBuf)],
    outputs: &[(&str, Option<&Path>)],
) -> Result<(), ExitCode> {
    check_outputs(inputs, outputs).map_err(|e| {
        eprintln!("error: {e}");
        ExitCode::from(2)
    })
}

/// Which file a path is, for [`check_outputs`]: two paths with equal
/// identities name one file.
#[derive(Debug, PartialEq, Eq)]
enum Identity {
    /// An existing file: its device and inode (on other systems than Unix,
    /// its canonical path).
    File(FileId),
    /// A file not yet created: its directory's identity and its name.
    New(FileId, OsString),
}

/// A file's device and inode.
#[cfg(unix)]
type FileId = (u64, u64);

/// A file's canonical path (no inodes outside Unix).
#[cfg(not(unix))]
type FileId = PathBuf;

/// The identity of the existing file `path` (symbolic links followed) and
/// whether it is a character device; `None` if it cannot be seen.
#[cfg(unix)]
fn file_id(path: &Path) -> Option<(FileId, bool)> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let m = std::fs::metadata(path).ok()?;
    Some(((m.dev(), m.ino()), m.file_type().is_char_device()))
}

/// The identity of the existing file `path`; `None` if it cannot be seen.
#[cfg(not(unix))]
fn file_id(path: &Path) -> Option<(FileId, bool)> {
    Some((path.canonicalize().ok()?, false))
}

/// The identity of what standard output is; `None` for a character
/// device (a terminal, `/dev/null`) or if it cannot be seen.
#[cfg(unix)]
fn stdout_identity() -> Option<Identity> {
    use std::os::fd::AsFd;
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let fd = io::stdout().as_fd().try_clone_to_owned().ok()?;
    let m = File::from(fd).metadata().ok()?;
    (!m.file_type().is_char_device()).then(|| Identity::File((m.dev(), m.ino())))
}

/// What standard output is: unknown outside Unix.
#[cfg(not(unix))]
fn stdout_identity() -> Option<Identity> {
    None
}

/// The identity of the file `path` names (symbolic links followed), or of
/// the file it would create if it does not exist; `None` for a character
/// device, which may be named any number of times, or a path whose
/// directory does not exist either (reading or writing it fails first).
/// `-` is standard output when `stdout` (an output), else a file's name.
fn identity(path: &Path, stdout: bool) -> Option<Identity> {
    if stdout && is_stdout(path) {
        return stdout_identity();
    }
    // The kernel follows the links (`/dev/stdout` too).
    if let Some((id, chr)) = file_id(path) {
        return (!chr).then_some(Identity::File(id));
    }
    let file = follow_links(path).ok()?;
    let (dir, _) = file_id(parent_dir(&file))?;
    Some(Identity::New(dir, file.file_name()?.to_os_string()))
}

/// Can a new file named after `file` be created in `dir`? Creates one and
/// removes it.
fn probe_dir(dir: &Path, file: &Path) -> Result<(), String> {
    let shown = dir.display();
    match std::fs::metadata(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(format!("directory {shown} does not exist"))
        }
        Err(e) => return Err(format!("directory {shown}: {}", why(&e))),
        Ok(m) if !m.is_dir() => return Err(format!("{shown} is not a directory")),
        Ok(_) => {}
    }
    let (tmp, f, registered) = create_temp(dir, file)
        .map_err(|e| format!("cannot create a file in directory {shown}: {}", why(&e)))?;
    drop(f);
    let _ = std::fs::remove_file(tmp);
    drop(registered);
    Ok(())
}

/// Is `t` a FIFO (named pipe)?
#[cfg(unix)]
fn is_fifo(t: &FileType) -> bool {
    use std::os::unix::fs::FileTypeExt;
    t.is_fifo()
}

/// Is `t` a FIFO (named pipe)? None outside Unix.
#[cfg(not(unix))]
fn is_fifo(_: &FileType) -> bool {
    false
}

/// Where a command prints what it reports for people (tables, its command
/// line, verdicts): standard output, or standard error when one of its
/// output files is `-`, so that standard output carries that file alone.
#[derive(Debug, Clone, Copy)]
pub struct Console {
    to_stderr: bool,
}

impl Console {
    /// The console of a command whose output files are `outputs`.
    pub fn new(outputs: &[Option<&Path>]) -> Console {
        Console {
            to_stderr: outputs.iter().flatten().any(|p| is_stdout(p)),
        }
    }

    /// Prints `text` as is (on standard output through [`out!`], whose
    /// errors `main` reports).
    pub fn print(&self, text: &str) {
        if self.to_stderr {
            eprint!("{text}");
        } else {
            out!("{text}");
        }
    }

    /// Prints `text` and a newline.
    pub fn line(&self, text: &str) {
        if self.to_stderr {
            eprintln!("{text}");
        } else {
            outln!("{text}");
        }
    }
}

/// `s` as one word of a POSIX shell command line: as is if it is made of
/// characters no shell treats specially, else in single quotes (a quote
/// inside as `'\''`; the empty string as `''`).
pub fn shell_word(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-=,/:+".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// `path` as one word of a printed command line, quoted if it needs it.
pub fn path_word(path: &Path) -> String {
    shell_word(&path.to_string_lossy())
}

/// The printed form of `--set` arguments: ` --set A --set B`.
pub fn set_args(sets: &[String]) -> String {
    sets.iter()
        .map(|s| format!(" --set {}", shell_word(s)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{check_output, path_word, shell_word, write_atomic};
    use std::path::Path;

    #[test]
    fn shell_words_are_quoted_only_when_needed() {
        assert_eq!(shell_word("kernel.kpti=false"), "kernel.kpti=false");
        assert_eq!(shell_word("a b"), "'a b'");
        assert_eq!(shell_word("it's"), "'it'\\''s'");
        assert_eq!(shell_word(""), "''");
        assert_eq!(
            path_word(Path::new("/tmp/my runs/it's.toml")),
            "'/tmp/my runs/it'\\''s.toml'"
        );
    }

    /// A new empty directory for one test, removed when dropped.
    fn scratch(test: &str) -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix(&format!("tlbsim-files-{test}-"))
            .tempdir()
            .unwrap()
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn concurrent_writes_of_one_file_leave_one_whole_and_no_temporary() {
        let tmp = scratch("concurrent");
        let dir = tmp.path().to_path_buf();
        let out = dir.join("out.csv");
        std::thread::scope(|s| {
            for t in 0..8u8 {
                let out = &out;
                s.spawn(move || {
                    let body = vec![b'a' + t; 100_000];
                    for _ in 0..5 {
                        write_atomic(out, &body).unwrap();
                    }
                });
            }
        });
        let got = std::fs::read(&out).unwrap();
        assert_eq!(got.len(), 100_000);
        assert!(got.iter().all(|&b| b == got[0]), "one writer's bytes");
        assert_eq!(names(&dir), ["out.csv"]);
    }

    #[test]
    fn a_failed_write_names_the_path_and_leaves_nothing() {
        let tmp = scratch("failed");
        let dir = tmp.path().to_path_buf();
        let out = dir.join("missing/out.json");
        let e = write_atomic(&out, b"{}").unwrap_err();
        assert_eq!(
            e,
            format!("{}: cannot write: No such file or directory", out.display())
        );
        assert!(names(&dir).is_empty());
    }

    #[test]
    fn outputs_that_cannot_be_files_are_refused_up_front() {
        let tmp = scratch("names");
        let dir = tmp.path().to_path_buf();
        assert_eq!(check_output("--json", Path::new("-")), Ok(()));
        assert_eq!(check_output("--json", &dir.join("new.json")), Ok(()));
        assert_eq!(names(&dir), Vec::<String>::new(), "the probe is removed");
        let e = check_output("--csv", Path::new("")).unwrap_err();
        assert_eq!(e, "--csv \"\": not a file name");
        let e = check_output("--csv", Path::new("nowhere/")).unwrap_err();
        assert_eq!(e, "--csv nowhere/: not a file name");
        let e = check_output("--json", &dir).unwrap_err();
        assert_eq!(e, format!("--json {}: is a directory", dir.display()));
    }

    #[cfg(unix)]
    #[test]
    fn a_loop_of_links_is_an_error_not_a_hang() {
        let tmp = scratch("loop");
        let dir = tmp.path().to_path_buf();
        std::os::unix::fs::symlink("b", dir.join("a")).unwrap();
        std::os::unix::fs::symlink("a", dir.join("b")).unwrap();
        let e = write_atomic(&dir.join("a"), b"{}").unwrap_err();
        assert!(e.ends_with("a: too many levels of symbolic links"), "{e}");
        let e = check_output("--json", &dir.join("b")).unwrap_err();
        assert!(e.ends_with("b: too many levels of symbolic links"), "{e}");
    }
}
