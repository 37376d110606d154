//! Faults on a regular file's page cache (the model's kernel/mm/filemap.rs):
//! the first write to a read-mapped page of a `MAP_SHARED` file, whose
//! cost beyond the fault is the filesystem's `->page_mkwrite()`
//! (`page_mkwrite_ns`); a copy-on-write of a cached page (`page_copy_ns`);
//! a read fault's fault-around over a mapped window
//! (`fault_around_page_ns`). Primitives of their own, never a
//! will-it-scale loop.

use super::sample::Spread;
use super::Budget;
use std::io;
use std::time::Instant;

/// Bytes between the pages written: one PMD, so that each write meets a
/// fresh read-only mapping whether the host maps the file's folios with
/// PTEs or (PMD-sized folios) with one PMD.
const EXTENT: usize = 2 << 20;

/// A sparse temporary file of `len` bytes in `/tmp` (created, sized,
/// unlinked); its descriptor.
fn temp_file(len: usize) -> Result<libc::c_int, String> {
    let mut name = *b"/tmp/tlbsim-calibrate.XXXXXX\0";
    // SAFETY: name is a writable NUL-terminated template.
    let fd = unsafe { libc::mkstemp(name.as_mut_ptr().cast()) };
    if fd < 0 {
        return Err(format!(
            "mkstemp(/tmp/tlbsim-calibrate.XXXXXX): {}",
            io::Error::last_os_error()
        ));
    }
    // SAFETY: fd is ours; name is the path mkstemp filled in.
    let sized = unsafe { libc::ftruncate(fd, len as libc::off_t) } == 0;
    let e = io::Error::last_os_error();
    // SAFETY: as above.
    unsafe { libc::unlink(name.as_ptr().cast()) };
    if !sized {
        // SAFETY: fd is ours.
        unsafe { libc::close(fd) };
        return Err(format!("ftruncate of a {len}-byte /tmp file: {e}"));
    }
    Ok(fd)
}

/// The file's size: its last half is timed. Reading it sequentially
/// first lets readahead grow its folios (order +2 per asynchronous
/// readahead, up to PMD-sized on a filesystem with large folios, ext4
/// since 6.16), as a file a program keeps using ends up cached.
const FILE_BYTES: usize = 64 << 20;

/// Reads the whole file with `read()` in 1 MiB pieces (fills the page
/// cache; the holes read as zeroes).
pub(crate) fn read_through(fd: libc::c_int) -> Result<(), String> {
    let mut buf = vec![0u8; 1 << 20];
    // SAFETY: fd is ours.
    unsafe { libc::lseek(fd, 0, libc::SEEK_SET) };
    loop {
        // SAFETY: buf has buf.len() writable bytes.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        match n {
            0 => return Ok(()),
            n if n < 0 => {
                return Err(format!(
                    "read of a /tmp file: {}",
                    io::Error::last_os_error()
                ))
            }
            _ => {}
        }
    }
}

/// A new read-write mapping of `len` bytes of file `fd` from `off`
/// (`MAP_SHARED` or `MAP_PRIVATE` in `flags`); the caller unmaps it.
fn map_file(
    fd: libc::c_int,
    len: usize,
    flags: libc::c_int,
    off: usize,
) -> Result<*mut libc::c_void, String> {
    // SAFETY: a new mapping of our own file, checked below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            fd,
            off as libc::off_t,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(format!(
            "mmap of {len} bytes of a /tmp file: {}",
            io::Error::last_os_error()
        ));
    }
    Ok(p)
}

/// `FilePmdMapped` of this process's mapping starting at `addr`, in KiB
/// (/proc/self/smaps; 0 if not found).
fn file_pmd_mapped_kib(addr: usize) -> u64 {
    let text = std::fs::read_to_string("/proc/self/smaps").unwrap_or_default();
    let head = format!("{addr:x}-");
    let mut inside = false;
    for l in text.lines() {
        if l.starts_with(|c: char| c.is_ascii_hexdigit()) && l.contains('-') && l.contains(' ') {
            inside = l.starts_with(&head);
        } else if inside {
            if let Some(v) = l.strip_prefix("FilePmdMapped:") {
                return v.trim().trim_end_matches("kB").trim().parse().unwrap_or(0);
            }
        }
    }
    0
}

/// What [`shared_write_fault`] measured: the write's spread and how much
/// of the timed half the host had mapped with PMDs before the writes.
#[derive(Debug, Clone, Copy)]
pub struct SharedWrite {
    /// Per write.
    pub spread: Spread,
    /// `FilePmdMapped` after the reads, KiB, and the timed bytes' KiB.
    pub pmd_kib: (u64, u64),
}

/// The first write to a page of a `MAP_SHARED` file that a read just
/// mapped read-only, per write: the last 2 MiB of a 64 MiB sparse file
/// read through first, mapped afresh (2 MiB at its offset), one byte
/// read, the same byte written (timed), unmapped; repeated, so that the
/// folio stays cache-hot. The first repetitions dirty the folio (as a
/// file a program keeps writing is) and are not timed. Each write takes
/// a write-protect fault: the filesystem's `page_mkwrite`, and where the
/// host maps the file's folios with PMDs, the PMD's split first.
pub fn shared_write_fault(b: &Budget) -> Result<SharedWrite, String> {
    let fd = temp_file(FILE_BYTES)?;
    let off = FILE_BYTES - EXTENT;
    let r = (|| {
        read_through(fd)?;
        let mut samples = Vec::new();
        let mut pmd_kib = 0;
        let n = b.n(2_000) as usize;
        for i in 0..n + 10 {
            let p = map_file(fd, EXTENT, libc::MAP_SHARED, off)?;
            let at = p.cast::<u8>();
            // SAFETY: inside the mapping; volatile so that neither access
            // is elided.
            let v = unsafe { std::ptr::read_volatile(at) };
            if i == 0 {
                pmd_kib = file_pmd_mapped_kib(p as usize);
            }
            let t = Instant::now();
            // SAFETY: as above.
            unsafe { std::ptr::write_volatile(at, v.wrapping_add(1)) };
            if i >= 10 {
                samples.push(t.elapsed().as_nanos() as f64);
            }
            // SAFETY: p was mapped above with this length.
            unsafe { libc::munmap(p, EXTENT) };
        }
        Ok(SharedWrite {
            spread: Spread::of(&samples).expect("iterations"),
            pmd_kib: (pmd_kib, (EXTENT / 1024) as u64),
        })
    })();
    // SAFETY: fd is ours.
    unsafe { libc::close(fd) };
    r
}

/// A read fault whose fault-around finds the rest of its window mapped:
/// a cached 1 MiB `MAP_PRIVATE` file mapping read whole (fault-around
/// maps every page read-only from the page cache), then, per sample, one
/// page dropped with `madvise(MADV_DONTNEED)` (not timed) and read again
/// (timed): `do_read_fault()` → `do_fault_around()` →
/// `filemap_map_pages()` walks the window of `fault_around_bytes` around
/// it, skipping the pages still mapped, and maps the one. Never a
/// will-it-scale loop: no write, no second task.
pub fn fault_around_read(b: &Budget) -> Result<Spread, String> {
    let fd = temp_file(COW_FILE_BYTES)?;
    let ps = super::sample::page_size();
    let pages = COW_FILE_BYTES / ps;
    let r = (|| {
        read_through(fd)?;
        let p = map_file(fd, COW_FILE_BYTES, libc::MAP_PRIVATE, 0)?;
        let at = p.cast::<u8>();
        let read = |k: usize| {
            // SAFETY: page k < pages of the mapping; volatile so that the
            // read is not elided.
            unsafe { std::ptr::read_volatile(at.add(k * ps)) }
        };
        (0..pages).for_each(|k| {
            read(k);
        });
        let mut samples = Vec::new();
        let n = b.n(2_000) as usize;
        for i in 0..n {
            // Pages inside the file, away from its ends: full windows.
            let k = 32 + (i * 7) % (pages - 64);
            // SAFETY: one page of the mapping.
            let rc = unsafe { libc::madvise(at.add(k * ps).cast(), ps, libc::MADV_DONTNEED) };
            if rc != 0 {
                let e = io::Error::last_os_error();
                // SAFETY: p was mapped above with this length.
                unsafe { libc::munmap(p, COW_FILE_BYTES) };
                return Err(format!("madvise(MADV_DONTNEED) of a /tmp file page: {e}"));
            }
            let t = Instant::now();
            read(k);
            samples.push(t.elapsed().as_nanos() as f64);
        }
        // SAFETY: p was mapped above with this length.
        unsafe { libc::munmap(p, COW_FILE_BYTES) };
        Ok(Spread::of(&samples).expect("iterations"))
    })();
    // SAFETY: fd is ours.
    unsafe { libc::close(fd) };
    r
}

/// `fault_around_bytes` of this host's kernel, in pages: its debugfs
/// value, or Linux's default (64 KiB) where debugfs is not readable.
pub fn fault_around_pages() -> (u64, &'static str) {
    let ps = super::sample::page_size() as u64;
    match std::fs::read_to_string("/sys/kernel/debug/fault_around_bytes")
        .ok()
        .and_then(|t| t.trim().parse::<u64>().ok())
    {
        Some(b) if b >= ps => (b / ps, "debugfs fault_around_bytes"),
        _ => (65536 / ps, "Linux's default fault_around_bytes, 64 KiB"),
    }
}

/// The file of [`private_cow_fault`]: small enough that no folio of it can
/// be PMD-sized, so every page is mapped by a PTE.
const COW_FILE_BYTES: usize = 1 << 20;
/// Pages written per mapping in [`private_cow_fault`].
const COW_PAGES: usize = 16;

/// A copy-on-write fault that copies, per write: 16 pages of a cached,
/// 1 MiB `MAP_PRIVATE` file mapping, each read first (the read fault and
/// fault-around map them read-only from the page cache), then each
/// written (timed): `do_wp_page()` → `wp_page_copy()` allocates a page,
/// copies the cached one into it, clears and flushes the read-only PTE
/// (a local flush: one thread) and maps the copy. Mapped afresh each
/// repetition. Never a will-it-scale loop: no madvise, no second task.
pub fn private_cow_fault(b: &Budget) -> Result<Spread, String> {
    let fd = temp_file(COW_FILE_BYTES)?;
    let ps = super::sample::page_size();
    let len = COW_PAGES * ps;
    let r = (|| {
        read_through(fd)?;
        let mut samples = Vec::new();
        let reps = b.n(400) as usize;
        for rep in 0..reps + 2 {
            let p = map_file(fd, len, libc::MAP_PRIVATE, 0)?;
            let at = p.cast::<u8>();
            for i in 0..COW_PAGES {
                // SAFETY: inside the mapping; volatile so it is not elided.
                unsafe { std::ptr::read_volatile(at.add(i * ps)) };
            }
            let t = Instant::now();
            for i in 0..COW_PAGES {
                // SAFETY: as above.
                unsafe { std::ptr::write_volatile(at.add(i * ps), 1) };
            }
            let per = t.elapsed().as_nanos() as f64 / COW_PAGES as f64;
            if rep >= 2 {
                samples.push(per);
            }
            // SAFETY: p was mapped above with this length.
            unsafe { libc::munmap(p, len) };
        }
        Ok(Spread::of(&samples).expect("repetitions"))
    })();
    // SAFETY: fd is ours.
    unsafe { libc::close(fd) };
    r
}
