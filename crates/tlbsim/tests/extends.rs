//! A policy that builds on another by calling its methods (a mutant of
//! `arm64-stock` forwarding `switch_mm` to `Stock`) must define every
//! method its base defines: a method the base overrides and the policy
//! leaves out falls back to the trait's default, not to the base's code,
//! and nothing else would tell (the mutant would then differ from its
//! base in more than the one change it names).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

mod source_scan;
use source_scan::rust_files;

/// Each `impl TlbPolicy for X { ... }` in `text`: `X`, the items it
/// defines (`fn` names and macro invocations at the block's top level),
/// and the `Base.method(` calls in it naming a type (capitalised) other
/// than `X`.
fn impls(text: &str) -> Vec<(String, BTreeSet<String>, BTreeSet<String>)> {
    let mut out = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let Some(name) = lines[i]
            .strip_prefix("impl TlbPolicy for ")
            .and_then(|r| r.strip_suffix(" {"))
        else {
            i += 1;
            continue;
        };
        let (mut items, mut bases) = (BTreeSet::new(), BTreeSet::new());
        i += 1;
        while i < lines.len() && lines[i] != "}" {
            let l = lines[i];
            if let Some(rest) = l.strip_prefix("    fn ") {
                items.insert(ident(rest));
            } else if l.starts_with("    ")
                && !l.starts_with("     ")
                && l.trim_end().ends_with("!();")
            {
                items.insert(l.trim().trim_end_matches("();").to_string());
            }
            for (at, _) in l.match_indices('.') {
                let before = &l[..at];
                let base: String = before
                    .chars()
                    .rev()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect();
                let after = ident(&l[at + 1..]);
                if base.starts_with(|c: char| c.is_ascii_uppercase())
                    && base != name
                    && l[at + 1 + after.len()..].starts_with('(')
                {
                    bases.insert(base);
                }
            }
            i += 1;
        }
        out.push((name.to_string(), items, bases));
    }
    out
}

/// The `fn` names each `macro_rules!` of `text` defines (a macro that
/// writes a policy's methods, as `flush_after_tlb_flush_check!`).
fn macro_fns(text: &str, out: &mut BTreeMap<String, BTreeSet<String>>) {
    let mut current: Option<String> = None;
    for l in text.lines() {
        if let Some(rest) = l.strip_prefix("macro_rules! ") {
            current = Some(ident(rest));
        } else if l.starts_with('}') {
            current = None;
        } else if let (Some(m), Some(at)) = (&current, l.find("fn ")) {
            out.entry(m.clone())
                .or_default()
                .insert(ident(&l[at + 3..]));
        }
    }
}

/// `items` with each macro invocation (`path::name!`) replaced by the
/// methods the macro defines.
fn expanded(
    items: &BTreeSet<String>,
    macros: &BTreeMap<String, BTreeSet<String>>,
) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for i in items {
        match i.strip_suffix('!') {
            Some(path) => {
                let name = path.rsplit("::").next().unwrap_or(path);
                out.extend(
                    macros
                        .get(name)
                        .cloned()
                        .unwrap_or_else(|| BTreeSet::from([i.clone()])),
                );
            }
            None => {
                out.insert(i.clone());
            }
        }
    }
    out
}

fn ident(s: &str) -> String {
    s.chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

#[test]
fn a_policy_that_calls_its_base_defines_every_method_the_base_defines() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/kernel");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut defined: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut macros = BTreeMap::new();
    let mut calls = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).expect("readable source");
        macro_fns(&text, &mut macros);
        for (name, items, bases) in impls(&text) {
            calls.push((f.clone(), name.clone(), bases));
            defined.insert(name, items);
        }
    }
    let defined: BTreeMap<String, BTreeSet<String>> = defined
        .into_iter()
        .map(|(k, v)| (k, expanded(&v, &macros)))
        .collect();
    let mut errors = Vec::new();
    let mut checked = 0;
    for (file, name, bases) in &calls {
        for base in bases.iter().filter(|b| defined.contains_key(*b)) {
            checked += 1;
            let missing: Vec<_> = defined[base].difference(&defined[name]).collect();
            if !missing.is_empty() {
                errors.push(format!(
                    "{}: {name} calls {base} but leaves out {missing:?}, which {base} defines (forward them)",
                    file.display()
                ));
            }
        }
    }
    assert!(
        checked >= 3,
        "the scan found {checked} policies built on another"
    );
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

#[test]
fn the_scan_finds_a_method_left_out() {
    let text = "impl TlbPolicy for Base {\n    fn switch_mm(&self) {}\n    fn flush_tlb_page(&self) {}\n}\n\
                impl TlbPolicy for Mutant {\n    fn switch_mm(&self) {\n        Base.switch_mm()\n    }\n}\n";
    let got = impls(text);
    let mut macros = BTreeMap::new();
    macro_fns(
        "macro_rules! flushes {\n    () => {\n        fn flush_tlb_mm() {}\n    };\n}\n",
        &mut macros,
    );
    let items = BTreeSet::from(["super::flushes!".to_string(), "switch_mm".to_string()]);
    assert_eq!(
        expanded(&items, &macros),
        BTreeSet::from(["flush_tlb_mm".to_string(), "switch_mm".to_string()])
    );
    assert_eq!(got.len(), 2);
    assert_eq!(got[1].0, "Mutant");
    assert_eq!(got[1].2, BTreeSet::from(["Base".to_string()]));
    let missing: Vec<_> = got[0].1.difference(&got[1].1).cloned().collect();
    assert_eq!(missing, ["flush_tlb_page"]);
}
