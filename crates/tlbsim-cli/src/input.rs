//! Reading input files whole, with a size limit: a configuration or result
//! file named by mistake as `/dev/zero`, a FIFO that never ends or a huge
//! binary is refused after at most the limit's bytes, never read forever
//! (`tlbsim run /dev/zero` used to hang). The limits are in
//! [`tlbsim::config::limits`].

use crate::files::why;
use std::io::Read;
use std::path::Path;

/// The text of `path`, at most `max_bytes` long. `what` names the kind of
/// file in the error ("experiment", "profile", "result"). The error does
/// not name the path (callers put it first): `cannot read: No such file or
/// directory`, `larger than tlbsim's limit of 4194304 bytes for an
/// experiment file`, `not UTF-8 text (byte 12)`.
pub fn read_limited(path: &Path, max_bytes: u64, what: &str) -> Result<String, String> {
    let too_big = || format!("larger than tlbsim's limit of {max_bytes} bytes for {what} file");
    let mut f = std::fs::File::open(path).map_err(|e| format!("cannot read: {}", why(&e)))?;
    // A regular file says its size: refuse it without reading.
    if let Ok(m) = f.metadata() {
        if m.is_file() && m.len() > max_bytes {
            return Err(too_big());
        }
    }
    let mut bytes = Vec::new();
    (&mut f)
        .take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read: {}", why(&e)))?;
    if bytes.len() as u64 > max_bytes {
        return Err(too_big());
    }
    String::from_utf8(bytes).map_err(|e| {
        format!(
            "not UTF-8 text (byte {}): not {what} file",
            e.utf8_error().valid_up_to()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::read_limited;
    use std::path::Path;

    #[test]
    fn an_endless_device_is_refused_at_the_limit() {
        let t0 = std::time::Instant::now();
        let e = read_limited(Path::new("/dev/zero"), 1 << 20, "an experiment").unwrap_err();
        assert_eq!(
            e,
            "larger than tlbsim's limit of 1048576 bytes for an experiment file"
        );
        assert!(t0.elapsed().as_secs() < 5);
        let e = read_limited(Path::new("/nonexistent/x.toml"), 10, "an experiment").unwrap_err();
        assert_eq!(e, "cannot read: No such file or directory");
    }

    #[test]
    fn a_regular_file_over_the_limit_is_refused_unread_and_binary_is_named() {
        let dir = std::env::temp_dir().join(format!("tlbsim-input-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("big.toml");
        std::fs::write(&p, vec![b'#'; 100]).unwrap();
        assert!(read_limited(&p, 99, "a profile")
            .unwrap_err()
            .starts_with("larger than"));
        assert_eq!(read_limited(&p, 100, "a profile").unwrap().len(), 100);
        std::fs::write(&p, b"name = \xff").unwrap();
        let e = read_limited(&p, 100, "a profile").unwrap_err();
        assert_eq!(e, "not UTF-8 text (byte 7): not a profile file");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
