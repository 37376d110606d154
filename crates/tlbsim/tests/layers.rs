//! No arrow runs back up a floor (issue 36): the library's top-level
//! modules stand on floors, and a module's code may name (`crate::x`, or
//! `x` inside `use crate::{...}`) only modules on floors below its own.
//! Two modules on one floor are peers and name neither the other: the
//! checker and the kernel meet only in the event stream below them, so the
//! checker cannot lean on a policy's state and a policy cannot see what the
//! checker holds.
//!
//! The scan reads each file's text before its first `#[cfg(test)]` line
//! (a unit test may build a profile to get hardware), with `//` comments
//! removed. A new top-level module must be given a floor here.

use std::path::Path;

mod source_scan;
use source_scan::rust_files;

/// The floors, lowest first.
const FLOORS: &[&[&str]] = &[
    // Simulation time and executors; the progress counters.
    &["engine", "progress"],
    // The modelled hardware: TLBs, walkers, page tables, DVM.
    &["hw"],
    // What a machine, a kernel or a run is configured with; the event
    // stream and what a violation is; the counters runs add up.
    &["config", "observe", "stats"],
    // The checker (over the event stream), the kernel (its policies emit
    // the event stream), the trace format.
    &["check", "kernel", "trace"],
    // What a step does, written once for both drivers.
    &["step"],
    // The programs tasks run.
    &["workload"],
    // The timing driver.
    &["driver"],
    // Building a world from an experiment, and running it.
    &["sim"],
    // The explorer and its searches.
    &["explore"],
    // What runs experiments as a whole: the litmus referee, reproduce,
    // the catalogue of Linux's TLB bugs.
    &["litmus", "reproduce", "bugs"],
];

/// The floor of top-level module `m`.
fn floor(m: &str) -> Option<usize> {
    FLOORS.iter().position(|f| f.contains(&m))
}

/// `text` before its first `#[cfg(test)]` line, `//` comments removed,
/// one entry per line.
fn code_lines(text: &str) -> Vec<String> {
    text.lines()
        .take_while(|l| !l.contains("#[cfg(test)]"))
        .map(|l| l.find("//").map_or(l, |c| &l[..c]).to_string())
        .collect()
}

/// The top-level modules `code` names, each with its 0-based line: every
/// `crate::x`, and the first segment of each item of `crate::{...}`
/// (which may span lines).
fn named(code: &[String]) -> Vec<(usize, String)> {
    let text = code.join("\n");
    let line_of = |at: usize| text[..at].matches('\n').count();
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(off) = text[from..].find("crate::") {
        let at = from + off;
        from = at + "crate::".len();
        // `$crate::` in a macro, or a longer name ending in `crate`.
        if text[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$')
        {
            continue;
        }
        let rest = &text[from..];
        if let Some(group) = rest.strip_prefix('{') {
            let (mut depth, mut item_start) = (0usize, true);
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    c if item_start && !c.is_whitespace() => {
                        item_start = false;
                        let name = ident(&group[i..]);
                        if !name.is_empty() && name != "self" {
                            out.push((line_of(from + 1 + i), name));
                        }
                    }
                    _ => {}
                }
            }
        } else {
            out.push((line_of(at), ident(rest)));
        }
    }
    out
}

/// The top-level module a file under `src/` belongs to (`None` for
/// `lib.rs`).
fn top_module(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).expect("a file under src/");
    let first = rel.components().next()?.as_os_str().to_str()?;
    match first.strip_suffix(".rs") {
        Some("lib") => None,
        Some(m) => Some(m.to_string()),
        None => Some(first.to_string()),
    }
}

#[test]
fn no_module_names_one_on_its_floor_or_above() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut errors = Vec::new();
    for file in &files {
        let Some(me) = top_module(&src, file) else {
            continue;
        };
        let Some(mine) = floor(&me) else {
            errors.push(format!(
                "src/{me}: a top-level module with no floor (add it to FLOORS in tests/layers.rs)"
            ));
            continue;
        };
        let text = std::fs::read_to_string(file).expect("readable source");
        for (line, other) in named(&code_lines(&text)) {
            if other == me {
                continue;
            }
            match floor(&other) {
                Some(f) if f < mine => {}
                Some(_) => errors.push(format!(
                    "{}:{}: `{me}` names `{other}`, which is not on a floor below it",
                    file.strip_prefix(src.parent().unwrap()).unwrap().display(),
                    line + 1
                )),
                // A crate-root item (a `#[macro_export]` macro): no floor.
                None => {}
            }
        }
    }
    errors.sort();
    errors.dedup();
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

#[test]
fn the_scan_reads_paths_and_groups() {
    let code: Vec<String> = [
        "use crate::hw::CpuId;",
        "use crate::{",
        "    config::{Arch, Profile},",
        "    kernel::World, self,",
        "};",
        "let x = $crate::engine::Ns;",
        "fn f() -> crate::observe::Event {}",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let got: Vec<(usize, String)> = named(&code);
    let want: Vec<(usize, String)> = [(0, "hw"), (2, "config"), (3, "kernel"), (6, "observe")]
        .iter()
        .map(|&(l, m)| (l, m.to_string()))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn the_scan_stops_at_the_tests_and_skips_comments() {
    let text =
        "use crate::hw::X; // crate::sim\n/// [`crate::sim::run`]\n#[cfg(test)]\nuse crate::sim;\n";
    let got: Vec<String> = named(&code_lines(text))
        .into_iter()
        .map(|(_, m)| m)
        .collect();
    assert_eq!(got, ["hw"]);
}

/// The words of file-system I/O in `code` ([`code_lines`]), each with its
/// 0-based line.
fn file_io(code: &[String]) -> Vec<(usize, &'static str)> {
    const WORDS: &[&str] = &[
        "std::fs",
        "fs::",
        "File::open",
        "File::create",
        "OpenOptions",
    ];
    let mut out = Vec::new();
    for (i, l) in code.iter().enumerate() {
        out.extend(WORDS.iter().filter(|w| l.contains(*w)).map(|w| (i, *w)));
    }
    out
}

/// The library does no I/O (the CLI reads experiment, profile, trace and
/// litmus files and hands the library their text): no module outside its
/// unit tests names the file system. A replay's trace once was opened by
/// the workload itself (`Replay::from_params`).
#[test]
fn the_library_opens_no_file() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut errors = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("readable source");
        for (line, word) in file_io(&code_lines(&text)) {
            errors.push(format!(
                "{}:{}: `{word}`: the library does no I/O (the CLI reads files)",
                file.strip_prefix(src.parent().unwrap()).unwrap().display(),
                line + 1
            ));
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

#[test]
fn the_io_scan_finds_a_file_opened() {
    let text = "let f = std::fs::File::open(&r.trace)?;\n// std::fs in a comment\n#[cfg(test)]\nuse std::fs;\n";
    let got: Vec<(usize, &str)> = file_io(&code_lines(text));
    assert_eq!(got, [(0, "std::fs"), (0, "fs::"), (0, "File::open")]);
}
