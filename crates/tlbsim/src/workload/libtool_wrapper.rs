//! How `for-each-cpu.sh` starts a test of a gperftools build tree: the
//! program it names is libtool's wrapper script, which bash runs (forking
//! subshells and exec'ing `sed` and `ls`) before it execs the real binary.
//!
//! The shape and every count are measured on the host with gperftools
//! 2.7's `tcmalloc_large_heap_fragmentation_unittest` wrapper (libtool
//! 2.4.7, bash 5.2, glibc 2.36; strace -f and perf,
//! docs/research/seed000-libtool-launch.md). The processes come from the
//! wrapper's lines ([`commands`]); the per-process system calls and
//! copy-on-write faults are [`WrapperShape`]'s parameters. The model's own
//! kernel paths turn them into flushes: fork's `flush_tlb_mm`, a
//! copy-on-write copy's `ptep_clear_flush`, arm64's flush after a reused
//! page is made writable, mprotect and munmap ranges, and the teardown of
//! every exited or exec'd-away address space.
//!
//! Not modelled: exec's stack move (`setup_arg_pages`, two range flushes
//! per exec on the host), which the model's `execve` lacks for every
//! program, the direct start too.

use super::lifecycle::{program_start, shell_setup, Anatomy, Image};
use crate::kernel::exit::sys_wait;
use crate::kernel::fork::sys_fork;
use crate::kernel::{Ctx, Program};
use serde::{Deserialize, Serialize};
use std::rc::Rc;

/// How the test is started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Launcher {
    /// The binary itself: fork, exec, the loader (the model until now).
    #[default]
    Direct,
    /// libtool's wrapper script, then the binary ([`WrapperShape`]).
    LibtoolWrapper,
}

/// libtool's `fast_install`, which decides what the wrapper execs and so
/// its last command (docs/research/seed000-libtool-launch.md, "Setup").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FastInstall {
    /// Tree B (`DT_RPATH`, as on RHEL 8 by inference): the wrapper execs
    /// `.libs/lt-NAME` after checking with `ls -1dt ... | sed 1q` that it
    /// is up to date (steady state: no relink).
    #[default]
    Yes,
    /// Tree A (Debian's default `DT_RUNPATH`): the wrapper sets
    /// `LD_LIBRARY_PATH` with `$ECHO ... | sed` and execs `.libs/NAME`.
    Needless,
}

/// The wrapper launch's per-process counts. Defaults: measured on the
/// host, docs/research/seed000-libtool-launch.md (bash 5.2, GNU sed 4.9,
/// coreutils 9.1, glibc 2.36), except where a comment says otherwise.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct WrapperShape {
    /// libtool's `fast_install` of the build tree. Default `yes` (tree
    /// B): the research note's best guess at the seed's RHEL 8 tree.
    pub libtool_fast_install: FastInstall,
    /// mmap calls of the wrapper's bash from its exec on (measured: 25).
    pub wrapper_mmaps: u64,
    /// mprotect calls of the wrapper's bash (measured: 4).
    pub wrapper_mprotects: u64,
    /// munmap calls of the wrapper's bash (measured: 1).
    pub wrapper_munmaps: u64,
    /// brk calls of the wrapper's bash (measured: about 4).
    pub wrapper_brks: u64,
    /// Copy-on-write faults of the wrapper's bash at its start. Measured:
    /// about 70 over its start and its 6 forks together; the split was
    /// not measured, so it is assumed even: 10 at start, 10 per fork.
    pub wrapper_start_cow_faults: u64,
    /// Copy-on-write faults of the wrapper's bash after each fork, while
    /// the child lives (see `wrapper_start_cow_faults`: 10, assumed).
    pub wrapper_cow_faults_per_fork: u64,
    /// Write faults of the wrapper's bash that reuse the page, after each
    /// command's processes are gone. Measured: about 275 per launch (764
    /// write faults on present PTEs less 467 copies and the binary's 22);
    /// where they fall was not measured: all in the wrapper's bash, 6
    /// commands, 46 each (assumed).
    pub wrapper_reuse_faults_per_command: u64,
    /// Copy-on-write faults of each fork-only subshell (measured: 283
    /// over tree A's 9, about 31 each, counting the parent side of their
    /// own forks).
    pub subshell_cow_faults: u64,
    /// Copy-on-write faults of each exec'd helper after its exec (the
    /// loader's): measured about 26 per helper for the child shell before
    /// exec and the loader together, less the 12 the model's anatomy
    /// gives the child shell (`child_cow_faults`, measured for bash
    /// forking sort): 14.
    pub helper_cow_faults: u64,
    /// mmap calls of each exec'd `sed` (measured: 34).
    pub sed_mmaps: u64,
    /// mprotect calls of each `sed` (measured: 6).
    pub sed_mprotects: u64,
    /// munmap calls of each `sed` (measured: 1).
    pub sed_munmaps: u64,
    /// brk calls of each `sed` (measured: 3).
    pub sed_brks: u64,
    /// mmap calls of each exec'd `ls` (measured: 30).
    pub ls_mmaps: u64,
    /// mprotect calls of each `ls` (measured: 5).
    pub ls_mprotects: u64,
    /// munmap calls of each `ls` (measured: 1).
    pub ls_munmaps: u64,
    /// brk calls of each `ls` (measured: 3).
    pub ls_brks: u64,
    /// User work of the wrapper's bash (ns), spread evenly before its 6
    /// commands and its final exec. See `subshell_user_ns`.
    pub wrapper_user_ns: u64,
    /// User work of each fork-only subshell (ns). Derived: the launch's
    /// CPU time is measured (tree B: 13.76 - 3.28 = 10.48 ms of
    /// task-clock added per launch on the host), x 2.5 (eMAG/host,
    /// docs/model.md) = 26.2 ms, less the 6.21 ms of kernel work the
    /// model adds for the launch (one copy on ampere-32 under
    /// arm64-skip-broadcast-v2, where every flush is local, no user work:
    /// 7.70 ms through the wrapper against 1.49 ms direct; docs/model.md,
    /// "The libtool wrapper launch"): 20.0 ms of user work. Its split by
    /// process was not measured: even over the 14 processes (the
    /// wrapper's bash and the 13 it creates), 1.43 ms each (estimated).
    pub subshell_user_ns: u64,
    /// User work of each exec'd `sed` or `ls` (ns), after its start-up
    /// (see `subshell_user_ns`).
    pub helper_user_ns: u64,
}

impl Default for WrapperShape {
    /// The parameters a config that gives none runs with.
    fn default() -> Self {
        WrapperShape {
            libtool_fast_install: Default::default(),
            wrapper_mmaps: 25,
            wrapper_mprotects: 4,
            wrapper_munmaps: 1,
            wrapper_brks: 4,
            wrapper_start_cow_faults: 10,
            wrapper_cow_faults_per_fork: 10,
            wrapper_reuse_faults_per_command: 46,
            subshell_cow_faults: 31,
            helper_cow_faults: 14,
            sed_mmaps: 34,
            sed_mprotects: 6,
            sed_munmaps: 1,
            sed_brks: 3,
            ls_mmaps: 30,
            ls_mprotects: 5,
            ls_munmaps: 1,
            ls_brks: 3,
            wrapper_user_ns: 1_430_000,
            subshell_user_ns: 1_430_000,
            helper_user_ns: 1_430_000,
        }
    }
}

/// Most system calls of one kind a process of the launch may make.
const MAX_CALLS: u64 = 1 << 16;

impl WrapperShape {
    /// Checks the counts against each other and the shell's working set
    /// (`shell_pages`, which the wrapper's bash writes as for-each-cpu.sh
    /// does); errors name the parameter.
    pub fn validate(&self, a: &Anatomy) -> Result<(), String> {
        let counts = [
            ("wrapper_mmaps", self.wrapper_mmaps),
            ("wrapper_mprotects", self.wrapper_mprotects),
            ("wrapper_munmaps", self.wrapper_munmaps),
            ("wrapper_brks", self.wrapper_brks),
            ("wrapper_start_cow_faults", self.wrapper_start_cow_faults),
            ("sed_mmaps", self.sed_mmaps),
            ("sed_mprotects", self.sed_mprotects),
            ("sed_munmaps", self.sed_munmaps),
            ("sed_brks", self.sed_brks),
            ("ls_mmaps", self.ls_mmaps),
            ("ls_mprotects", self.ls_mprotects),
            ("ls_munmaps", self.ls_munmaps),
            ("ls_brks", self.ls_brks),
            ("helper_cow_faults", self.helper_cow_faults),
        ];
        for (name, n) in counts {
            if n > MAX_CALLS {
                return Err(format!(
                    "`{name}`: {n} exceeds tlbsim's limit of {MAX_CALLS}"
                ));
            }
        }
        for (name, n) in [
            ("wrapper_mmaps", self.wrapper_mmaps.saturating_sub(1)),
            ("sed_mmaps", self.sed_mmaps),
            ("ls_mmaps", self.ls_mmaps),
        ] {
            if n == 0 {
                return Err(format!(
                    "`{name}`: too small (each program maps at least itself; the wrapper's bash also its working set)"
                ));
            }
        }
        let used = self.subshell_cow_faults.max(a.child_cow_faults)
            + self.wrapper_cow_faults_per_fork
            + self.wrapper_reuse_faults_per_command;
        if used > a.shell_pages {
            return Err(format!(
                "`wrapper_reuse_faults_per_command`: the wrapper's writes per command \
                 (max(subshell_cow_faults, child_cow_faults) + wrapper_cow_faults_per_fork \
                 + wrapper_reuse_faults_per_command = {used}) exceed `shell_pages` ({})",
                a.shell_pages
            ));
        }
        Ok(())
    }

    /// The start of an exec'd helper: its measured system calls, and the
    /// anatomy's start-up faults (`start_faults`, enough to hold its
    /// copy-on-write and mprotect pages).
    fn image(&self, h: Helper, a: &Anatomy) -> Image {
        let (mmaps, mprotects, munmaps, brks) = match h {
            Helper::Sed => (
                self.sed_mmaps,
                self.sed_mprotects,
                self.sed_munmaps,
                self.sed_brks,
            ),
            Helper::Ls => (
                self.ls_mmaps,
                self.ls_mprotects,
                self.ls_munmaps,
                self.ls_brks,
            ),
        };
        Image {
            mmaps,
            start_faults: a.start_faults.max(self.helper_cow_faults).max(mprotects),
            cow_faults: self.helper_cow_faults,
            mprotects,
            munmaps,
            brks,
        }
    }

    /// The start of the wrapper's bash: its measured system calls less
    /// the one mmap of its working set, which [`launch`] maps itself.
    fn bash_image(&self, a: &Anatomy) -> Image {
        Image {
            mmaps: self.wrapper_mmaps - 1,
            start_faults: a
                .start_faults
                .max(self.wrapper_start_cow_faults)
                .max(self.wrapper_mprotects),
            cow_faults: self.wrapper_start_cow_faults,
            mprotects: self.wrapper_mprotects,
            munmaps: self.wrapper_munmaps,
            brks: self.wrapper_brks,
        }
    }
}

/// A helper program the wrapper execs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Helper {
    /// GNU sed.
    Sed,
    /// coreutils ls.
    Ls,
}

/// A process one of the wrapper's commands creates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proc {
    /// A forked bash that runs builtins only: it forks its own processes
    /// (a pipeline's parts) one after the other, waits for them, exits.
    Subshell(&'static [Proc]),
    /// A forked bash that execs a helper.
    Exec(Helper),
}

use Proc::{Exec, Subshell};

/// The wrapper's commands that create processes, in order, each the
/// subshell the wrapper forks for it (docs/research/seed000-libtool-launch.md,
/// section 1; libtool 2.4.7 `func_emit_wrapper`).
pub fn commands(fast_install: FastInstall) -> [Proc; 6] {
    [
        // case `(set -o) 2>/dev/null` in *posix*) set -o posix;; esac
        Subshell(&[Subshell(&[])]),
        // (unset CDPATH) >/dev/null 2>&1 && unset CDPATH
        Subshell(&[]),
        // thisdir=`$ECHO "$file" | $SED 's%/[^/]*$%%'`
        Subshell(&[Subshell(&[]), Exec(Helper::Sed)]),
        // file=`ls -ld "$file" | $SED -n 's/.*-> //p'`
        Subshell(&[Exec(Helper::Ls), Exec(Helper::Sed)]),
        // absdir=`cd "$thisdir" && pwd`
        Subshell(&[]),
        match fast_install {
            // file=`ls -1dt "$progdir/$program" "$progdir/../$program" | $SED 1q`
            FastInstall::Yes => Subshell(&[Exec(Helper::Ls), Exec(Helper::Sed)]),
            // LD_LIBRARY_PATH=`$ECHO "$LD_LIBRARY_PATH" | $SED 's/::*$//'`
            FastInstall::Needless => Subshell(&[Subshell(&[]), Exec(Helper::Sed)]),
        },
    ]
}

/// The processes a launch creates and the helpers it execs: `(processes,
/// sed, ls)`.
pub fn counts(fast_install: FastInstall) -> (u64, u64, u64) {
    fn walk(p: &Proc, n: &mut (u64, u64, u64)) {
        n.0 += 1;
        match p {
            Subshell(children) => children.iter().for_each(|c| walk(c, n)),
            Exec(Helper::Sed) => n.1 += 1,
            Exec(Helper::Ls) => n.2 += 1,
        }
    }
    let mut n = (0, 0, 0);
    commands(fast_install).iter().for_each(|c| walk(c, &mut n));
    n
}

/// The processes of one launch alive at once, at most: the wrapper's
/// bash and the largest of its commands, whose subshell waits for what
/// it forks all together (4: a subshell and a pipeline of two).
pub fn most_alive(fast_install: FastInstall) -> u64 {
    fn alive(p: &Proc) -> u64 {
        match p {
            Subshell(children) => 1 + children.iter().map(alive).sum::<u64>(),
            Exec(_) => 1,
        }
    }
    1 + commands(fast_install).iter().map(alive).max().unwrap_or(0)
}

/// Driver events of one launch through the wrapper (`tcmalloc`'s
/// `launcher = "libtool-wrapper"`: bash, the 13 processes it creates,
/// then the binary's own start): the golden seed000-tcmalloc's
/// configuration with `iterations = 0` has 329,793 events for 32
/// launches, 10,300 each (with 4 KiB pages and deferred page-table
/// frees, 18,500).
pub const EVENTS_PER_LAUNCH: u64 = 10_300;

/// The launch, in the process for-each-cpu.sh forked (whose shell working
/// set is at `shell_base`): its copy-on-write faults before exec, the exec
/// of bash on the script, the script's commands, and the exec of the
/// test binary (`exec "$progdir/$program"`), whose start is the direct
/// one's.
pub async fn launch(ctx: &Ctx, s: &Rc<WrapperShape>, a: &Rc<Anatomy>, shell_base: u64) {
    #[allow(non_snake_case)]
    let PAGE_SIZE = ctx.w.granule.page_size();
    let pages = |n| a.writes(ctx, n);
    // Offsets in the wrapper's working set wrap inside it (they fit with
    // the measured counts, `WrapperShape`'s check; packed, their rounded
    // sum may not).
    let ws_pages = pages(a.shell_pages).max(1);
    let at = |ws: u64, i: u64| ws + (i % ws_pages) * PAGE_SIZE;
    for i in 0..pages(a.child_cow_faults) {
        ctx.user_access(shell_base + i * PAGE_SIZE, true).await;
    }
    program_start(ctx, &s.bash_image(a), a.measured_pages).await;
    let ws = shell_setup(ctx, a).await;
    let cmds = commands(s.libtool_fast_install);
    let share = s.wrapper_user_ns / (cmds.len() as u64 + 1);
    // The pages the wrapper writes after each fork lie above those its
    // children write, so that which side copies is not a race.
    let own = pages(s.subshell_cow_faults).max(pages(a.child_cow_faults));
    for cmd in cmds {
        ctx.user_work(share).await;
        sys_fork(ctx, "bash", process(cmd, s, a, ws)).await;
        for i in 0..pages(s.wrapper_cow_faults_per_fork) {
            ctx.user_access(at(ws, own + i), true).await;
        }
        while sys_wait(ctx).await.is_some() {}
        let reused = own + pages(s.wrapper_cow_faults_per_fork);
        for i in 0..pages(s.wrapper_reuse_faults_per_command) {
            ctx.user_access(at(ws, reused + i), true).await;
        }
    }
    ctx.user_work(s.wrapper_user_ns - share * cmds.len() as u64)
        .await;
    program_start(ctx, &a.image(), a.measured_pages).await;
}

/// The program of a process of the launch; `ws` is the shell working set
/// it inherits.
fn process(p: Proc, s: &Rc<WrapperShape>, a: &Rc<Anatomy>, ws: u64) -> Program {
    let (s, a) = (Rc::clone(s), Rc::clone(a));
    Box::new(move |c: Ctx| {
        Box::pin(async move {
            #[allow(non_snake_case)]
            let PAGE_SIZE = c.w.granule.page_size();
            match p {
                Subshell(children) => {
                    for i in 0..a.writes(&c, s.subshell_cow_faults) {
                        c.user_access(ws + i * PAGE_SIZE, true).await;
                    }
                    c.user_work(s.subshell_user_ns).await;
                    for &child in children {
                        let name = match child {
                            Subshell(_) => "bash",
                            Exec(Helper::Sed) => "sed",
                            Exec(Helper::Ls) => "ls",
                        };
                        sys_fork(&c, name, process(child, &s, &a, ws)).await;
                    }
                    while sys_wait(&c).await.is_some() {}
                }
                Exec(h) => {
                    for i in 0..a.writes(&c, a.child_cow_faults) {
                        c.user_access(ws + i * PAGE_SIZE, true).await;
                    }
                    program_start(&c, &s.image(h, &a), a.measured_pages).await;
                    c.user_work(s.helper_user_ns).await;
                }
            }
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wrapper_lines_create_the_measured_processes() {
        // docs/research/seed000-libtool-launch.md, table 1: 13 processes;
        // B execs 3 sed and 2 ls, A 3 sed and 1 ls.
        assert_eq!(counts(FastInstall::Yes), (13, 3, 2));
        assert_eq!(counts(FastInstall::Needless), (13, 3, 1));
    }

    #[test]
    fn a_launch_has_at_most_a_subshell_and_a_pipeline_of_two_alive_besides_bash() {
        assert_eq!(most_alive(FastInstall::Yes), 4);
        assert_eq!(most_alive(FastInstall::Needless), 4);
    }
}
