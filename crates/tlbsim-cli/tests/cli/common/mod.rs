//! Helpers shared by the end-to-end tests of the `tlbsim` command (the
//! modules of the one `cli` test binary).

use std::collections::BTreeMap;
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex, Weak};

/// The `tlbsim` binary under test.
pub const EXE: &str = env!("CARGO_BIN_EXE_tlbsim");

/// seed000-mprotect: with `workload.iterations=10`, a run of a few
/// milliseconds.
pub const MPROTECT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../experiments/seed000-mprotect.toml"
);

/// Runs `tlbsim ARGS` in `dir`.
pub fn tlbsim_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(EXE)
        .args(args)
        .current_dir(dir)
        .output()
        .expect("tlbsim runs")
}

/// Runs `tlbsim ARGS` in the current directory.
pub fn tlbsim(args: &[&str]) -> Output {
    tlbsim_in(Path::new("."), args)
}

/// A temporary directory, removed with what it holds when dropped (so a
/// test run leaves nothing in the system's temporary directory); it
/// dereferences to its path.
pub struct Scratch {
    dir: Arc<tempfile::TempDir>,
    path: PathBuf,
}

impl Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<std::ffi::OsStr> for Scratch {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.path.as_os_str()
    }
}

impl Scratch {
    /// `name` in the same directory, which stays while either is kept.
    pub fn sibling(&self, name: &str) -> Scratch {
        Scratch {
            dir: Arc::clone(&self.dir),
            path: self.dir.path().join(name),
        }
    }
}

/// A new empty directory for one test, named after the test module
/// (`prefix`) and the test, removed when the result is dropped.
pub fn scratch_dir(prefix: &str, test: &str) -> Scratch {
    let dir = tempfile::Builder::new()
        .prefix(&format!("tlbsim-{prefix}-{test}-"))
        .tempdir()
        .expect("a temporary directory");
    let path = dir.path().to_path_buf();
    Scratch {
        dir: Arc::new(dir),
        path,
    }
}

/// The directory that the tests of one module (`prefix`) share while any
/// of them holds it (removed when the last drops it; a later call makes a
/// new one). One per prefix: the modules are one binary, and one module's
/// file names must not meet another's.
pub fn shared_dir(prefix: &str) -> Scratch {
    static SHARED: Mutex<BTreeMap<String, Weak<tempfile::TempDir>>> = Mutex::new(BTreeMap::new());
    let mut shared = SHARED.lock().unwrap_or_else(|p| p.into_inner());
    let w = shared.entry(prefix.to_string()).or_default();
    let dir = match w.upgrade() {
        Some(d) => d,
        None => {
            let d = Arc::new(
                tempfile::Builder::new()
                    .prefix(&format!("tlbsim-{prefix}-"))
                    .tempdir()
                    .expect("a temporary directory"),
            );
            *w = Arc::downgrade(&d);
            d
        }
    };
    let path = dir.path().to_path_buf();
    Scratch { dir, path }
}

/// Writes `text` to `name` (which may have directories) in the module's
/// [`shared_dir`]; the file's path, which keeps the directory.
pub fn shared_file(prefix: &str, name: &str, text: &str) -> Scratch {
    let f = shared_dir(prefix).sibling(name);
    std::fs::create_dir_all(f.parent().unwrap()).unwrap();
    std::fs::write(&*f, text).unwrap();
    f
}

/// A path as the `&str` a command line takes.
pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Standard error, lossily decoded.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Standard output, lossily decoded.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A herd litmus test: break-before-make with a completed broadcast TLBI
/// (Forbidden).
pub const SHOOT_LITMUS: &str = "AArch64 shoot
{
0:X1=(oa:phy_x,valid:0); 0:X2=pte_x; 0:X3=x; 0:X8=z;
1:X3=x; 1:X8=z;
}
 P0              | P1          ;
 STR X1,[X2]     | LDR W7,[X8] ;
 DSB ISH         | L0:         ;
 LSR X9,X3,#12   | LDR W4,[X3] ;
 TLBI VAAE1IS,X9 |             ;
 DSB ISH         |             ;
 MOV W7,#1       |             ;
 STR W7,[X8]     |             ;
exists(1:X7=1 /\\ ~fault(P1:L0,x))
";
