//! README.md says only what a test checks (issue 35, item 10):
//!
//! - it is short (under 200 lines), and its prose holds no figure: a
//!   number in it would go stale unseen. Figures live in generated
//!   blocks: the acceptance criteria between the markers `reproduce
//!   --report` writes, the bug corpus's table between the markers `bugs
//!   --report` writes, and screens of output, each a ```text block after
//!   a `<!-- screen: ARGS -->` line naming the command that prints it;
//! - (ignored by default; `.ci/run` runs them) each screen is what its
//!   command prints today, and the criteria and the bug table are what
//!   `reproduce --report` and `bugs --report` write. `TLBSIM_BLESS=1`
//!   rewrites the blocks from the commands.

use crate::common;

use common::{s, scratch_dir, stderr, tlbsim, EXE};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Most lines README.md may have.
const MAX_LINES: usize = 200;
/// The markers of the criteria block (as `reproduce --report` writes them).
const CRITERIA_BEGIN: &str = "<!-- criteria: written by `tlbsim reproduce --report DIR` -->";
const CRITERIA_END: &str = "<!-- end of criteria -->";
/// The markers of the bug table (as `bugs --report` writes them).
const BUGS_BEGIN: &str = "<!-- bugs: written by `tlbsim bugs --report DIR` -->";
const BUGS_END: &str = "<!-- end of bugs -->";
/// The line before a screen of output.
const SCREEN: &str = "<!-- screen: ";

fn readme_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md")
}

fn readme() -> String {
    std::fs::read_to_string(readme_path()).expect("README.md")
}

/// The parts of a README: prose lines (with their line numbers), fenced
/// blocks (the opening fence's info string, the line number, the text),
/// and the screen command before each ```text block.
#[derive(Default)]
struct Parts {
    prose: Vec<(usize, String)>,
    blocks: Vec<Block>,
}

struct Block {
    info: String,
    line: usize,
    text: String,
    /// `ARGS` of the `<!-- screen: ARGS -->` line just before it.
    screen: Option<String>,
}

fn parts(text: &str) -> Parts {
    let mut p = Parts::default();
    let mut open: Option<Block> = None;
    let mut in_criteria = false;
    let mut last_screen: Option<String> = None;
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if let Some(b) = open.as_mut() {
            if line.starts_with("```") {
                p.blocks.push(open.take().unwrap());
            } else {
                b.text.push_str(line);
                b.text.push('\n');
            }
            continue;
        }
        if line == CRITERIA_BEGIN || line == BUGS_BEGIN {
            in_criteria = true;
        } else if line == CRITERIA_END || line == BUGS_END {
            in_criteria = false;
        } else if in_criteria {
        } else if let Some(fence) = line.strip_prefix("```") {
            open = Some(Block {
                info: fence.trim().to_string(),
                line: n,
                text: String::new(),
                screen: last_screen.take(),
            });
        } else if let Some(cmd) = line.strip_prefix(SCREEN) {
            last_screen = Some(cmd.trim_end_matches("-->").trim().to_string());
        } else if !line.trim().is_empty() {
            last_screen = None;
            p.prose.push((n, line.to_string()));
        }
    }
    assert!(open.is_none(), "README.md: a code block is not closed");
    p
}

/// The words of `line` outside inline code spans and link targets that
/// are figures: they start with a digit (names such as arm64, x86 or
/// CPU0 start with a letter). Seed documents are named by three digits
/// with leading zeros (`000` to `004`), which are names, not figures.
fn figures(line: &str) -> Vec<String> {
    // A numbered list's marker (`1. `) is not a figure.
    let line = match line.trim_start().split_once(". ") {
        Some((n, rest)) if !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()) => rest,
        _ => line,
    };
    let mut out = Vec::new();
    let mut prose = String::new();
    for (i, part) in line.split('`').enumerate() {
        // Odd parts are inside a code span.
        if i % 2 == 0 {
            prose.push_str(part);
            prose.push(' ');
        }
    }
    // Link targets: `](...)`.
    let mut cleaned = String::new();
    let mut rest = prose.as_str();
    while let Some(at) = rest.find("](") {
        cleaned.push_str(&rest[..at + 1]);
        rest = rest[at + 2..].split_once(')').map_or("", |(_, r)| r);
    }
    cleaned.push_str(rest);
    for w in cleaned.split(|c: char| c.is_whitespace() || "(),;:*|[]".contains(c)) {
        let w = w.trim_end_matches("'s");
        let w = w.trim_matches(|c: char| ".!?\"'".contains(c));
        let is_seed_name = w.len() == 3 && w.starts_with("00");
        if w.starts_with(|c: char| c.is_ascii_digit()) && !is_seed_name {
            out.push(w.to_string());
        }
    }
    out
}

#[test]
fn readme_is_short_and_every_figure_in_it_is_checked() {
    let text = readme();
    let lines = text.lines().count();
    assert!(
        lines < MAX_LINES,
        "README.md has {lines} lines (at most {MAX_LINES} - 1)"
    );
    let p = parts(&text);
    let unchecked: Vec<String> = p
        .prose
        .iter()
        .flat_map(|(n, l)| {
            figures(l)
                .into_iter()
                .map(move |f| format!("README.md:{n}: {f}"))
        })
        .collect();
    assert!(
        unchecked.is_empty(),
        "figures in prose, which no test checks (put them in a screen or the criteria): {unchecked:#?}"
    );
    for b in &p.blocks {
        match (b.info.as_str(), &b.screen) {
            ("sh", None) => {}
            ("text", Some(_)) => {}
            (info, screen) => panic!(
                "README.md:{}: a ```{info} block{}: blocks are ```sh commands, or ```text \
                 screens after a `{SCREEN}ARGS -->` line",
                b.line,
                if screen.is_some() {
                    " after a screen line"
                } else {
                    ""
                }
            ),
        }
    }
    assert!(text.contains(CRITERIA_BEGIN) && text.contains(CRITERIA_END));
    assert!(text.contains(BUGS_BEGIN) && text.contains(BUGS_END));
}

#[test]
fn the_figure_scan_finds_figures_and_spares_names() {
    assert_eq!(figures("falls from 2.29 s to 0.14 s"), ["2.29", "0.14"]);
    assert_eq!(
        figures("7 of 15 criteria, 1.5x, 28 %"),
        ["7", "15", "1.5x", "28"]
    );
    assert!(figures("seed 000's patch on arm64 and x86, CPU0, `--cpus 64`").is_empty());
    assert!(figures("2. `check` explores").is_empty());
    assert_eq!(figures("2. it takes 3 s"), ["3"]);
    assert!(figures("see [validation](docs/validation.md#issue-18)").is_empty());
}

/// `text` with the line that carries host time (which differs from run to
/// run) replaced by a placeholder.
fn without_host_time(text: &str) -> String {
    text.lines()
        .map(|l| {
            if l.contains("seconds host time") {
                "<host time>"
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Runs a screen's `ARGS` (`tlbsim ...`, from the repository's root) and
/// returns its standard output.
fn screen_output(args: &str) -> String {
    let words: Vec<&str> = args.split_whitespace().collect();
    assert_eq!(
        words.first(),
        Some(&"tlbsim"),
        "a screen runs tlbsim: {args}"
    );
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let o = Command::new(EXE)
        .args(&words[1..])
        .current_dir(&root)
        .output()
        .expect("tlbsim runs");
    assert!(o.status.success(), "{args}: {}", stderr(&o));
    String::from_utf8(o.stdout).expect("UTF-8")
}

/// README.md with `old` (a block's text) replaced by `new`.
fn bless(old: &str, new: &str) {
    let text = readme();
    assert_eq!(
        text.matches(old).count(),
        1,
        "the block to replace is unique"
    );
    std::fs::write(readme_path(), text.replacen(old, new, 1)).unwrap();
}

#[test]
#[ignore = "runs the README's screens (~15 s); .ci/run runs it"]
fn readme_screens_are_what_their_commands_print() {
    let p = parts(&readme());
    let screens: Vec<&Block> = p.blocks.iter().filter(|b| b.screen.is_some()).collect();
    assert!(!screens.is_empty(), "README.md shows a screen of output");
    for b in screens {
        let args = b.screen.as_deref().unwrap();
        let got = screen_output(args);
        if std::env::var_os("TLBSIM_BLESS").is_some() {
            let fenced = |t: &str| format!("{SCREEN}{args} -->\n```text\n{t}```\n");
            bless(&fenced(&b.text), &fenced(&got));
            continue;
        }
        assert_eq!(
            without_host_time(&b.text),
            without_host_time(&got),
            "README.md:{}: the screen of `{args}` is not what it prints (TLBSIM_BLESS=1 rewrites it)",
            b.line
        );
    }
}

/// The block of `text` from the line `begin` to the line `end`, both
/// included.
fn marked_block<'a>(text: &'a str, begin: &str, end: &str) -> &'a str {
    let start = text.find(begin).expect("the block's start marker");
    let stop = text[start..].find(end).expect("its end marker") + start;
    &text[start..stop + end.len()]
}

/// Runs `tlbsim ARGS --report DIR` and checks that README.md's block
/// between `begin` and `end` is the page's (`TLBSIM_BLESS=1` rewrites it).
fn readme_block_is_what_report_writes(args: &[&str], (begin, end): (&str, &str)) {
    let dir = scratch_dir("readme", args[0]);
    let mut all = args.to_vec();
    all.extend(["--report", s(&dir)]);
    let o = tlbsim(&all);
    assert!(o.status.success(), "{}", stderr(&o));
    let page = std::fs::read_to_string(dir.join("index.md")).unwrap();
    let want = marked_block(&page, begin, end);
    let text = readme();
    let have = marked_block(&text, begin, end);
    if std::env::var_os("TLBSIM_BLESS").is_some() {
        bless(have, want);
        return;
    }
    assert_eq!(
        have, want,
        "README.md's block from {begin} is not what `tlbsim {} --report` writes (TLBSIM_BLESS=1 rewrites it)",
        args.join(" ")
    );
}

#[test]
#[ignore = "runs the whole bug corpus (~45 s on 2 cores); .ci/run runs it"]
fn readme_bug_table_is_what_bugs_writes() {
    readme_block_is_what_report_writes(&["bugs"], (BUGS_BEGIN, BUGS_END));
}

#[test]
#[ignore = "runs every reproduction (~2.5 min on 2 cores); .ci/run runs it"]
fn readme_criteria_are_what_reproduce_writes() {
    readme_block_is_what_report_writes(&["reproduce"], (CRITERIA_BEGIN, CRITERIA_END));
}
