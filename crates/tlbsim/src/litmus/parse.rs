//! A parser for herd's AArch64 litmus format (herdtools7 `doc/`, the
//! `catalogue/aarch64-VMSA` tests): the name line, `key=value` header
//! lines, the initial state in braces, the instruction columns separated
//! by `|`, and the final condition. Errors name the line and what was
//! unexpected; a construct the model does not run is an
//! [`ParseError::unsupported`] error with the construct named.

use super::ast::*;
use std::collections::BTreeMap;

mod arrays;

/// Why a test could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// 1-based line of the file.
    pub line: usize,
    /// What was unexpected.
    pub message: String,
    /// The text is well formed but uses a construct the litmus runner
    /// does not model (the message names it); `None`: malformed.
    pub unsupported: Option<Unsupported>,
}

/// A construct the litmus runner does not model, by reason (the
/// summary's "unsupported by reason" rows).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Unsupported {
    /// Hardware access-flag or dirty-bit updates (`TTHM=HA`/`HD`,
    /// FEAT_HAFDBS): tlbsim's walker never writes descriptors.
    HardwareAfDb,
    /// An instruction or operand form the runner does not execute.
    Instruction,
    /// Load/store exclusive pairs (`LDXR`/`STXR`).
    Exclusive,
    /// A fault-handling variant other than precise (`imprecise`,
    /// `Handled` without a handler column, ...).
    FaultVariant,
    /// System registers or exception levels beyond `ELR_EL1`/`ERET`.
    ExceptionLevel,
    /// A descriptor pointing at a page table (`oa:PTE(x)`), memory
    /// attributes, or EL0 permissions in a descriptor.
    DescriptorForm,
    /// Value arithmetic the runner does not give meaning to (on
    /// addresses or descriptors).
    ValueArithmetic,
    /// A `filter` clause or another condition form.
    Condition,
    /// An array form the runner does not model: elements of 1, 2 or 16
    /// bytes, an array larger than its page, or, when the run reaches
    /// it, an access to an array out of its bounds, between two
    /// elements, or of another size than the element (mixed-size).
    ArrayLocation,
}

impl Unsupported {
    /// The summary row's text.
    pub fn describe(self) -> &'static str {
        match self {
            Unsupported::HardwareAfDb => "hardware access-flag/dirty-bit updates (TTHM=HA/HD)",
            Unsupported::Instruction => "instruction or operand form not modelled",
            Unsupported::Exclusive => "load/store exclusive (LDXR/STXR)",
            Unsupported::FaultVariant => "fault-handling variant other than precise",
            Unsupported::ExceptionLevel => "system registers / exception levels not modelled",
            Unsupported::DescriptorForm => "descriptor form (table pointer, attributes, el0)",
            Unsupported::ValueArithmetic => "arithmetic on addresses or descriptors",
            Unsupported::Condition => "condition form not modelled (filter, ...)",
            Unsupported::ArrayLocation => {
                "array form or access (byte elements, out of bounds, mixed-size)"
            }
        }
    }
}

fn err(line: usize, message: impl Into<String>) -> ParseError {
    ParseError {
        line,
        message: message.into(),
        unsupported: None,
    }
}

fn unsup(line: usize, why: Unsupported, message: impl Into<String>) -> ParseError {
    ParseError {
        line,
        message: message.into(),
        unsupported: Some(why),
    }
}

/// Interns symbols and remembers which are variables and which of those
/// are arrays.
#[derive(Default)]
struct Syms {
    names: Vec<String>,
    index: BTreeMap<String, Sym>,
    vars: std::collections::BTreeSet<Sym>,
    /// Array declarations, in order, with their lines.
    arrays: Vec<(Array, usize)>,
}

impl Syms {
    fn intern(&mut self, s: &str) -> Sym {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.names.len() as Sym;
        self.names.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
    fn var(&mut self, s: &str) -> Sym {
        let i = self.intern(s);
        self.vars.insert(i);
        i
    }
}

/// Replaces `(* ... *)` comments by spaces, keeping newlines (so line
/// numbers stay right).
fn strip_comments(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let (mut i, mut depth) = (0, 0);
    while i < b.len() {
        if i + 1 < b.len() && b[i] == b'(' && b[i + 1] == b'*' {
            depth += 1;
            i += 2;
            out.push_str("  ");
            continue;
        }
        if depth > 0 && i + 1 < b.len() && b[i] == b'*' && b[i + 1] == b')' {
            depth -= 1;
            i += 2;
            out.push_str("  ");
            continue;
        }
        let c = text[i..].chars().next().expect("char boundary");
        if depth > 0 && c != '\n' {
            out.push(' ');
        } else {
            out.push(c);
        }
        i += c.len_utf8();
    }
    out
}

/// Parses the text of one test.
pub fn parse(text: &str) -> Result<Test, ParseError> {
    let text = strip_comments(&text.replace('\r', ""));
    let lines: Vec<&str> = text.lines().collect();
    let mut syms = Syms::default();
    let mut i = 0;
    let (name, header) = name_and_header(&lines, &mut i)?;
    let init = init_block(&mut syms, &lines, &mut i)?;
    let threads = code_columns(&mut syms, &lines, &mut i)?;
    for &(loc, _, line) in &init {
        if let Loc::Reg(p, _) = loc {
            if p as usize >= threads.len() {
                return Err(err(
                    line,
                    format!(
                        "the initial state sets a register of thread P{p}, but the test has {} thread{} (P0..P{})",
                        threads.len(),
                        if threads.len() == 1 { "" } else { "s" },
                        threads.len().saturating_sub(1)
                    ),
                ));
            }
        }
    }
    // The variables the test defines: those its initial state names.
    // A condition naming any other is a typo, not a location.
    let known = syms.vars.clone();
    // Condition: the rest, without `locations [...]`.
    let cond_line = i + 1;
    let mut cond_text = String::new();
    for (k, l) in lines.iter().enumerate().skip(i) {
        let t = l.trim();
        if t.starts_with("filter") {
            return Err(unsup(k + 1, Unsupported::Condition, "a \"filter\" clause"));
        }
        if !t.starts_with("locations") {
            cond_text.push_str(t);
            cond_text.push(' ');
        }
    }
    let scope = CondScope {
        threads: &threads,
        known: &known,
    };
    // herd accepts a `;` after the condition.
    let cond_text = cond_text.trim_end().trim_end_matches(';');
    let (quant, cond) = parse_condition(&mut syms, cond_text, cond_line, &scope)?;
    Ok(Test {
        name,
        header,
        init: init.into_iter().map(|(l, v, _)| (l, v)).collect(),
        threads,
        quant,
        cond,
        vars: syms.vars.iter().copied().collect(),
        arrays: syms.arrays.into_iter().map(|(a, _)| a).collect(),
        syms: syms.names,
    })
}

/// `AArch64 NAME` and the `key=value` lines up to the initial state;
/// leaves `i` on the line with `{`.
fn name_and_header(
    lines: &[&str],
    i: &mut usize,
) -> Result<(String, Vec<(String, String)>), ParseError> {
    while *i < lines.len() && lines[*i].trim().is_empty() {
        *i += 1;
    }
    let first = lines.get(*i).ok_or_else(|| err(1, "empty file"))?;
    let mut words = first.split_whitespace();
    if words.next() != Some("AArch64") {
        return Err(err(
            *i + 1,
            format!("expected \"AArch64 NAME\", found {first:?}"),
        ));
    }
    let name = words
        .next()
        .ok_or_else(|| err(*i + 1, "missing test name after \"AArch64\""))?
        .to_string();
    *i += 1;
    let mut header = Vec::new();
    while *i < lines.len() && !lines[*i].contains('{') {
        let l = lines[*i].trim();
        if let Some((k, v)) = l.split_once('=') {
            if !l.starts_with('"') {
                header.push((k.trim().to_string(), v.trim().to_string()));
            }
        }
        *i += 1;
    }
    if *i == lines.len() {
        return Err(err(*i, "no initial state (\"{\") found"));
    }
    check_header(&header, *i)?;
    Ok((name, header))
}

/// The initial state, from `{` (on line `i`) to the matching `}` (the
/// braces of an array's values, `int x[2]={1,2}`, nest); leaves `i`
/// after it. Array declarations are read first, as herd allows a
/// register to hold an element's address (`0:X1=x[1]`) before the array
/// is declared. Each value comes with its 1-based line; a location set
/// twice is an error.
fn init_block(
    syms: &mut Syms,
    lines: &[&str],
    i: &mut usize,
) -> Result<Vec<(Loc, Val, usize)>, ParseError> {
    let stmts = init_statements(lines, i)?;
    let mut rest = Vec::new();
    for (ln, stmt) in stmts {
        if !arrays::declaration(syms, &stmt, ln)? {
            rest.push((ln, stmt));
        }
    }
    let mut init = Vec::new();
    let mut first: BTreeMap<Loc, usize> = BTreeMap::new();
    for (ln, stmt) in &rest {
        if let Some((loc, val)) = init_stmt(syms, stmt, *ln)? {
            if let Some(before) = first.insert(loc, *ln) {
                let what = stmt.split('=').next().unwrap_or(stmt).trim();
                return Err(err(
                    *ln,
                    format!("{what} is initialised twice (first on line {before})"),
                ));
            }
            init.push((loc, val, *ln));
        }
    }
    Ok(init)
}

/// The statements of the initial state opened by the `{` on line `i`,
/// each with the 1-based line it starts on; leaves `i` after the
/// closing `}`. Statements end at `;` or at the end of a line, except
/// inside the braces of an array's values.
fn init_statements(lines: &[&str], i: &mut usize) -> Result<Vec<(usize, String)>, ParseError> {
    let open = lines[*i].find('{').expect("name_and_header stops at '{'");
    let mut out: Vec<(usize, String)> = Vec::new();
    let mut cur = String::new();
    let mut depth = 0usize;
    let mut rest = &lines[*i][open + 1..];
    let mut push = |line: usize, cur: &mut String| {
        let t = cur.trim();
        if !t.is_empty() {
            let first = line - t.matches('\n').count();
            out.push((first, t.replace('\n', " ")));
        }
        cur.clear();
    };
    loop {
        for c in rest.chars() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    push(*i + 1, &mut cur);
                    *i += 1;
                    return Ok(out);
                }
                '}' => depth -= 1,
                ';' if depth == 0 => {
                    push(*i + 1, &mut cur);
                    continue;
                }
                _ => {}
            }
            cur.push(c);
        }
        if depth == 0 {
            push(*i + 1, &mut cur);
        } else {
            cur.push('\n');
        }
        *i += 1;
        if *i == lines.len() {
            return Err(err(*i, "initial state not closed by \"}\""));
        }
        rest = lines[*i];
    }
}

/// The thread header (`P0 | P1 | P1.F ;`) and the code lines up to the
/// condition; leaves `i` on the condition's first line.
fn code_columns(syms: &mut Syms, lines: &[&str], i: &mut usize) -> Result<Vec<Thread>, ParseError> {
    while *i < lines.len() && lines[*i].trim().is_empty() {
        *i += 1;
    }
    let head_line = *i + 1;
    let head = lines
        .get(*i)
        .ok_or_else(|| err(*i, "missing thread header (\"P0 | P1 ;\")"))?;
    let mut col_of: Vec<(u8, bool)> = Vec::new();
    for c in head.trim().trim_end_matches(';').split('|').map(str::trim) {
        let (p, handler) = match c.strip_suffix(".F") {
            Some(p) => (p, true),
            None => (c, false),
        };
        let n = p
            .strip_prefix('P')
            .and_then(|n| n.parse::<u8>().ok())
            .ok_or_else(|| {
                err(
                    head_line,
                    format!("bad thread name {c:?} in the thread header"),
                )
            })?;
        col_of.push((n, handler));
    }
    *i += 1;
    let mut cells: Vec<Vec<(usize, String)>> = vec![Vec::new(); col_of.len()];
    while *i < lines.len() && !is_condition_start(lines[*i].trim()) {
        let t = lines[*i].trim();
        if !t.is_empty() {
            let parts: Vec<&str> = t.strip_suffix(';').unwrap_or(t).split('|').collect();
            if parts.len() != col_of.len() {
                return Err(err(
                    *i + 1,
                    format!(
                        "{} column{} where the thread header (line {head_line}) has {}: \
                         every row needs one cell per thread, empty or not",
                        parts.len(),
                        if parts.len() == 1 { "" } else { "s" },
                        col_of.len()
                    ),
                ));
            }
            for (k, p) in parts.iter().enumerate() {
                cells[k].push((*i + 1, p.trim().to_string()));
            }
        }
        *i += 1;
    }
    let nthreads = col_of
        .iter()
        .map(|&(p, _)| p as usize + 1)
        .max()
        .unwrap_or(0);
    let mut codes: Vec<Option<Code>> = vec![None; nthreads];
    let mut handlers: Vec<Option<Code>> = vec![None; nthreads];
    for (k, &(p, handler)) in col_of.iter().enumerate() {
        let code = parse_code(syms, &cells[k])?;
        let slot = if handler {
            &mut handlers[p as usize]
        } else {
            &mut codes[p as usize]
        };
        if slot.replace(code).is_some() {
            return Err(err(
                head_line,
                format!("thread P{p} appears twice in the header"),
            ));
        }
    }
    codes
        .into_iter()
        .zip(handlers)
        .enumerate()
        .map(|(p, (c, handler))| {
            let code = c.ok_or_else(|| err(head_line, format!("no column for thread P{p}")))?;
            Ok(Thread { code, handler })
        })
        .collect()
}

fn is_condition_start(t: &str) -> bool {
    let t = t.trim_start_matches(['~', ' ']);
    ["exists", "forall", "locations", "filter"]
        .iter()
        .any(|k| t.starts_with(k))
}

/// Refuses header settings the model does not run.
fn check_header(header: &[(String, String)], line: usize) -> Result<(), ParseError> {
    for (k, v) in header {
        match k.as_str() {
            "TTHM" => {
                return Err(unsup(
                    line,
                    Unsupported::HardwareAfDb,
                    format!("TTHM={v}: hardware access-flag/dirty-bit management"),
                ))
            }
            "Variant" | "variant" => {
                for w in v.split(',').map(|w| w.trim().to_ascii_lowercase()) {
                    match w.as_str() {
                        "vmsa" | "precise" | "fatal" | "" => {}
                        _ => {
                            return Err(unsup(
                                line,
                                Unsupported::FaultVariant,
                                format!("Variant={v}: \"{w}\""),
                            ))
                        }
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// One statement of the initial state; `None` for a declaration without
/// a value (`int y`), which only names a variable.
fn init_stmt(syms: &mut Syms, stmt: &str, line: usize) -> Result<Option<(Loc, Val)>, ParseError> {
    let (lhs, rhs) = match stmt.split_once('=') {
        Some((l, r)) => (l.trim(), Some(r.trim())),
        None => (stmt, None),
    };
    // Drop type words: "int x", "pteval_t 0:X1", "int64_t 0:X2".
    let lhs = lhs.split_whitespace().last().unwrap_or("");
    let loc = parse_loc(syms, lhs, line)?;
    let Some(rhs) = rhs else {
        return Ok(None);
    };
    let val = parse_value(syms, rhs, line)?;
    Ok(Some((loc, val)))
}

/// A location: `0:X1`, `P0:X1`, `x`, `[x]`, `pte_x`, `[PTE(x)]`, `PTE(x)`,
/// `phy_x`.
fn parse_loc(syms: &mut Syms, s: &str, line: usize) -> Result<Loc, ParseError> {
    let s = s.trim();
    if let Some((p, r)) = s.split_once(':') {
        let p = p.trim().trim_start_matches('P');
        let proc: u8 = p
            .parse()
            .map_err(|_| err(line, format!("bad thread number in location {s:?}")))?;
        let reg = parse_reg(r.trim()).ok_or_else(|| err(line, format!("bad register in {s:?}")))?;
        return Ok(Loc::Reg(proc, reg));
    }
    if let Some((name, idx)) = arrays::element_ref(s) {
        let (v, off) = arrays::element(syms, name, idx, line)?;
        return Ok(Loc::Data(v, off));
    }
    let inner = s
        .strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .unwrap_or(s)
        .trim();
    if let Some(v) = inner.strip_prefix("PTE(").and_then(|t| t.strip_suffix(')')) {
        return pte_of(syms, v.trim(), line);
    }
    if let Some(v) = inner.strip_prefix("pte_") {
        return pte_of(syms, v, line);
    }
    let data = |syms: &mut Syms, v: &str| {
        let v = syms.var(v);
        arrays::not_whole(syms, v, line).map(|()| Loc::Data(v, 0))
    };
    if let Some(v) = inner.strip_prefix("phy_") {
        return data(syms, v);
    }
    if inner.starts_with("TTD(") {
        return Err(unsup(
            line,
            Unsupported::DescriptorForm,
            format!("a table descriptor location, {inner}"),
        ));
    }
    if let Some(v) = inner.strip_prefix("PA(").and_then(|t| t.strip_suffix(')')) {
        return data(syms, v.trim());
    }
    if is_ident(inner) {
        return data(syms, inner);
    }
    Err(err(line, format!("bad location {s:?}")))
}

fn pte_of(syms: &mut Syms, v: &str, line: usize) -> Result<Loc, ParseError> {
    if v.starts_with("PTE(") || v.starts_with("pte_") {
        return Err(unsup(
            line,
            Unsupported::DescriptorForm,
            format!("an entry of a table-page mapping, PTE({v})"),
        ));
    }
    if !is_ident(v) {
        return Err(err(line, format!("bad variable {v:?} in a PTE location")));
    }
    Ok(Loc::Pte(syms.var(v)))
}

fn is_ident(s: &str) -> bool {
    let mut c = s.chars();
    matches!(c.next(), Some(ch) if ch.is_ascii_alphabetic() || ch == '_')
        && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
}

/// `X3`, `W3`, `XZR`, `WZR`.
fn parse_reg(s: &str) -> Option<Reg> {
    let s = s.trim();
    if s.eq_ignore_ascii_case("XZR") || s.eq_ignore_ascii_case("WZR") {
        return Some(ZR);
    }
    let n = s.strip_prefix(['X', 'W', 'x', 'w'])?;
    let r: u8 = n.parse().ok()?;
    (r <= 30).then_some(r)
}

fn parse_int(s: &str) -> Option<i64> {
    let s = s.trim();
    let (neg, s) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s),
    };
    let v = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => i64::from_str_radix(h, 16).ok()?,
        None => s.parse().ok()?,
    };
    Some(if neg { -v } else { v })
}

/// A value: an integer, an address (`x`, an array's element `x[1]`,
/// `PTE(x)`, `pte_x`, `PA(x)`, `phy_x`), a descriptor `(oa:PA(x), valid:0)`, or `label:"P1:L1"`.
fn parse_value(syms: &mut Syms, s: &str, line: usize) -> Result<Val, ParseError> {
    let s = s.trim();
    if let Some(v) = parse_int(s) {
        return Ok(Val::Int(v));
    }
    if let Some(body) = s.strip_prefix('(').and_then(|t| t.strip_suffix(')')) {
        return parse_pteval(syms, body, line).map(Val::Pte);
    }
    if let Some(l) = s.strip_prefix("label:") {
        let l = l.trim().trim_matches('"');
        let (p, lab) = l
            .split_once(':')
            .ok_or_else(|| err(line, format!("bad label value {s:?}")))?;
        let p: u8 = p
            .trim_start_matches('P')
            .parse()
            .map_err(|_| err(line, format!("bad thread in label value {s:?}")))?;
        return Ok(Val::Label(p, syms.intern(lab)));
    }
    if let Some(v) = s.strip_prefix("PTE(").and_then(|t| t.strip_suffix(')')) {
        return match pte_of(syms, v.trim(), line)? {
            Loc::Pte(x) => Ok(Val::PteAddr(x)),
            _ => unreachable!("pte_of returns Loc::Pte"),
        };
    }
    if let Some(v) = s.strip_prefix("pte_") {
        return match pte_of(syms, v, line)? {
            Loc::Pte(x) => Ok(Val::PteAddr(x)),
            _ => unreachable!("pte_of returns Loc::Pte"),
        };
    }
    if let Some(v) = s.strip_prefix("PA(").and_then(|t| t.strip_suffix(')')) {
        return Ok(Val::Pa(syms.var(v.trim())));
    }
    if let Some(v) = s.strip_prefix("phy_") {
        return Ok(Val::Pa(syms.var(v)));
    }
    if is_ident(s) {
        return Ok(Val::Va(syms.var(s), 0));
    }
    if let Some((name, idx)) = arrays::element_ref(s) {
        let (v, off) = arrays::element(syms, name, idx, line)?;
        return Ok(Val::Va(v, off));
    }
    Err(err(line, format!("bad value {s:?}")))
}

/// The fields of a descriptor value: `oa:PA(x), valid:0, af:1`.
fn parse_pteval(syms: &mut Syms, body: &str, line: usize) -> Result<PteVal, ParseError> {
    let mut p = PteVal::default_for(None);
    if body.contains("attrs") {
        // `attrs:(Normal,iNC,oNC)`, `attrs:(Device-GRE)`: memory types.
        return Err(unsup(
            line,
            Unsupported::DescriptorForm,
            format!("descriptor memory attributes in ({body})"),
        ));
    }
    for field in body.split(',') {
        let field = field.trim();
        if field.is_empty() {
            continue;
        }
        let Some((k, v)) = field.split_once(':') else {
            return Err(unsup(
                line,
                Unsupported::DescriptorForm,
                format!("descriptor attribute {field:?}"),
            ));
        };
        let (k, v) = (k.trim(), v.trim());
        if k == "oa" {
            p.oa = Some(match parse_value(syms, v, line)? {
                Val::Pa(x) => x,
                _ => {
                    return Err(unsup(
                        line,
                        Unsupported::DescriptorForm,
                        format!("output address {v:?} (not a data page)"),
                    ))
                }
            });
            continue;
        }
        let n = parse_int(v).filter(|n| *n == 0 || *n == 1).ok_or_else(|| {
            err(
                line,
                format!("descriptor field {k} must be 0 or 1, found {v:?}"),
            )
        })? as u8;
        match k {
            "valid" => p.valid = n,
            "af" => p.af = n,
            "db" => p.db = n,
            "dbm" => p.dbm = n,
            "el0" => {
                return Err(unsup(
                    line,
                    Unsupported::DescriptorForm,
                    format!("descriptor field el0:{n} (EL0 permission)"),
                ))
            }
            _ => return Err(err(line, format!("unknown descriptor field {k:?}"))),
        }
    }
    Ok(p)
}

/// One column of code: labels and instructions.
fn parse_code(syms: &mut Syms, cells: &[(usize, String)]) -> Result<Code, ParseError> {
    let mut code = Code {
        instrs: Vec::new(),
        lines: Vec::new(),
        labels: BTreeMap::new(),
    };
    for (line, cell) in cells {
        let mut t = cell.as_str();
        // Leading labels: "L0:", "L0: LDR ...".
        while let Some((l, r)) = t.split_once(':') {
            if !is_ident(l.trim()) {
                break;
            }
            let lab = syms.intern(l.trim());
            if code.labels.insert(lab, code.instrs.len()).is_some() {
                return Err(err(*line, format!("label {} defined twice", l.trim())));
            }
            t = r.trim_start();
        }
        let t = t.trim();
        if t.is_empty() {
            continue;
        }
        code.instrs.push(parse_instr(syms, t, *line)?);
        code.lines.push(*line);
    }
    Ok(code)
}

/// Splits operands at top-level commas (not inside brackets).
fn operands(s: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth) = (Vec::new(), String::new(), 0);
    for c in s.chars() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                out.push(cur.trim().to_string());
                cur.clear();
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim().to_string());
    }
    out
}

fn parse_operand(s: &str, line: usize) -> Result<Operand, ParseError> {
    // herd accepts an immediate with or without its '#'.
    if let Some(i) = s.strip_prefix('#').or_else(|| parse_int(s).map(|_| s)) {
        return parse_int(i)
            .map(Operand::Imm)
            .ok_or_else(|| err(line, format!("bad immediate {s:?}")));
    }
    parse_reg(s)
        .map(Operand::Reg)
        .ok_or_else(|| err(line, format!("bad operand {s:?}")))
}

/// `[Xn]`, `[Xn,#imm]`, `[Xn,Xm]`, `[Xn,Xm,LSL #s]`, `[Xn,Wm,SXTW]`,
/// `[Xn,Wm,SXTW #s]`, `[Xn,Wm,UXTW #s]`, for an access of `bytes` bytes
/// (which a shift must match, as the Arm ARM requires).
fn parse_addr(s: &str, bytes: u8, line: usize) -> Result<Addr, ParseError> {
    let inner = s
        .trim()
        .strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .ok_or_else(|| {
            unsup(
                line,
                Unsupported::Instruction,
                format!("addressing mode {s:?} (only [Xn{{,Xm|#imm}}])"),
            )
        })?;
    let parts: Vec<&str> = inner.split(',').map(str::trim).collect();
    let base =
        parse_reg(parts[0]).ok_or_else(|| err(line, format!("bad base register in {s:?}")))?;
    let mut a = Addr::of(base);
    match parts.len() {
        1 => {}
        2 => a.offset = Some(parse_operand(parts[1], line)?),
        3 => {
            let off = parse_operand(parts[1], line)?;
            if let Operand::Imm(_) = off {
                return Err(err(
                    line,
                    format!("{s}: an immediate offset takes no {:?}", parts[2]),
                ));
            }
            a.offset = Some(off);
            (a.extend, a.shift) = extend_and_shift(parts[2], bytes, s, line)?;
        }
        _ => {
            return Err(unsup(
                line,
                Unsupported::Instruction,
                format!("addressing mode {s:?}"),
            ))
        }
    }
    Ok(a)
}

/// `LSL #2`, `LSL 2`, `SXTW`, `SXTW #3`, `UXTW #2`: a register offset's
/// extension and shift; the shift is 0 or the log2 of `bytes`.
fn extend_and_shift(
    t: &str,
    bytes: u8,
    whole: &str,
    line: usize,
) -> Result<(Extend, u8), ParseError> {
    let split = t
        .find(|c: char| c == '#' || c.is_ascii_whitespace())
        .unwrap_or(t.len());
    let (kind, amount) = t.split_at(split);
    let extend = match kind.to_ascii_uppercase().as_str() {
        "LSL" => Extend::None,
        "SXTW" => Extend::Sxtw,
        "UXTW" => Extend::Uxtw,
        _ => {
            return Err(unsup(
                line,
                Unsupported::Instruction,
                format!("addressing mode {whole:?} (offset {kind}; LSL, SXTW and UXTW only)"),
            ))
        }
    };
    let hash = amount.trim().starts_with('#');
    let amount = amount.trim().trim_start_matches('#').trim();
    let shift = match (amount.is_empty() && !hash, extend) {
        (true, Extend::None) => {
            return Err(err(line, format!("{whole}: LSL needs a shift amount")))
        }
        (true, _) => 0,
        (false, _) => amount
            .parse::<u8>()
            .map_err(|_| err(line, format!("bad shift amount {amount:?} in {whole}")))?,
    };
    let scale = bytes.trailing_zeros() as u8;
    if shift != 0 && shift != scale {
        return Err(err(
            line,
            format!("{whole}: the shift of a {bytes}-byte access is #0 or #{scale}, not #{shift}"),
        ));
    }
    Ok((extend, shift))
}

/// The bytes a load or store of register `s` moves: 4 for a `W`
/// register, 8 for an `X` register.
fn reg_bytes(s: &str) -> u8 {
    if s.trim().starts_with(['W', 'w']) {
        4
    } else {
        8
    }
}

fn barrier(op: &str, line: usize) -> Result<BarrierKind, ParseError> {
    Ok(match op.to_ascii_uppercase().as_str() {
        "" | "SY" | "ISH" | "OSH" => BarrierKind::Full,
        "LD" | "ISHLD" | "OSHLD" | "NSHLD" => BarrierKind::Ld,
        "ST" | "ISHST" | "OSHST" | "NSHST" => BarrierKind::St,
        "NSH" => BarrierKind::Nsh,
        o => return Err(err(line, format!("unknown barrier option {o:?}"))),
    })
}

fn cond_code(s: &str, line: usize) -> Result<CondCode, ParseError> {
    match s.to_ascii_uppercase().as_str() {
        "EQ" => Ok(CondCode::Eq),
        "NE" => Ok(CondCode::Ne),
        c => Err(unsup(
            line,
            Unsupported::Instruction,
            format!("condition code {c} (only EQ, NE)"),
        )),
    }
}

fn tlbi_op(s: &str, line: usize) -> Result<TlbiOp, ParseError> {
    let u = s.to_ascii_uppercase();
    let (base, shareable) = match u.strip_suffix("IS") {
        Some(b) => (b.to_string(), true),
        None => (u.clone(), false),
    };
    let scope = match base.as_str() {
        "VAE1" | "VAAE1" => TlbiKind::Va,
        "VALE1" | "VAALE1" => TlbiKind::VaLast,
        "ASIDE1" => TlbiKind::Asid,
        "VMALLE1" => TlbiKind::All,
        _ => {
            return Err(unsup(
                line,
                Unsupported::Instruction,
                format!("TLBI {s} (EL1 forms VAE1, VAAE1, VALE1, VAALE1, ASIDE1, VMALLE1 only)"),
            ))
        }
    };
    Ok(TlbiOp { scope, shareable })
}

/// One instruction's mnemonic and operands, for the per-group parsers.
struct Asm<'a> {
    /// Mnemonic, upper case.
    mn: String,
    /// Operands split at top-level commas.
    ops: Vec<String>,
    /// The whole instruction, for messages.
    text: &'a str,
    /// Source line.
    line: usize,
}

impl Asm<'_> {
    fn want(&self, k: usize) -> Result<(), ParseError> {
        if self.ops.len() == k {
            Ok(())
        } else {
            Err(err(
                self.line,
                format!(
                    "{} takes {k} operands, found {} in {:?}",
                    self.mn,
                    self.ops.len(),
                    self.text
                ),
            ))
        }
    }
    fn reg(&self, k: usize) -> Result<Reg, ParseError> {
        parse_reg(&self.ops[k]).ok_or_else(|| {
            err(
                self.line,
                format!("bad register {:?} in {:?}", self.ops[k], self.text),
            )
        })
    }
    /// Operand `k`, an address for an access of `bytes` bytes.
    fn addr(&self, k: usize, bytes: u8) -> Result<Addr, ParseError> {
        parse_addr(&self.ops[k], bytes, self.line)
    }
    /// The bytes moved by a load or store of operand `k`'s register.
    fn bytes(&self, k: usize) -> u8 {
        reg_bytes(&self.ops[k])
    }
    fn operand(&self, k: usize) -> Result<Operand, ParseError> {
        parse_operand(&self.ops[k], self.line)
    }
}

/// One instruction.
fn parse_instr(syms: &mut Syms, t: &str, line: usize) -> Result<Instr, ParseError> {
    let (mn, rest) = match t.split_once(char::is_whitespace) {
        Some((m, r)) => (m.to_ascii_uppercase(), r.trim()),
        None => (t.to_ascii_uppercase(), ""),
    };
    let a = Asm {
        mn,
        ops: operands(rest),
        text: t,
        line,
    };
    if let Some(r) = memory_instr(&a) {
        return r;
    }
    if let Some(r) = data_instr(&a) {
        return r;
    }
    if let Some(r) = control_instr(syms, &a, rest) {
        return r;
    }
    Err(unsup(
        line,
        Unsupported::Instruction,
        format!("instruction {}", a.mn),
    ))
}

/// Loads, stores and atomics; `None` if `a` is none of them.
fn memory_instr(a: &Asm<'_>) -> Option<Result<Instr, ParseError>> {
    let mn = a.mn.as_str();
    let rmw = |op: RmwOp| -> Result<Instr, ParseError> {
        a.want(3)?;
        Ok(Instr::Rmw {
            op,
            rs: a.reg(0)?,
            rt: a.reg(1)?,
            addr: a.addr(2, a.bytes(0))?,
            bytes: a.bytes(0),
        })
    };
    let st_rmw = |op: RmwOp| -> Result<Instr, ParseError> {
        a.want(2)?;
        Ok(Instr::Rmw {
            op,
            rs: a.reg(0)?,
            rt: ZR,
            addr: a.addr(1, a.bytes(0))?,
            bytes: a.bytes(0),
        })
    };
    let post_indexed = a.ops.len() == 3 && a.ops[1].ends_with(']') && a.ops[2].starts_with('#');
    if post_indexed && matches!(mn, "LDR" | "STR") {
        return Some(Err(unsup(
            a.line,
            Unsupported::Instruction,
            format!("post-indexed addressing in {:?}", a.text),
        )));
    }
    Some(match mn {
        "LDR" | "LDAR" | "LDAPR" => a.want(2).and_then(|()| {
            Ok(Instr::Ldr {
                rt: a.reg(0)?,
                addr: a.addr(1, a.bytes(0))?,
                bytes: a.bytes(0),
            })
        }),
        "STR" | "STLR" => a.want(2).and_then(|()| {
            Ok(Instr::Str {
                rt: a.reg(0)?,
                addr: a.addr(1, a.bytes(0))?,
                bytes: a.bytes(0),
            })
        }),
        "SWP" | "SWPA" | "SWPL" | "SWPAL" => rmw(RmwOp::Swp),
        "LDSET" | "LDSETA" | "LDSETL" | "LDSETAL" => rmw(RmwOp::Set),
        "LDCLR" | "LDCLRA" | "LDCLRL" | "LDCLRAL" => rmw(RmwOp::Clr),
        "STSET" | "STSETL" => st_rmw(RmwOp::Set),
        "STCLR" | "STCLRL" => st_rmw(RmwOp::Clr),
        "CAS" | "CASA" | "CASL" | "CASAL" => a.want(3).and_then(|()| {
            Ok(Instr::Cas {
                rs: a.reg(0)?,
                rt: a.reg(1)?,
                addr: a.addr(2, a.bytes(0))?,
                bytes: a.bytes(0),
            })
        }),
        "LDXR" | "LDAXR" | "STXR" | "STLXR" => {
            Err(unsup(a.line, Unsupported::Exclusive, a.mn.clone()))
        }
        _ => return None,
    })
}

/// Register moves, arithmetic and comparisons; `None` if `a` is none
/// of them.
fn data_instr(a: &Asm<'_>) -> Option<Result<Instr, ParseError>> {
    let alu = |op: AluOp| -> Result<Instr, ParseError> {
        // `ADD X7, X5, W6, SXTW`: the extension of a register operand
        // changes no value the tests use (small non-negative offsets).
        let extended = a.ops.len() == 4
            && ["SXTW", "UXTW"]
                .iter()
                .any(|e| a.ops[3].eq_ignore_ascii_case(e));
        if !extended {
            a.want(3)?;
        }
        Ok(Instr::Alu {
            op,
            rd: a.reg(0)?,
            rn: a.reg(1)?,
            op2: a.operand(2)?,
        })
    };
    Some(match a.mn.as_str() {
        "MOV" => a.want(2).and_then(|()| {
            Ok(Instr::Mov {
                rd: a.reg(0)?,
                src: a.operand(1)?,
            })
        }),
        "ADD" => alu(AluOp::Add),
        "SUB" => alu(AluOp::Sub),
        "EOR" => alu(AluOp::Eor),
        "AND" => alu(AluOp::And),
        "ORR" => alu(AluOp::Orr),
        "BIC" => alu(AluOp::Bic),
        "LSR" => alu(AluOp::Lsr),
        "LSL" => alu(AluOp::Lsl),
        "CMP" => a.want(2).and_then(|()| {
            Ok(Instr::Cmp {
                rn: a.reg(0)?,
                op2: a.operand(1)?,
            })
        }),
        "CSEL" => a.want(4).and_then(|()| {
            Ok(Instr::Csel {
                rd: a.reg(0)?,
                rn: a.reg(1)?,
                rm: a.reg(2)?,
                cond: cond_code(&a.ops[3], a.line)?,
            })
        }),
        "CSET" => a.want(2).and_then(|()| {
            Ok(Instr::Cset {
                rd: a.reg(0)?,
                cond: cond_code(&a.ops[1], a.line)?,
            })
        }),
        _ => return None,
    })
}

/// Branches, the fault handler's system instructions, barriers and TLB
/// maintenance; `None` if `a` is none of them.
fn control_instr(syms: &mut Syms, a: &Asm<'_>, rest: &str) -> Option<Result<Instr, ParseError>> {
    let line = a.line;
    let mut label = |k: usize| syms.intern(&a.ops[k]);
    Some(match a.mn.as_str() {
        "CBZ" | "CBNZ" => a.want(2).and_then(|()| {
            Ok(Instr::Cbz {
                rt: a.reg(0)?,
                nonzero: a.mn == "CBNZ",
                label: label(1),
            })
        }),
        "B" => a.want(1).map(|()| Instr::B {
            cond: None,
            label: label(0),
        }),
        "B.EQ" | "B.NE" => a.want(1).and_then(|()| {
            Ok(Instr::B {
                cond: Some(cond_code(&a.mn[2..], line)?),
                label: label(0),
            })
        }),
        "ADR" => a.want(2).and_then(|()| {
            Ok(Instr::Adr {
                rd: a.reg(0)?,
                label: label(1),
            })
        }),
        "MSR" => a.want(2).and_then(|()| {
            if !a.ops[0].eq_ignore_ascii_case("ELR_EL1") {
                return Err(unsup(
                    line,
                    Unsupported::ExceptionLevel,
                    format!("MSR {} (system register)", a.ops[0]),
                ));
            }
            Ok(Instr::MsrElr { rt: a.reg(1)? })
        }),
        "MRS" | "SVC" | "HVC" | "SMC" => {
            Err(unsup(line, Unsupported::ExceptionLevel, a.text.to_string()))
        }
        "ERET" => Ok(Instr::Eret),
        "DMB" => barrier(rest, line).map(Instr::Dmb),
        "DSB" => barrier(rest, line).map(Instr::Dsb),
        "ISB" => Ok(Instr::Isb),
        "NOP" => Ok(Instr::Nop),
        "TLBI" => tlbi(a),
        _ => return None,
    })
}

/// `TLBI op{, Xt}`.
fn tlbi(a: &Asm<'_>) -> Result<Instr, ParseError> {
    let n = a.ops.len();
    if n == 0 || n > 2 {
        return Err(err(
            a.line,
            format!("TLBI takes 1 or 2 operands in {:?}", a.text),
        ));
    }
    let op = tlbi_op(&a.ops[0], a.line)?;
    let rt = match (op.scope, n) {
        (TlbiKind::Va | TlbiKind::VaLast | TlbiKind::Asid, 2) => Some(a.reg(1)?),
        (TlbiKind::All, 1) => None,
        _ => return Err(err(a.line, format!("wrong operands for {:?}", a.text))),
    };
    Ok(Instr::Tlbi { op, rt })
}

/// What a condition may name: the test's threads (and their labels)
/// and the variables its initial state defines.
struct CondScope<'a> {
    threads: &'a [Thread],
    known: &'a std::collections::BTreeSet<Sym>,
}

/// Condition tokens.
struct CondParser<'a> {
    s: &'a [u8],
    pos: usize,
    line: usize,
    scope: &'a CondScope<'a>,
}

/// Parses `exists (...)`, `~exists (...)`, `forall (...)`; every thread,
/// label and variable it names must exist in `scope`.
fn parse_condition(
    syms: &mut Syms,
    text: &str,
    line: usize,
    scope: &CondScope<'_>,
) -> Result<(Quant, Cond), ParseError> {
    let t = text.trim();
    if t.is_empty() {
        // No condition (only `locations`): herd's default, `forall true`.
        return Ok((Quant::Forall, Cond::True));
    }
    let (quant, rest) = if let Some(r) = t.strip_prefix("forall") {
        (Quant::Forall, r)
    } else if let Some(r) = t.strip_prefix("exists") {
        (Quant::Exists, r)
    } else if let Some(r) = t
        .strip_prefix('~')
        .map(str::trim_start)
        .and_then(|r| r.strip_prefix("exists"))
    {
        (Quant::NotExists, r)
    } else {
        return Err(err(
            line,
            format!("expected exists/forall/~exists, found {t:?}"),
        ));
    };
    let mut p = CondParser {
        s: rest.as_bytes(),
        pos: 0,
        line,
        scope,
    };
    p.skip_ws();
    if p.pos == p.s.len() {
        return Ok((quant, Cond::True));
    }
    let c = p.disj(syms)?;
    p.skip_ws();
    if p.pos != p.s.len() {
        return Err(err(
            line,
            format!("unexpected {:?} in the condition", p.rest()),
        ));
    }
    Ok((quant, c))
}

impl CondParser<'_> {
    fn skip_ws(&mut self) {
        while self.pos < self.s.len() && self.s[self.pos].is_ascii_whitespace() {
            self.pos += 1;
        }
    }
    fn rest(&self) -> String {
        String::from_utf8_lossy(&self.s[self.pos..]).into_owned()
    }
    fn eat(&mut self, tok: &str) -> bool {
        self.skip_ws();
        if self.s[self.pos..].starts_with(tok.as_bytes()) {
            self.pos += tok.len();
            true
        } else {
            false
        }
    }
    /// `word` followed by a non-identifier character.
    fn eat_word(&mut self, word: &str) -> bool {
        self.skip_ws();
        let rest = &self.s[self.pos..];
        let ok = rest.starts_with(word.as_bytes())
            && rest
                .get(word.len())
                .is_none_or(|c| !(c.is_ascii_alphanumeric() || *c == b'_'));
        if ok {
            self.pos += word.len();
        }
        ok
    }
    fn disj(&mut self, syms: &mut Syms) -> Result<Cond, ParseError> {
        let mut v = vec![self.conj(syms)?];
        while self.eat("\\/") {
            v.push(self.conj(syms)?);
        }
        Ok(if v.len() == 1 {
            v.pop().expect("one")
        } else {
            Cond::Or(v)
        })
    }
    fn conj(&mut self, syms: &mut Syms) -> Result<Cond, ParseError> {
        let mut v = vec![self.unary(syms)?];
        while self.eat("/\\") {
            v.push(self.unary(syms)?);
        }
        Ok(if v.len() == 1 {
            v.pop().expect("one")
        } else {
            Cond::And(v)
        })
    }
    fn unary(&mut self, syms: &mut Syms) -> Result<Cond, ParseError> {
        if self.eat("~") || self.eat_word("not") {
            return Ok(Cond::Not(Box::new(self.unary(syms)?)));
        }
        if self.eat("(") {
            let c = self.disj(syms)?;
            if !self.eat(")") {
                return Err(err(
                    self.line,
                    format!("expected \")\" at {:?}", self.rest()),
                ));
            }
            return Ok(c);
        }
        if self.eat("true") {
            return Ok(Cond::True);
        }
        if self.eat("fault(") || self.eat("Fault(") {
            return self.fault(syms);
        }
        // loc = value; the value ends at a connective, a ")" closing the
        // atom's group, or the end.
        let start = self.pos;
        let eq = self.s[start..]
            .iter()
            .position(|&c| c == b'=')
            .ok_or_else(|| err(self.line, format!("expected an atom at {:?}", self.rest())))?;
        let loc_text = String::from_utf8_lossy(&self.s[start..start + eq]).into_owned();
        self.pos = start + eq + 1;
        let vstart = self.pos;
        let mut depth = 0i32;
        while self.pos < self.s.len() {
            let c = self.s[self.pos];
            if c == b'(' {
                depth += 1;
            } else if c == b')' {
                if depth == 0 {
                    break;
                }
                depth -= 1;
            } else if depth == 0
                && (self.s[self.pos..].starts_with(b"/\\")
                    || self.s[self.pos..].starts_with(b"\\/"))
            {
                break;
            }
            self.pos += 1;
        }
        let val_text = String::from_utf8_lossy(&self.s[vstart..self.pos]).into_owned();
        if val_text.trim_start().starts_with('{') {
            let line = self.line;
            return arrays::whole_eq(syms, &loc_text, &val_text, line, &mut |syms, v| {
                self.check_val(syms, v)
            });
        }
        let loc = parse_loc(syms, &loc_text, self.line)?;
        match loc {
            Loc::Reg(p, _) => self.check_thread(p)?,
            Loc::Data(v, _) | Loc::Pte(v) => self.check_var(syms, v)?,
        }
        let val = parse_value(syms, &val_text, self.line)?;
        self.check_val(syms, val)?;
        Ok(Cond::Eq(loc, val))
    }

    /// The variables, threads and labels value `val` names exist.
    fn check_val(&self, syms: &Syms, val: Val) -> Result<(), ParseError> {
        match val {
            Val::Va(v, _) | Val::Page(v) | Val::PteAddr(v) | Val::Pa(v) => self.check_var(syms, v),
            Val::Pte(PteVal { oa: Some(v), .. }) => self.check_var(syms, v),
            Val::Label(p, l) => self.check_label(syms, p, l),
            Val::Int(_) | Val::Pte(_) => Ok(()),
        }
    }

    /// Thread `p` exists.
    fn check_thread(&self, p: u8) -> Result<(), ParseError> {
        let n = self.scope.threads.len();
        if (p as usize) < n {
            return Ok(());
        }
        Err(err(
            self.line,
            format!(
                "the condition names thread P{p}, but the test has {n} thread{} (P0..P{})",
                if n == 1 { "" } else { "s" },
                n.saturating_sub(1)
            ),
        ))
    }

    /// Variable `v` is one the initial state defines.
    fn check_var(&self, syms: &Syms, v: Sym) -> Result<(), ParseError> {
        if self.scope.known.contains(&v) {
            return Ok(());
        }
        let known: Vec<&str> = self
            .scope
            .known
            .iter()
            .map(|&k| syms.names[k as usize].as_str())
            .collect();
        Err(err(
            self.line,
            format!(
                "the condition names location {}, which the initial state does not define (it defines: {})",
                syms.names[v as usize],
                if known.is_empty() { "none".to_string() } else { known.join(", ") }
            ),
        ))
    }

    /// Label `l` is defined in thread `p`'s code.
    fn check_label(&self, syms: &Syms, p: u8, l: Sym) -> Result<(), ParseError> {
        self.check_thread(p)?;
        if self.scope.threads[p as usize].code.labels.contains_key(&l) {
            return Ok(());
        }
        Err(err(
            self.line,
            format!(
                "the condition names label {} of P{p}, which P{p}'s code does not define",
                syms.names[l as usize]
            ),
        ))
    }
    /// After `fault(`: `P0:L0,x` / `P0,x` / `P0:L0` / `P0:L0,x,MMU:Permission`.
    fn fault(&mut self, syms: &mut Syms) -> Result<Cond, ParseError> {
        let start = self.pos;
        let close = self.s[start..]
            .iter()
            .position(|&c| c == b')')
            .ok_or_else(|| err(self.line, "fault( not closed"))?;
        let body = String::from_utf8_lossy(&self.s[start..start + close]).into_owned();
        self.pos = start + close + 1;
        let parts: Vec<&str> = body.split(',').map(str::trim).collect();
        let (p, label) = match parts[0].split_once(':') {
            Some((p, l)) => (p, Some(syms.intern(l.trim()))),
            None => (parts[0], None),
        };
        let proc: u8 = p
            .trim_start_matches('P')
            .parse()
            .map_err(|_| err(self.line, format!("bad thread in fault({body})")))?;
        self.check_thread(proc)?;
        if let Some(l) = label {
            self.check_label(syms, proc, l)?;
        }
        let var = match parts.get(1) {
            None => None,
            Some(v) if is_ident(v) && !v.starts_with("pte_") => {
                let v = syms.var(v);
                self.check_var(syms, v)?;
                Some(v)
            }
            Some(v) => {
                return Err(unsup(
                    self.line,
                    Unsupported::Condition,
                    format!("fault on {v} (a page-table location)"),
                ))
            }
        };
        let kind = match parts.get(2).copied() {
            None => None,
            Some("MMU:Translation") => Some(FaultKind::Translation),
            Some("MMU:Permission") => Some(FaultKind::Permission),
            Some("MMU:AccessFlag") => Some(FaultKind::AccessFlag),
            Some(k) => {
                return Err(unsup(
                    self.line,
                    Unsupported::Condition,
                    format!("fault type {k}"),
                ))
            }
        };
        Ok(Cond::Fault(FaultAtom {
            proc,
            label,
            var,
            kind,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MP: &str = "AArch64 MP+shoot\n{\n0:X2=pte_x; 0:X1=(oa:phy_y);\n0:X3=x;\n1:X3=x;\ny=1;\n}\n P0 | P1 ;\n STR X1,[X2] | L0: LDR W4,[X3] ;\n DSB ISH | ;\n LSR X9,X3,#12 | ;\n TLBI VAAE1IS,X9 | ;\nexists(1:X4=0 /\\ ~fault(P1:L0,x))\n";

    #[test]
    fn parses_a_shootdown_test() {
        let t = parse(MP).unwrap();
        assert_eq!(t.name, "MP+shoot");
        assert_eq!(t.threads.len(), 2);
        assert_eq!(t.threads[0].code.instrs.len(), 4);
        assert_eq!(t.threads[1].code.instrs.len(), 1);
        assert_eq!(t.quant, Quant::Exists);
        assert!(matches!(t.cond, Cond::And(ref v) if v.len() == 2));
        let x = t.syms.iter().position(|s| s == "x").unwrap() as Sym;
        let y = t.syms.iter().position(|s| s == "y").unwrap() as Sym;
        assert!(t.init.contains(&(Loc::Reg(0, 2), Val::PteAddr(x))));
        assert!(t
            .init
            .contains(&(Loc::Reg(0, 1), Val::Pte(PteVal::default_for(Some(y))))));
    }

    #[test]
    fn errors_name_the_line() {
        let bad = MP.replace("LSR X9,X3,#12", "LSR X9,X3");
        let e = parse(&bad).unwrap_err();
        assert_eq!(e.line, 11);
        assert!(e.message.contains("LSR takes 3 operands"), "{}", e.message);
        assert!(e.unsupported.is_none());
    }

    #[test]
    fn hardware_af_is_unsupported() {
        let t = MP.replace("AArch64 MP+shoot\n", "AArch64 MP+shoot\nTTHM=HA\n");
        let e = parse(&t).unwrap_err();
        assert_eq!(e.unsupported, Some(Unsupported::HardwareAfDb));
    }

    /// The error of `text`, which must be malformed (not unsupported).
    fn malformed(text: &str) -> ParseError {
        let e = parse(text).expect_err("malformed test parsed");
        assert!(e.unsupported.is_none(), "{e:?}");
        e
    }

    #[test]
    fn a_row_missing_a_column_is_refused_with_its_line() {
        // P1's cell dropped: the row "STR X1,[X2] ;" would give P0's
        // instruction and silently shorten nothing, or shift a column.
        let bad = MP.replace(" DSB ISH | ;", " DSB ISH ;");
        let e = malformed(&bad);
        assert_eq!(e.line, 10);
        assert!(
            e.message
                .contains("1 column where the thread header (line 8) has 2"),
            "{}",
            e.message
        );
    }

    #[test]
    fn a_condition_naming_a_missing_thread_is_refused() {
        let e = malformed(&MP.replace("exists(1:X4=0", "exists(7:X4=0"));
        assert_eq!(e.line, 13);
        assert!(
            e.message
                .contains("names thread P7, but the test has 2 threads"),
            "{}",
            e.message
        );
        let e = malformed(&MP.replace("fault(P1:L0,x)", "fault(P7:L0,x)"));
        assert!(e.message.contains("thread P7"), "{}", e.message);
    }

    #[test]
    fn a_condition_naming_a_missing_label_or_location_is_refused() {
        let e = malformed(&MP.replace("fault(P1:L0,x)", "fault(P1:L9,x)"));
        assert_eq!(e.line, 13);
        assert!(
            e.message
                .contains("label L9 of P1, which P1's code does not define"),
            "{}",
            e.message
        );
        // L0 is P1's, not P0's.
        let e = malformed(&MP.replace("fault(P1:L0,x)", "fault(P0:L0,x)"));
        assert!(e.message.contains("label L0 of P0"), "{}", e.message);
        let e = malformed(&MP.replace("fault(P1:L0,x)", "fault(P1:L0,w)"));
        assert!(
            e.message
                .contains("location w, which the initial state does not define"),
            "{}",
            e.message
        );
        let e = malformed(&MP.replace("exists(1:X4=0", "exists(w=0"));
        assert!(e.message.contains("location w"), "{}", e.message);
        let e = malformed(&MP.replace("exists(1:X4=0", "exists(1:X4=w"));
        assert!(e.message.contains("location w"), "{}", e.message);
    }

    #[test]
    fn a_location_initialised_twice_is_refused() {
        let e = malformed(&MP.replace("0:X3=x;\n", "0:X3=x; 0:X3=y;\n"));
        assert_eq!(e.line, 4);
        assert!(
            e.message
                .contains("0:X3 is initialised twice (first on line 4)"),
            "{}",
            e.message
        );
        // Two spellings of one descriptor.
        let e = malformed(&MP.replace("y=1;\n", "y=1;\npte_y=(oa:phy_y);\n[PTE(y)]=(oa:phy_x);\n"));
        assert_eq!(e.line, 8);
        assert!(
            e.message.contains("initialised twice (first on line 7)"),
            "{}",
            e.message
        );
    }

    #[test]
    fn an_initial_register_of_a_missing_thread_is_refused() {
        let e = malformed(&MP.replace("1:X3=x;\n", "1:X3=x; 5:X1=x;\n"));
        assert_eq!(e.line, 5);
        assert!(
            e.message.contains("thread P5, but the test has 2 threads"),
            "{}",
            e.message
        );
    }

    #[test]
    fn herd_forms_of_the_catalogues_parse() {
        // herd-aarch64's MP+rel+CAS-ok-bothRs-addr ends its condition
        // with ";"; herd-aarch64-BBM's CoRR+PteNC gives memory types.
        let t = parse(&MP.replace("~fault(P1:L0,x))\n", "~fault(P1:L0,x));\n")).unwrap();
        assert!(matches!(t.cond, Cond::And(ref v) if v.len() == 2));
        let e = parse(&MP.replace(
            "0:X1=(oa:phy_y);",
            "0:X1=(oa:phy_y,attrs:(Normal,iNC,oNC));",
        ))
        .unwrap_err();
        assert_eq!(e.unsupported, Some(Unsupported::DescriptorForm), "{e:?}");
    }
}
