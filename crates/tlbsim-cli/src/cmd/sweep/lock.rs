//! Who is running in a sweep's directory (`sweep --resume DIR`), so that
//! two sweeps never run the same point at once: each running sweep holds
//! an exclusive lock on its own file `.running-PID.N` there, which says
//! which points it runs (all, or shard `I/N`). A sweep starting in the
//! directory is refused, naming the other process, if a running one holds
//! any point it would run; shards that split the points (`1/2` and `2/2`)
//! run side by side. The locks are the operating system's (`flock`), so a
//! sweep killed at any moment holds none: its file is stale, and removed
//! by the next sweep that looks.
//!
//! Looking and claiming happen under `.lock`, the directory's own lock,
//! held for that moment only, so that two sweeps starting together do not
//! both miss each other.

use super::points::Shard;
use crate::files::why;
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// The directory's lock, held while a sweep looks and claims.
const DIR_LOCK: &str = ".lock";

/// The start of each running sweep's file name (`.running-PID.N`).
const RUNNING: &str = ".running-";

/// A claim on points of a sweep's directory, held until dropped (its file
/// is then removed; the lock goes with the process in any case).
pub struct Claim {
    file: File,
    path: PathBuf,
    /// The file is removed if a signal ends the process.
    _registered: crate::cleanup::Registered,
}

impl Drop for Claim {
    fn drop(&mut self) {
        // Removed before unlocked: whoever opens it until then sees it held.
        let _ = std::fs::remove_file(&self.path);
        let _ = self.file.unlock();
    }
}

/// Claims the points of shard `mine` (`None`: all) of a sweep of `points`
/// points in the directory `dir`. Refused, naming `--resume DIR`, the
/// other process and its points, if a running sweep holds one of them.
pub fn claim(dir: &Path, mine: Option<Shard>, points: usize) -> Result<Claim, String> {
    let shown = dir.display();
    let fail = |m: String| format!("--resume {shown}: {m}");
    let guard = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(dir.join(DIR_LOCK))
        .map_err(|e| fail(format!("cannot open {DIR_LOCK}: {}", why(&e))))?;
    guard
        .lock()
        .map_err(|e| fail(format!("cannot lock {DIR_LOCK}: {}", why(&e))))?;
    for (pid, theirs) in running(dir).map_err(&fail)? {
        if let Some(point) = (0..points).find(|&i| holds(mine, i) && holds(theirs, i)) {
            return Err(fail(format!(
                "another sweep is running in this directory (process {pid}, {}) and runs point {} that this one would run too; wait for it to finish, or give another directory",
                describe(theirs),
                point + 1
            )));
        }
    }
    // One name per claim (a process may hold several: the tests do).
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    let path = dir.join(format!("{RUNNING}{}.{n}", std::process::id()));
    let registered = crate::cleanup::register(&path);
    crate::cleanup::creating();
    let created = File::create(&path);
    if created.is_ok() {
        crate::cleanup::created(&path);
    } else {
        crate::cleanup::not_created();
    }
    let mut file =
        created.map_err(|e| fail(format!("cannot create {}: {}", path.display(), why(&e))))?;
    let claimed = Claim {
        file: file.try_clone().map_err(|e| fail(why(&e)))?,
        path,
        _registered: registered,
    };
    claimed
        .file
        .try_lock()
        .map_err(|e| fail(format!("cannot lock {}: {e}", claimed.path.display())))?;
    writeln!(file, "{} {}", std::process::id(), describe(mine)).map_err(|e| {
        fail(format!(
            "cannot write {}: {}",
            claimed.path.display(),
            why(&e)
        ))
    })?;
    drop(guard);
    Ok(claimed)
}

/// Does the claim `shard` (`None`: all points) hold point `i`?
fn holds(shard: Option<Shard>, i: usize) -> bool {
    shard.is_none_or(|s| s.holds(i))
}

/// A claim in words: `all points`, `shard 1/2`.
fn describe(shard: Option<Shard>) -> String {
    match shard {
        None => "all points".into(),
        Some(s) => format!("shard {}/{}", s.index, s.count),
    }
}

/// The sweeps running in `dir`: each one's process id and claim, from
/// the `.running-PID.N` files whose lock is held. A file whose lock is free
/// is a killed sweep's, and removed (the caller holds [`DIR_LOCK`], so no
/// sweep is claiming it meanwhile). A file that does not say its claim
/// holds every point.
fn running(dir: &Path) -> Result<Vec<(String, Option<Shard>)>, String> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot read the directory: {}", why(&e)))?;
    let mut found = Vec::new();
    let mut names: Vec<PathBuf> = Vec::new();
    for e in entries {
        let e = e.map_err(|e| format!("cannot read the directory: {}", why(&e)))?;
        if e.file_name().to_string_lossy().starts_with(RUNNING) {
            names.push(e.path());
        }
    }
    names.sort();
    for path in names {
        let Ok(mut f) = File::open(&path) else {
            continue; // removed by its sweep meanwhile
        };
        match f.try_lock() {
            Ok(()) => {
                let _ = std::fs::remove_file(&path);
            }
            Err(TryLockError::WouldBlock) => {
                let mut text = String::new();
                let _ = f.read_to_string(&mut text);
                found.push(parse(&path, &text));
            }
            Err(TryLockError::Error(e)) => {
                return Err(format!("cannot lock {}: {}", path.display(), why(&e)))
            }
        }
    }
    Ok(found)
}

/// A `.running-PID.N` file's text (`PID all points` or `PID shard I/N`):
/// the process id (from the name if the text lacks it) and the claim.
fn parse(path: &Path, text: &str) -> (String, Option<Shard>) {
    let from_name = path
        .file_name()
        .map(|n| n.to_string_lossy().trim_start_matches(RUNNING).to_string())
        .and_then(|n| n.split('.').next().map(str::to_string))
        .unwrap_or_default();
    let mut words = text.split_whitespace();
    let pid = words.next().unwrap_or(&from_name).to_string();
    let shard = match (words.next(), words.next()) {
        (Some("shard"), Some(s)) => s.split_once('/').and_then(|(i, n)| {
            let (index, count) = (i.parse().ok()?, n.parse().ok()?);
            (1..=count)
                .contains(&index)
                .then_some(Shard { index, count })
        }),
        _ => None,
    };
    (pid, shard)
}

#[cfg(test)]
mod tests {
    use super::{claim, Shard};

    #[test]
    fn a_claim_refuses_overlapping_ones_until_dropped_and_shards_share() {
        let dir = tempfile::tempdir().unwrap();
        let (half1, half2) = (
            Some(Shard { index: 1, count: 2 }),
            Some(Shard { index: 2, count: 2 }),
        );
        let a = claim(dir.path(), half1, 10).unwrap();
        let b = claim(dir.path(), half2, 10).expect("the other half runs beside it");
        let e = claim(dir.path(), None, 10)
            .err()
            .expect("all points overlap");
        let pid = std::process::id();
        assert!(
            e.contains(&format!("(process {pid}, shard 1/2) and runs point 1 ")),
            "{e}"
        );
        let e = claim(dir.path(), Some(Shard { index: 2, count: 4 }), 10)
            .err()
            .expect("shard 2/4 holds points of shard 2/2");
        assert!(e.contains("shard 2/2) and runs point 2 "), "{e}");
        drop((a, b));
        let all = claim(dir.path(), None, 10).expect("free again");
        drop(all);
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, [".lock"], "claims remove their files");
    }

    #[test]
    fn a_stale_claim_file_is_removed_and_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let stale = dir.path().join(".running-999999999");
        std::fs::write(&stale, "999999999 all points\n").unwrap();
        let c = claim(dir.path(), None, 3).expect("nobody holds the stale file");
        assert!(!stale.exists());
        drop(c);
    }
}
