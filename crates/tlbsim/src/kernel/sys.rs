//! System calls with nothing to model but their entry and exit
//! (kernel/sys.c's `getpid()`, `getuid()`, `umask()`, and the like).

use super::entry::{syscall_enter, syscall_exit};
use super::Ctx;

/// A system call that does nothing but enter and return (`getpid`,
/// `getuid`, `umask`, `dup`, `close` of unixbench's `syscall` test):
/// `syscall_ns` in all.
pub async fn sys_null(ctx: &Ctx, name: &'static str) {
    syscall_enter(ctx, name).await;
    syscall_exit(ctx, name).await;
}
