//! Every piece of mutable state the model's code reaches during an
//! explorer action must record its location (`engine/track.rs`): a plain
//! `Cell` or `RefCell` in the model's directories would let the
//! partial-order reduction reorder two actions that in fact conflict, and
//! the checker would miss the bugs only that order shows (issue 19).
//!
//! This test scans the source of `src/{kernel,workload,hw,check,step}`
//! (each file's text before its first `#[cfg(test)]` line) for cell types
//! and constructors other than `TrackedCell`: `Cell<`, `RefCell<`,
//! `OnceCell<`, `UnsafeCell<`, `Cell::new`, `RefCell::default` and the
//! like, outside comments. A line may keep one with the marker comment
//! `// untracked: <reason>` on the same line or the line before.
//!
//! A second scan keeps explorer vocabulary out of the kernel and the
//! workloads (`src/{kernel,workload}`, tests included): state there gets
//! its location from its container (`engine/state.rs`, `Tracked::fresh`,
//! `hw::cell::HwCell`), never from its author, so no author can name a
//! wrong one.

use std::fmt::Write as _;
use std::path::Path;

mod source_scan;
use source_scan::rust_files;

/// The directories of `src/` whose code runs during an explorer action.
const MODEL_DIRS: &[&str] = &["kernel", "workload", "hw", "check", "step"];

/// The marker that keeps a plain cell, followed by its reason.
const MARKER: &str = "// untracked:";

/// Does the line carry the marker with a non-empty reason?
fn has_marker(line: &str) -> bool {
    line.find(MARKER)
        .is_some_and(|i| !line[i + MARKER.len()..].trim().is_empty())
}

/// The identifiers ending in `Cell` that `code` (a line without its
/// comment) uses as a type (`Cell<`) or a path (`Cell::`), other than
/// `TrackedCell`.
fn plain_cells(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    for pat in ["Cell<", "Cell::"] {
        let mut from = 0;
        while let Some(off) = code[from..].find(pat) {
            let end = from + off + "Cell".len();
            let start = code[..end]
                .rfind(|c: char| !(c.is_alphanumeric() || c == '_'))
                .map_or(0, |i| i + 1);
            let ident = &code[start..end];
            if ident != "TrackedCell" && ident != "HwCell" {
                found.push(ident.to_string());
            }
            from = end;
        }
    }
    found
}

/// The plain cells in `text` (a file's source), as `(line number, line)`.
fn scan(text: &str) -> Vec<(usize, String)> {
    let mut hits = Vec::new();
    let mut prev = "";
    for (i, line) in text.lines().enumerate() {
        if line.contains("#[cfg(test)]") {
            break;
        }
        let code = line.find("//").map_or(line, |c| &line[..c]);
        if !plain_cells(code).is_empty() && !has_marker(line) && !has_marker(prev) {
            hits.push((i + 1, line.trim().to_string()));
        }
        prev = line;
    }
    hits
}

#[test]
fn the_model_keeps_its_mutable_state_in_tracked_cells() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut report = String::new();
    let mut n = 0;
    for dir in MODEL_DIRS {
        let mut files = Vec::new();
        rust_files(&src.join(dir), &mut files);
        assert!(!files.is_empty(), "no source files under src/{dir}");
        for f in files {
            let text = std::fs::read_to_string(&f).expect("readable source");
            for (line, code) in scan(&text) {
                n += 1;
                let rel = f.strip_prefix(&src).unwrap_or(&f).display();
                let _ = writeln!(report, "src/{rel}:{line}: {code}");
            }
        }
    }
    assert!(
        n == 0,
        "{n} plain Cell/RefCell uses in the model's code: make each a Tracked/TrackedCell \
         (engine/track.rs) or mark it `{MARKER} <reason>`:\n{report}"
    );
}

#[test]
fn the_scan_finds_plain_cells_and_spares_tracked_ones_comments_and_marked_lines() {
    let text = "\
struct S {
    a: Cell<u64>,
    b: std::cell::RefCell<Vec<u32>>,
    c: TrackedCell<bool>,
    d: Tracked<Vec<u32>>,
    // e: RefCell<u32> in a comment
    hw: HwCell,
    f: OnceCell<u8>, // untracked: set once at init
    // untracked: set once at init
    g: Cell<usize>,
    h: Cell<usize>, // untracked:
}
fn k() {
    let x = Rc::new(Cell::new(false));
    let y = RefCell::default();
    let z = Rc::new(TrackedCell::new(LOC, 0));
}
#[cfg(test)]
mod tests {
    use std::cell::Cell;
    fn t(_: Cell<u8>) {}
}
";
    let lines: Vec<usize> = scan(text).into_iter().map(|(l, _)| l).collect();
    assert_eq!(lines, vec![2, 3, 11, 14, 15]);
}

/// Explorer vocabulary that kernel and workload code must not use: each
/// names a location by hand.
const LOCATION_WORDS: &[&str] = &[
    "part::",
    "Loc::",
    "Loc,",
    "Loc}",
    "Loc {",
    ": Loc",
    "-> Loc",
    "read_at(",
    "write_at(",
    "Tracked::new(",
    "TrackedCell::new(",
    "Space::Hw",
    "Space::Cx",
    "Space::Check",
    "Space::Var",
    "Space::Explore",
    "track::record",
];

/// Does `code` contain `word`, not followed by an identifier character
/// where `word` ends in one (`: Loc` is not `: LockId`)?
fn contains_word(code: &str, word: &str) -> bool {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let open_end = word.ends_with(ident);
    code.match_indices(word)
        .any(|(i, _)| !open_end || !code[i + word.len()..].starts_with(ident))
}

/// The lines of `text` (outside comments) that use a location word, as
/// `(line number, line)`.
fn scan_locations(text: &str) -> Vec<(usize, String)> {
    let mut hits = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let code = line.find("//").map_or(line, |c| &line[..c]);
        if LOCATION_WORDS.iter().any(|w| contains_word(code, w)) {
            hits.push((i + 1, line.trim().to_string()));
        }
    }
    hits
}

#[test]
fn kernel_and_workload_code_names_no_explorer_location() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut report = String::new();
    for dir in ["kernel", "workload"] {
        let mut files = Vec::new();
        rust_files(&src.join(dir), &mut files);
        assert!(!files.is_empty(), "no source files under src/{dir}");
        for f in files {
            let text = std::fs::read_to_string(&f).expect("readable source");
            for (line, code) in scan_locations(&text) {
                let rel = f.strip_prefix(&src).unwrap_or(&f).display();
                let _ = writeln!(report, "src/{rel}:{line}: {code}");
            }
        }
    }
    assert!(
        report.is_empty(),
        "kernel or workload code names an explorer location: keep the state in a \
         container that names its own (engine/state.rs PerCpu/PerMm/Var, Tracked::fresh, \
         HwCell::page_tables):\n{report}"
    );
}

#[test]
fn the_location_scan_finds_hand_named_locations_and_spares_comments() {
    let text = "\
let a = w.hw.write_at(part::PAGE_TABLES);
// w.hw.read_at(part::PAGE_TABLES) in a comment
let b = Tracked::new(Loc::all(Space::Hw), hw);
let c = Tracked::fresh(v);
use crate::engine::track::{Loc, Tracked};
let space = shared(Space::default());
fn lock(&self) -> LockId { if track::recording() {} }
fn at(&self) -> Loc { track::record(l, true) }
";
    let lines: Vec<usize> = scan_locations(text).into_iter().map(|(l, _)| l).collect();
    assert_eq!(lines, vec![1, 3, 5, 8]);
}
