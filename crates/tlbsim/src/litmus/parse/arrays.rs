//! Array locations in herd's litmus format (herdtools7
//! `lib/stateParser.mly`, `herd/archExtra_herd.ml`): a declaration in the
//! initial state, `int x[3]` (every element 0) or `int x[3]={1,2,3}`
//! (one value an element); an element named as a location or address,
//! `x[1]`; a whole array in the condition, `x={1,2,3}`. Element `i` of
//! an array of `n`-byte elements is byte `i * n` of the variable's page
//! (`Loc::Data(x, i * n)`, `Val::Va(x, i * n)`).

use super::{err, is_ident, parse_value, unsup, ParseError, Syms, Unsupported};
use crate::litmus::ast::{Array, Cond, Loc, Sym, Val};

/// Bytes of the page each variable gets: an array must fit in it.
pub(super) const PAGE_BYTES: usize = 4096;

/// Reads `stmt` if it is an array declaration (`int x[3]`,
/// `int64_t x[2]={1,2}`) and records the array in `syms`; `false` if it
/// is not one. An element set alone (`x[1]=2`, which herd's grammar
/// refuses) and an array without an element type (`x[3]`) are errors.
pub(super) fn declaration(syms: &mut Syms, stmt: &str, line: usize) -> Result<bool, ParseError> {
    let (lhs, rhs) = match stmt.split_once('=') {
        Some((l, r)) => (l.trim(), Some(r.trim())),
        None => (stmt.trim(), None),
    };
    let Some((head, count)) = lhs
        .strip_suffix(']')
        .filter(|_| !lhs.starts_with('['))
        .and_then(|l| l.split_once('['))
    else {
        return Ok(false);
    };
    let (ty, name) = match head.trim_end().rsplit_once(char::is_whitespace) {
        Some((t, n)) => (t.trim(), n),
        None => ("", head.trim()),
    };
    if !is_ident(name) {
        return Ok(false);
    }
    if ty.is_empty() {
        return Err(err(
            line,
            match rhs {
                Some(_) => format!(
                    "{lhs}: an element cannot be set on its own in the initial state; give \
                     every element's value in the declaration, as int {name}[N]={{...}}"
                ),
                None => format!("array {lhs} has no element type (as in int {lhs})"),
            },
        ));
    }
    let elem_bytes = elem_bytes(ty, lhs, line)?;
    let n = element_count(count, lhs, elem_bytes, line)?;
    let var = syms.var(name);
    if let Some((_, before)) = syms.arrays.iter().find(|(a, _)| a.var == var) {
        return Err(err(
            line,
            format!("array {name} is declared twice (first on line {before})"),
        ));
    }
    let init = match rhs {
        None => vec![Val::Int(0); n],
        Some(r) => {
            let body = r
                .strip_prefix('{')
                .and_then(|t| t.strip_suffix('}'))
                .ok_or_else(|| {
                    err(
                        line,
                        format!("{lhs} is an array: its value is a list in braces, {{v0, v1, ...}}, not {r:?}"),
                    )
                })?;
            let vals = list(body)
                .into_iter()
                .map(|v| parse_value(syms, v, line))
                .collect::<Result<Vec<Val>, ParseError>>()?;
            if vals.len() != n {
                return Err(err(
                    line,
                    format!(
                        "array {lhs} is given {} initial value{} (it has {n} elements)",
                        vals.len(),
                        if vals.len() == 1 { "" } else { "s" }
                    ),
                ));
            }
            vals
        }
    };
    syms.arrays.push((
        Array {
            var,
            ty: ty.to_string(),
            elem_bytes,
            init,
        },
        line,
    ));
    Ok(true)
}

/// The bytes of an element of type `ty` (herdtools7 `lib/testType.ml`,
/// `size_of`, AArch64's pointers being 8 bytes).
fn elem_bytes(ty: &str, lhs: &str, line: usize) -> Result<u8, ParseError> {
    let narrow = |bytes: usize| {
        Err(unsup(
            line,
            Unsupported::ArrayLocation,
            format!(
                "array {lhs} of {ty} ({bytes}-byte elements): the runner makes 4- and 8-byte \
                 accesses (W and X registers) only"
            ),
        ))
    };
    match ty {
        "int" | "long" | "int32_t" | "uint32_t" | "atomic_t" => Ok(4),
        "int64_t" | "uint64_t" | "intptr_t" | "uintptr_t" | "pteval_t" => Ok(8),
        "char" | "int8_t" | "uint8_t" => narrow(1),
        "short" | "int16_t" | "uint16_t" => narrow(2),
        "__int128_t" | "__uint128_t" | "__int128" | "__uint128" | "int128_t" | "uint128_t" => {
            narrow(16)
        }
        _ => Err(err(
            line,
            format!("unknown element type {ty:?} in array {lhs} (int, int64_t, uint32_t, ...)"),
        )),
    }
}

/// The element count between the brackets of `lhs`: at least one, and
/// the array must fit in its variable's page.
fn element_count(count: &str, lhs: &str, elem_bytes: u8, line: usize) -> Result<usize, ParseError> {
    let count = count.trim();
    if count.is_empty() || !count.bytes().all(|b| b.is_ascii_digit()) {
        return Err(err(line, format!("bad array size {count:?} in {lhs}")));
    }
    let max = PAGE_BYTES / usize::from(elem_bytes);
    match count.parse::<usize>() {
        Ok(0) => Err(err(line, format!("array {lhs} has no elements"))),
        Ok(n) if n <= max => Ok(n),
        _ => Err(unsup(
            line,
            Unsupported::ArrayLocation,
            format!(
                "array {lhs} does not fit in the {PAGE_BYTES}-byte page the runner gives each \
                 variable (at most {max} elements of {elem_bytes} bytes)"
            ),
        )),
    }
}

/// `a, b, c` split at top-level commas (not inside parentheses, as in a
/// descriptor `(oa:PA(x), valid:0)`); nothing for an empty list.
fn list(body: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (k, c) in body.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(body[start..k].trim());
                start = k + 1;
            }
            _ => {}
        }
    }
    let last = body[start..].trim();
    if !last.is_empty() || !out.is_empty() {
        out.push(last);
    }
    out
}

/// `x[i]` split into the name and the index text; `None` if `s` is not
/// of that form.
pub(super) fn element_ref(s: &str) -> Option<(&str, &str)> {
    let (name, rest) = s.trim().split_once('[')?;
    let idx = rest.strip_suffix(']')?;
    is_ident(name.trim()).then_some((name.trim(), idx.trim()))
}

/// The array named `name`, if one is declared.
fn find<'s>(syms: &'s Syms, name: &str) -> Option<&'s (Array, usize)> {
    let v = *syms.index.get(name)?;
    syms.arrays.iter().find(|(a, _)| a.var == v)
}

/// Element `idx` of array `name`: its variable and byte offset. Naming
/// an element of a variable that is not an array, or past the end, is
/// an error (herd: "used as an array", "out of bounds access").
pub(super) fn element(
    syms: &Syms,
    name: &str,
    idx: &str,
    line: usize,
) -> Result<(Sym, u16), ParseError> {
    let Some((a, _)) = find(syms, name) else {
        return Err(err(
            line,
            format!("{name}[{idx}]: {name} is not an array (declare it, as int {name}[N])"),
        ));
    };
    match idx.parse::<usize>() {
        Ok(i) if i < a.len() => Ok((a.var, a.offset_of(i))),
        _ => Err(err(
            line,
            format!(
                "{name}[{idx}] is out of bounds: {name} has {} element{} ({name}[0]..{name}[{}])",
                a.len(),
                if a.len() == 1 { "" } else { "s" },
                a.len() - 1
            ),
        )),
    }
}

/// An error if `v` is an array: a location naming it whole (`x`, `[x]`,
/// `phy_x`) must name an element.
pub(super) fn not_whole(syms: &Syms, v: Sym, line: usize) -> Result<(), ParseError> {
    match syms.arrays.iter().find(|(a, _)| a.var == v) {
        None => Ok(()),
        Some((a, decl)) => {
            let name = &syms.names[v as usize];
            Err(err(
                line,
                format!(
                    "{name} is an array of {} {} (line {decl}), not one location: name an \
                     element, {name}[i]",
                    a.len(),
                    a.ty
                ),
            ))
        }
    }
}

/// `x={v0,v1,...}` in the condition: every element of array `x` equals
/// its value (herd compares the whole vector), as a conjunction of
/// `x[i]=vi`. Values are checked by `check`.
pub(super) fn whole_eq(
    syms: &mut Syms,
    loc_text: &str,
    val_text: &str,
    line: usize,
    check: &mut dyn FnMut(&Syms, Val) -> Result<(), ParseError>,
) -> Result<Cond, ParseError> {
    let name = loc_text.trim();
    let body = val_text
        .trim()
        .strip_prefix('{')
        .and_then(|t| t.strip_suffix('}'))
        .ok_or_else(|| err(line, format!("unclosed list {:?}", val_text.trim())))?;
    let Some((a, _)) = find(syms, name) else {
        return Err(err(
            line,
            format!("{name}={{...}}: {name} is not an array (declare it, as int {name}[N])"),
        ));
    };
    let (var, n) = (a.var, a.len());
    let offsets: Vec<u16> = (0..n).map(|i| a.offset_of(i)).collect();
    let vals = list(body);
    if vals.len() != n {
        return Err(err(
            line,
            format!(
                "{name}={{...}} gives {} value{} for the {n} elements of {name}",
                vals.len(),
                if vals.len() == 1 { "" } else { "s" }
            ),
        ));
    }
    let mut atoms = Vec::with_capacity(n);
    for (off, text) in offsets.into_iter().zip(vals) {
        let v = parse_value(syms, text, line)?;
        check(syms, v)?;
        atoms.push(Cond::Eq(Loc::Data(var, off), v));
    }
    Ok(if atoms.len() == 1 {
        atoms.pop().expect("one")
    } else {
        Cond::And(atoms)
    })
}
