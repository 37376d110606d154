//! Files whose pages are all in the page cache (fs/read_write.c and
//! mm/filemap.c, reduced to their costs): `read()`, `write()` and
//! `lseek()` on an open file with a position. Enough for unixbench's
//! file-copy tests (`fstime`). These paths do no TLB maintenance: the
//! kernel copies through its linear map, and a file written with
//! `write()` is never mapped in user space, so writeback's
//! `folio_mkclean()` has no PTE to clean. Writeback itself, block
//! allocation and the disk are not modelled (docs/model.md, "Files").

use super::entry::{syscall_enter, syscall_exit};
use super::Ctx;
use crate::config::FileCosts;

/// An open file of a fixed size: its page-cache pages exist (a test
/// writes them before it measures) and `pos` is the file position.
#[derive(Debug, Clone)]
pub struct CachedFile {
    /// File size (bytes).
    pub size: u64,
    /// Position of the next read or write (bytes).
    pub pos: u64,
}

impl CachedFile {
    /// A file of `size` bytes, position 0.
    pub fn new(size: u64) -> Self {
        CachedFile { size, pos: 0 }
    }
}

/// The page-cache costs of the running kernel's machine. Workloads that
/// call into this module are refused at setup on a profile without a
/// `[file]` section (their `check`), so this holds while they run.
fn costs(ctx: &Ctx) -> &FileCosts {
    ctx.w.profile.file.as_ref().expect(
        "a workload that copies files runs only on a profile with [file] (checked at setup)",
    )
}

/// Time to copy `bytes` between user space and a cached page (ns),
/// saturating: a cost never wraps.
fn copy_ns(c: &FileCosts, bytes: u64) -> u64 {
    c.copy_user_ns_per_kib.saturating_mul(bytes) / 1024
}

/// `read(fd, buf, len)` (`ksys_read` -> `filemap_read`): copies up to
/// `len` bytes from the file position, short at the end of the file;
/// returns the bytes read (0 at the end).
pub async fn sys_read(ctx: &Ctx, f: &mut CachedFile, len: u64) -> u64 {
    let _f = ctx.func(crate::label!("ksys_read"));
    syscall_enter(ctx, "read").await;
    let n = len.min(f.size.saturating_sub(f.pos));
    let c = costs(ctx);
    ctx.work(c.file_read_ns.saturating_add(copy_ns(c, n))).await;
    f.pos += n;
    syscall_exit(ctx, "read").await;
    n
}

/// `write(fd, buf, len)` (`ksys_write` -> `generic_perform_write`):
/// overwrites `len` bytes at the file position. The file keeps its size:
/// the writes modelled overwrite cached pages (a write past the end
/// extends the position only).
pub async fn sys_write(ctx: &Ctx, f: &mut CachedFile, len: u64) {
    let _f = ctx.func(crate::label!("ksys_write"));
    syscall_enter(ctx, "write").await;
    let c = costs(ctx);
    ctx.work(c.file_write_ns.saturating_add(copy_ns(c, len)))
        .await;
    f.pos = f.pos.saturating_add(len);
    syscall_exit(ctx, "write").await;
}

/// `lseek(fd, pos, SEEK_SET)`: a system call with no work beyond entry
/// and exit.
pub async fn sys_lseek(ctx: &Ctx, f: &mut CachedFile, pos: u64) {
    syscall_enter(ctx, "lseek").await;
    f.pos = pos;
    syscall_exit(ctx, "lseek").await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_copy_cost_is_per_kib_and_saturates() {
        let c = FileCosts {
            file_read_ns: 10,
            file_write_ns: 20,
            copy_user_ns_per_kib: 150,
        };
        assert_eq!(copy_ns(&c, 1024), 150);
        assert_eq!(copy_ns(&c, 256), 37);
        assert_eq!(copy_ns(&c, 0), 0);
        let big = FileCosts {
            copy_user_ns_per_kib: u64::MAX,
            ..c
        };
        assert_eq!(copy_ns(&big, 4096), u64::MAX / 1024);
    }
}
