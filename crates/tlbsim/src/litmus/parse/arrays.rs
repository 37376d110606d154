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
    let what = format!("{name}[{}]", count.trim());
    let elem_bytes = elem_bytes(ty, &what, line)?;
    let n = element_count(count, &what, elem_bytes, line)?;
    let var = syms.var(name);
    if let Some((_, before)) = syms.arrays.iter().find(|(a, _)| a.var == var) {
        return Err(err(
            line,
            format!("array {name} is declared twice (first on line {before})"),
        ));
    }
    let init = match rhs {
        None => vec![Val::Int(0); n],
        Some(r) => values(syms, &what, r, n, line)?,
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

/// The initial values `{v0, v1, ...}` of array `what`, which has `n`
/// elements: one an element, as herd requires.
fn values(
    syms: &mut Syms,
    what: &str,
    r: &str,
    n: usize,
    line: usize,
) -> Result<Vec<Val>, ParseError> {
    let body = r
        .strip_prefix('{')
        .and_then(|t| t.strip_suffix('}'))
        .ok_or_else(|| {
            err(
                line,
                format!(
                    "{what} is an array: its value is a list in braces, {{v0, v1, ...}}, not {r:?}"
                ),
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
                "array {what} is given {} initial value{} (it has {n} elements)",
                vals.len(),
                if vals.len() == 1 { "" } else { "s" }
            ),
        ));
    }
    Ok(vals)
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

#[cfg(test)]
mod tests {
    use crate::litmus::ast::*;
    use crate::litmus::parse::{parse, ParseError, Unsupported};

    /// herdtools7's `catalogue/aarch64-VMSA/tests/coRR-pte9-plus8.litmus`
    /// (CeCILL-B), which issue 35 found refused as unsupported.
    const PTE9: &str = include_str!("../../../tests/fixtures/litmus/coRR-pte9-plus8.litmus");

    fn sym(t: &Test, name: &str) -> Sym {
        t.syms.iter().position(|s| s == name).unwrap() as Sym
    }

    /// A one-thread test: `init` in the initial state, `code` as P0's
    /// (one instruction a line), `cond` the condition.
    fn one(init: &str, code: &[&str], cond: &str) -> Result<Test, ParseError> {
        let rows: String = code.iter().map(|c| format!(" {c} ;\n")).collect();
        parse(&format!("AArch64 T\n{{\n{init}\n}}\n P0 ;\n{rows}{cond}\n"))
    }

    fn malformed(r: Result<Test, ParseError>) -> ParseError {
        let e = r.expect_err("parsed");
        assert!(e.unsupported.is_none(), "{e:?}");
        e
    }

    #[test]
    fn a_herd_array_test_parses() {
        let t = parse(PTE9).unwrap();
        let (x, y) = (sym(&t, "x"), sym(&t, "y"));
        assert_eq!(t.arrays.len(), 2);
        let a = t.array(x).unwrap();
        assert_eq!((a.ty.as_str(), a.elem_bytes, a.len()), ("int", 4, 3));
        assert_eq!(t.array(y).unwrap().init, vec![Val::Int(1); 3]);
        assert!(t.init.contains(&(Loc::Reg(0, 1), Val::Va(x, 0))));
        let Instr::Ldr { rt, addr, bytes } = t.threads[0].code.instrs[0] else {
            panic!()
        };
        assert_eq!((rt, bytes), (2, 4));
        assert_eq!(addr.offset, Some(Operand::Imm(8)));
    }

    #[test]
    fn declarations_give_zeros_or_their_values_and_the_type_s_size() {
        let t = one(
            "int x[3]; int64_t w[2]={5,-6}; uint32_t u[1]={7}; 0:X1=w[1]; 0:X2=x",
            &["LDR X3,[X1]"],
            "exists (w[1]=-6 /\\ x[2]=0)",
        )
        .unwrap();
        let (x, w) = (sym(&t, "x"), sym(&t, "w"));
        assert_eq!(t.array(x).unwrap().init, vec![Val::Int(0); 3]);
        assert_eq!(t.array(w).unwrap().elem_bytes, 8);
        assert_eq!(t.array(sym(&t, "u")).unwrap().elem_bytes, 4);
        assert_eq!(t.array(w).unwrap().init, vec![Val::Int(5), Val::Int(-6)]);
        // An element's address: 8 bytes an int64_t; named before the
        // array is declared, as herd allows.
        assert!(t.init.contains(&(Loc::Reg(0, 1), Val::Va(w, 8))));
        assert!(t.vars.contains(&x) && t.vars.contains(&w));
        let Cond::And(atoms) = &t.cond else { panic!() };
        assert_eq!(atoms[0], Cond::Eq(Loc::Data(w, 8), Val::Int(-6)));
        assert_eq!(atoms[1], Cond::Eq(Loc::Data(x, 8), Val::Int(0)));
    }

    #[test]
    fn a_whole_array_in_the_condition_is_every_element() {
        let t = one(
            "int t[2] = { 1, 2 }; 0:X0=t",
            &["STR W2,[X0]"],
            "forall t = { 1,3 }",
        )
        .unwrap();
        let x = sym(&t, "t");
        assert_eq!(t.quant, Quant::Forall);
        assert_eq!(
            t.cond,
            Cond::And(vec![
                Cond::Eq(Loc::Data(x, 0), Val::Int(1)),
                Cond::Eq(Loc::Data(x, 4), Val::Int(3)),
            ])
        );
        let e = malformed(one("int t[2]; 0:X0=t", &["NOP"], "exists (t={1,2,3})"));
        assert!(
            e.message.contains("gives 3 values for the 2 elements of t"),
            "{}",
            e.message
        );
    }

    #[test]
    fn addressing_modes_of_elements_parse_with_their_extension_and_shift() {
        let t = one(
            "int x[4]; 0:X1=x; 0:X2=1",
            &[
                "LDR W3,[X1,#4]",
                "LDR W3,[X1,X2]",
                "LDR W3,[X1,X2,LSL #2]",
                "LDR W3,[X1,W2,SXTW #2]",
                "STR W3,[X1,W2,UXTW]",
                "LDR W3,[X1,X2,LSL#2]",
            ],
            "exists (0:X3=0)",
        )
        .unwrap();
        let addrs: Vec<(Option<Operand>, Extend, u8)> = t.threads[0]
            .code
            .instrs
            .iter()
            .map(|i| match *i {
                Instr::Ldr { addr, .. } | Instr::Str { addr, .. } => {
                    (addr.offset, addr.extend, addr.shift)
                }
                _ => panic!(),
            })
            .collect();
        let r2 = Some(Operand::Reg(2));
        assert_eq!(
            addrs,
            vec![
                (Some(Operand::Imm(4)), Extend::None, 0),
                (r2, Extend::None, 0),
                (r2, Extend::None, 2),
                (r2, Extend::Sxtw, 2),
                (r2, Extend::Uxtw, 0),
                (r2, Extend::None, 2),
            ]
        );
        // The shift must be the access's size: #2 for W, #3 for X.
        let e = malformed(one(
            "int x[4]; 0:X1=x",
            &["LDR W3,[X1,X2,LSL #3]"],
            "exists (0:X3=0)",
        ));
        assert!(
            e.message
                .contains("the shift of a 4-byte access is #0 or #2, not #3"),
            "{}",
            e.message
        );
        assert!(one(
            "int64_t x[4]; 0:X1=x",
            &["LDR X3,[X1,X2,LSL #3]"],
            "exists (0:X3=0)"
        )
        .is_ok());
        let e = malformed(one(
            "int x[4]; 0:X1=x",
            &["LDR W3,[X1,W2,SXTW #]"],
            "exists (0:X3=0)",
        ));
        assert!(
            e.message
                .contains("bad shift amount \"\" in [X1,W2,SXTW #]"),
            "{}",
            e.message
        );
    }

    #[test]
    fn an_array_value_list_may_span_lines() {
        let t = parse(
            "AArch64 T\n{\nint x[3]={1,\n 2,\n 3};\n0:X1=x; 0:X1=y;\n}\n P0 ;\n LDR W2,[X1] ;\nexists (0:X2=1)\n",
        );
        let e = malformed(t);
        // The statement after the list keeps its own line.
        assert_eq!(e.line, 6, "{e:?}");
        assert!(
            e.message.contains("0:X1 is initialised twice"),
            "{}",
            e.message
        );
    }

    #[test]
    fn malformed_array_forms_are_refused_with_their_line() {
        let cases: [(&str, &str, &str); 9] = [
            (
                "int x[2]; x[1]=2",
                "exists (x[0]=0)",
                "x[1]: an element cannot be set on its own",
            ),
            ("x[3]", "exists (x[0]=0)", "array x[3] has no element type"),
            (
                "int x[3]={1,2}",
                "exists (x[0]=0)",
                "array x[3] is given 2 initial values (it has 3 elements)",
            ),
            (
                "float x[3]",
                "exists (x[0]=0)",
                "unknown element type \"float\"",
            ),
            (
                "int x[3]",
                "exists (x[3]=0)",
                "x[3] is out of bounds: x has 3 elements",
            ),
            (
                "int x[3]; y=1",
                "exists (y[0]=1)",
                "y[0]: y is not an array",
            ),
            (
                "int x[3]",
                "exists (x=0)",
                "x is an array of 3 int (line 3), not one location",
            ),
            (
                "int x[3]; int x[2]",
                "exists (x[0]=0)",
                "array x is declared twice (first on line 3)",
            ),
            ("int x[0]", "exists (0:X1=0)", "array x[0] has no elements"),
        ];
        for (init, cond, want) in cases {
            let e = malformed(one(init, &["NOP"], cond));
            assert!(e.message.contains(want), "{init} / {cond}: {}", e.message);
            assert!(e.line == 3 || e.line == 7, "{init}: line {}", e.line);
        }
    }

    #[test]
    fn array_forms_the_runner_does_not_model_are_unsupported() {
        for (init, want) in [
            ("char x[4]", "of char (1-byte elements)"),
            ("int x[2000]", "does not fit in the 4096-byte page"),
            ("int x[99999999999999999999999]", "does not fit"),
        ] {
            let e = one(init, &["NOP"], "exists (0:X1=0)").unwrap_err();
            assert_eq!(
                e.unsupported,
                Some(Unsupported::ArrayLocation),
                "{init}: {e:?}"
            );
            assert!(e.message.contains(want), "{init}: {}", e.message);
            assert_eq!(e.line, 3);
        }
        let e = one("int x[2]; 0:X1=x", &["LDR W2,[X1],#4"], "exists (0:X2=0)").unwrap_err();
        assert_eq!(e.unsupported, Some(Unsupported::Instruction), "{e:?}");
    }
}
