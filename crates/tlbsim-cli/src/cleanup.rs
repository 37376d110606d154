//! Files this process must not leave behind when a signal ends it: the
//! temporary files of writes under way (`files::write_atomic`), a sweep's
//! claim on its directory, `record`'s perf data. Each is [`register`]ed
//! before it is created (between [`creating`] and [`created`]) until it is gone; on
//! SIGINT, SIGTERM or SIGHUP the
//! handler [`install`] sets removes those registered, then lets the signal
//! end the process as it would have (exit status 128 + the signal). A
//! signal the process was started ignoring (`nohup`) stays ignored.
//! SIGKILL cannot be caught: what it leaves is hidden and never read
//! (docs in `files` and `cmd::sweep::store`).

use std::path::Path;

/// Most files registered at once (a write per thread, a claim, perf's
/// data); a file past this is not removed on a signal.
#[cfg(unix)]
const SLOTS: usize = 256;

/// Set by the signal handler before it removes the files: a file created
/// after it looked is removed by its creator ([`created`]).
static EXITING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The registered files' paths (C strings owned by the slot), or null.
#[cfg(unix)]
static PATHS: [std::sync::atomic::AtomicPtr<libc::c_char>; SLOTS] =
    [const { std::sync::atomic::AtomicPtr::new(std::ptr::null_mut()) }; SLOTS];

/// A registered file: removed by the signal handler until this is dropped
/// (drop it once the file is gone or renamed).
pub struct Registered {
    #[cfg(unix)]
    slot: Option<usize>,
}

/// Registers the file `path` (relative to the working directory, which
/// the commands never change) for removal on a signal.
#[cfg(unix)]
pub fn register(path: &Path) -> Registered {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    use std::sync::atomic::Ordering::SeqCst;
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else {
        return Registered { slot: None };
    };
    let ptr = c.into_raw();
    for (i, slot) in PATHS.iter().enumerate() {
        if slot
            .compare_exchange(std::ptr::null_mut(), ptr, SeqCst, SeqCst)
            .is_ok()
        {
            return Registered { slot: Some(i) };
        }
    }
    // SAFETY: ptr came from into_raw above and was not stored.
    drop(unsafe { CString::from_raw(ptr) });
    Registered { slot: None }
}

/// Threads between [`creating`] and [`created`]: the handler waits for
/// them (other than its own) before it removes the files and ends the
/// process, so that no file is created after it looked and before the
/// end (a thread killed between its `open` and `created` would leave it).
static CREATING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

thread_local! {
    /// This thread is between [`creating`] and [`created`].
    static IN_WINDOW: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Says that this thread is about to create the registered file; call
/// [`created`] once it exists (or failed to). If a signal is ending the
/// process, this thread waits for the end instead of creating it.
pub fn creating() {
    use std::sync::atomic::Ordering::SeqCst;
    CREATING.fetch_add(1, SeqCst);
    IN_WINDOW.with(|w| w.set(true));
    if EXITING.load(SeqCst) {
        leave_window();
        loop {
            std::thread::park();
        }
    }
}

/// Ends this thread's [`creating`] window when the file was not created
/// (nothing of ours to remove).
pub fn not_created() {
    leave_window();
}

/// Ends this thread's [`creating`] window.
fn leave_window() {
    if IN_WINDOW.with(|w| w.replace(false)) {
        CREATING.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Says that the registered file `path` now exists (or that its creation
/// failed), ending the [`creating`] window. If a signal is ending the
/// process, the handler may have looked before the file existed: the
/// file is removed here and this thread waits for the end.
pub fn created(path: &Path) {
    if EXITING.load(std::sync::atomic::Ordering::SeqCst) {
        let _ = std::fs::remove_file(path);
        leave_window();
        loop {
            std::thread::park();
        }
    }
    leave_window();
}

/// Waits for the end if a signal is ending the process. The handler
/// removes the registered files while the other threads run on: a write
/// whose temporary file it removed fails, and a command that then
/// returned its error would end the process with that error's exit code
/// before the handler re-raised the signal. The command's result is
/// dropped here instead, and the signal ends the process.
pub fn wait_if_exiting() {
    if EXITING.load(std::sync::atomic::Ordering::SeqCst) {
        loop {
            std::thread::park();
        }
    }
}

/// Registers nothing: no signal handler outside Unix.
#[cfg(not(unix))]
pub fn register(_: &Path) -> Registered {
    Registered {}
}

#[cfg(unix)]
impl Drop for Registered {
    fn drop(&mut self) {
        use std::sync::atomic::Ordering::SeqCst;
        if let Some(i) = self.slot {
            // Whoever swaps the pointer out (this, or the handler) owns it.
            let p = PATHS[i].swap(std::ptr::null_mut(), SeqCst);
            if !p.is_null() {
                // SAFETY: p came from CString::into_raw in register.
                drop(unsafe { std::ffi::CString::from_raw(p) });
            }
        }
    }
}

/// The signal handler: removes every registered file, then ends the
/// process by the signal. Only async-signal-safe calls (atomic swaps,
/// `unlink`, `signal`, `raise`).
#[cfg(unix)]
extern "C" fn on_signal(sig: libc::c_int) {
    use std::sync::atomic::Ordering::SeqCst;
    EXITING.store(true, SeqCst);
    // Let the other threads that are creating a registered file finish
    // (they remove it themselves in `created`, seeing EXITING): one killed
    // between its `open` and `created` would leave its file behind.
    let me = usize::from(IN_WINDOW.with(|w| w.get()));
    while CREATING.load(SeqCst) > me {
        std::hint::spin_loop();
    }
    for slot in &PATHS {
        let p = slot.swap(std::ptr::null_mut(), SeqCst);
        if !p.is_null() {
            // SAFETY: p is a NUL-terminated path no one else owns now; it
            // is not freed (the process ends).
            unsafe { libc::unlink(p) };
        }
    }
    // SAFETY: restoring the default action and raising the signal again
    // ends the process as the signal would have.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}

/// Installs the handler for SIGINT, SIGTERM and SIGHUP, except for a
/// signal that is ignored.
#[cfg(unix)]
pub fn install() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: sigaction with valid, zero-initialised structures; the
        // handler only makes async-signal-safe calls.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) != 0
                || old.sa_sigaction == libc::SIG_IGN
            {
                continue;
            }
            let mut new: libc::sigaction = std::mem::zeroed();
            new.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            libc::sigemptyset(&mut new.sa_mask);
            libc::sigaction(sig, &new, std::ptr::null_mut());
        }
    }
}

/// No handler outside Unix.
#[cfg(not(unix))]
pub fn install() {}

#[cfg(all(test, unix))]
mod tests {
    use super::{register, PATHS};
    use std::sync::atomic::Ordering::SeqCst;

    #[test]
    fn a_registration_holds_the_path_until_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("x.tmp");
        let r = register(&f);
        let slot = r.slot.expect("a free slot");
        let p = PATHS[slot].load(SeqCst);
        // SAFETY: the slot holds a C string while registered.
        let s = unsafe { std::ffi::CStr::from_ptr(p) };
        assert_eq!(s.to_str().unwrap(), f.to_str().unwrap());
        drop(r);
        assert!(PATHS[slot].load(SeqCst).is_null());
    }
}
