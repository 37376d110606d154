//! A parsed (or built) test printed back in herd's AArch64 format: the
//! name line, the header, the initial state, the code in columns, the
//! condition, and a trailing `(* ... *)` comment (where the catalogue's
//! tests keep theirs). [`super::parse::parse`] reads what this writes:
//! `parse(print(t))` prints the same text as `t` (tested on the whole
//! catalogue).

use super::ast::{
    Addr, AluOp, BarrierKind, Code, Cond, CondCode, Extend, FaultKind, Instr, Loc, Operand, PteVal,
    Quant, Reg, RmwOp, Sym, Test, TlbiKind, Val, ZR,
};
use std::fmt::Write;

/// Something herd's format has no way to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrintError(pub String);

impl std::fmt::Display for PrintError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot print as a litmus test: {}", self.0)
    }
}

/// `test` in herd's AArch64 format, with `comment` (if not empty) as a
/// `(* ... *)` block at the end. Registers print as `X` registers,
/// except the data registers of 4-byte loads and stores (`W`); arrays
/// are declared first, with every element's value
/// (`int x[3]={0,1,2};`).
pub fn print(test: &Test, comment: &str) -> Result<String, PrintError> {
    if comment.contains("*)") || comment.contains("(*") {
        return Err(PrintError("a comment holding \"(*\" or \"*)\"".into()));
    }
    let mut s = format!("AArch64 {}\n", test.name);
    for (k, v) in &test.header {
        let _ = writeln!(s, "{k}={v}");
    }
    s.push_str("{\n");
    for a in &test.arrays {
        let vals: Result<Vec<String>, PrintError> =
            a.init.iter().map(|v| val_text(test, *v)).collect();
        let _ = writeln!(
            s,
            " {} {}[{}]={{{}}};",
            a.ty,
            test.sym(a.var),
            a.len(),
            vals?.join(",")
        );
    }
    for (loc, val) in &test.init {
        let _ = writeln!(s, " {}={};", loc_text(test, *loc)?, val_text(test, *val)?);
    }
    s.push_str("}\n");
    s.push_str(&columns(test));
    let q = match test.quant {
        Quant::Exists => "exists",
        Quant::NotExists => "~exists",
        Quant::Forall => "forall",
    };
    let c = cond_text(test, &test.cond)?;
    if c.starts_with('(') && c.ends_with(')') {
        let _ = writeln!(s, "{q} {c}");
    } else {
        let _ = writeln!(s, "{q} ({c})");
    }
    if !comment.is_empty() {
        let _ = write!(s, "(*\n{}\n*)\n", comment.trim_end());
    }
    Ok(s)
}

/// The thread header and code lines, columns padded to one width.
fn columns(test: &Test) -> String {
    let mut cols: Vec<(String, Vec<String>)> = Vec::new();
    for (p, t) in test.threads.iter().enumerate() {
        cols.push((format!("P{p}"), code_lines(test, &t.code)));
        if let Some(h) = &t.handler {
            cols.push((format!("P{p}.F"), code_lines(test, h)));
        }
    }
    let rows = cols.iter().map(|c| c.1.len()).max().unwrap_or(0);
    let widths: Vec<usize> = cols
        .iter()
        .map(|(h, l)| {
            l.iter()
                .map(String::len)
                .chain([h.len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: Vec<&str>| -> String {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!(" {c:<w$} "))
            .collect();
        format!("{};\n", padded.join("|").trim_end())
    };
    let mut s = line(cols.iter().map(|c| c.0.as_str()).collect());
    for r in 0..rows {
        s.push_str(&line(
            cols.iter()
                .map(|c| c.1.get(r).map(String::as_str).unwrap_or(""))
                .collect(),
        ));
    }
    s
}

/// One line per instruction, labels in front; a label at the end of the
/// code gets a line of its own.
fn code_lines(test: &Test, code: &Code) -> Vec<String> {
    let labels_at = |i: usize| -> String {
        code.labels
            .iter()
            .filter(|(_, &at)| at == i)
            .map(|(l, _)| format!("{}: ", test.sym(*l)))
            .collect()
    };
    let mut out: Vec<String> = code
        .instrs
        .iter()
        .enumerate()
        .map(|(i, ins)| format!("{}{}", labels_at(i), instr_text(test, ins)))
        .collect();
    let end = labels_at(code.instrs.len());
    if !end.is_empty() {
        out.push(end.trim_end().to_string());
    }
    out
}

fn reg(r: Reg) -> String {
    if r == ZR {
        "XZR".into()
    } else {
        format!("X{r}")
    }
}

/// Register `r` as the data register of a `bytes`-byte access: `W` for
/// 4 bytes.
fn data_reg(r: Reg, bytes: u8) -> String {
    match (bytes, r == ZR) {
        (4, true) => "WZR".into(),
        (4, false) => format!("W{r}"),
        _ => reg(r),
    }
}

fn operand(o: Operand) -> String {
    match o {
        Operand::Reg(r) => reg(r),
        Operand::Imm(i) => format!("#{i}"),
    }
}

fn addr(a: Addr) -> String {
    let index = match (a.offset, a.extend) {
        (Some(Operand::Reg(r)), Extend::Sxtw | Extend::Uxtw) => {
            let e = if a.extend == Extend::Sxtw {
                "SXTW"
            } else {
                "UXTW"
            };
            let w = data_reg(r, 4);
            match a.shift {
                0 => format!("{w},{e}"),
                s => format!("{w},{e} #{s}"),
            }
        }
        (Some(Operand::Reg(r)), Extend::None) if a.shift > 0 => {
            format!("{},LSL #{}", reg(r), a.shift)
        }
        (Some(o), _) => operand(o),
        (None, _) => return format!("[{}]", reg(a.base)),
    };
    format!("[{},{index}]", reg(a.base))
}

fn barrier(k: BarrierKind) -> &'static str {
    match k {
        BarrierKind::Full => "ISH",
        BarrierKind::Ld => "ISHLD",
        BarrierKind::St => "ISHST",
        BarrierKind::Nsh => "NSH",
    }
}

fn cond_code(c: CondCode) -> &'static str {
    match c {
        CondCode::Eq => "EQ",
        CondCode::Ne => "NE",
    }
}

/// An atomic's mnemonic.
fn rmw_name(op: RmwOp) -> &'static str {
    match op {
        RmwOp::Swp => "SWP",
        RmwOp::Set => "LDSET",
        RmwOp::Clr => "LDCLR",
    }
}

/// An arithmetic or logical operation's mnemonic.
fn alu_name(op: AluOp) -> &'static str {
    match op {
        AluOp::Add => "ADD",
        AluOp::Sub => "SUB",
        AluOp::Eor => "EOR",
        AluOp::And => "AND",
        AluOp::Orr => "ORR",
        AluOp::Bic => "BIC",
        AluOp::Lsr => "LSR",
        AluOp::Lsl => "LSL",
    }
}

/// One instruction in herd's syntax.
pub fn instr_text(test: &Test, ins: &Instr) -> String {
    match *ins {
        Instr::Ldr { rt, addr: a, bytes } => format!("LDR {},{}", data_reg(rt, bytes), addr(a)),
        Instr::Str { rt, addr: a, bytes } => format!("STR {},{}", data_reg(rt, bytes), addr(a)),
        Instr::Rmw {
            op,
            rs,
            rt,
            addr: a,
            bytes,
        } => {
            let (rs, rt) = (data_reg(rs, bytes), data_reg(rt, bytes));
            format!("{} {rs},{rt},{}", rmw_name(op), addr(a))
        }
        Instr::Cas {
            rs,
            rt,
            addr: a,
            bytes,
        } => {
            let (rs, rt) = (data_reg(rs, bytes), data_reg(rt, bytes));
            format!("CAS {rs},{rt},{}", addr(a))
        }
        Instr::Mov { rd, src } => format!("MOV {},{}", reg(rd), operand(src)),
        Instr::Alu { op, rd, rn, op2 } => {
            format!("{} {},{},{}", alu_name(op), reg(rd), reg(rn), operand(op2))
        }
        Instr::Cmp { rn, op2 } => format!("CMP {},{}", reg(rn), operand(op2)),
        Instr::Csel { rd, rn, rm, cond } => format!(
            "CSEL {},{},{},{}",
            reg(rd),
            reg(rn),
            reg(rm),
            cond_code(cond)
        ),
        Instr::Cset { rd, cond } => format!("CSET {},{}", reg(rd), cond_code(cond)),
        Instr::Cbz { rt, nonzero, label } => {
            let name = if nonzero { "CBNZ" } else { "CBZ" };
            format!("{name} {},{}", reg(rt), test.sym(label))
        }
        Instr::B { cond: None, label } => format!("B {}", test.sym(label)),
        Instr::B {
            cond: Some(c),
            label,
        } => format!("B.{} {}", cond_code(c), test.sym(label)),
        Instr::Adr { rd, label } => format!("ADR {},{}", reg(rd), test.sym(label)),
        Instr::MsrElr { rt } => format!("MSR ELR_EL1,{}", reg(rt)),
        Instr::Eret => "ERET".into(),
        Instr::Dmb(k) => format!("DMB {}", barrier(k)),
        Instr::Dsb(k) => format!("DSB {}", barrier(k)),
        Instr::Isb => "ISB".into(),
        Instr::Tlbi { op, rt } => {
            let base = match op.scope {
                TlbiKind::Va => "VAE1",
                TlbiKind::VaLast => "VALE1",
                TlbiKind::Asid => "ASIDE1",
                TlbiKind::All => "VMALLE1",
            };
            let is = if op.shareable { "IS" } else { "" };
            match rt {
                Some(r) => format!("TLBI {base}{is},{}", reg(r)),
                None => format!("TLBI {base}{is}"),
            }
        }
        Instr::Nop => "NOP".into(),
    }
}

fn loc_text(test: &Test, l: Loc) -> Result<String, PrintError> {
    Ok(match l {
        Loc::Reg(p, r) => format!("{p}:{}", reg(r)),
        Loc::Data(x, off) => place(test, x, off)?,
        Loc::Pte(x) => format!("[PTE({})]", test.sym(x)),
    })
}

/// Byte `off` of variable `x`'s page, as herd names it: `x` (a
/// variable that is not an array, byte 0) or `x[i]` (an element).
fn place(test: &Test, x: Sym, off: u16) -> Result<String, PrintError> {
    let name = test.sym(x);
    match test.array(x) {
        None if off == 0 => Ok(name.to_string()),
        Some(a) => match a.index_at(off) {
            Some(i) => Ok(format!("{name}[{i}]")),
            None => Err(PrintError(format!("byte {off} of {name}, not an element"))),
        },
        None => Err(PrintError(format!(
            "byte {off} of {name}, which is not an array"
        ))),
    }
}

fn pte_text(test: &Test, p: PteVal) -> String {
    let mut f: Vec<String> = Vec::new();
    if let Some(oa) = p.oa {
        f.push(format!("oa:PA({})", test.sym(oa)));
    }
    let d = PteVal::default_for(p.oa);
    for (name, v, dv) in [
        ("valid", p.valid, d.valid),
        ("af", p.af, d.af),
        ("db", p.db, d.db),
        ("dbm", p.dbm, d.dbm),
        ("el0", p.el0, d.el0),
    ] {
        if v != dv {
            f.push(format!("{name}:{v}"));
        }
    }
    format!("({})", f.join(", "))
}

fn val_text(test: &Test, v: Val) -> Result<String, PrintError> {
    Ok(match v {
        Val::Int(i) => i.to_string(),
        Val::Va(x, 0) => test.sym(x).to_string(),
        Val::Va(x, off) => place(test, x, off)?,
        Val::Page(x) => {
            return Err(PrintError(format!(
                "the page number of {} as a value (herd computes it with LSR)",
                test.sym(x)
            )))
        }
        Val::PteAddr(x) => format!("PTE({})", test.sym(x)),
        Val::Pa(x) => format!("PA({})", test.sym(x)),
        Val::Pte(p) => pte_text(test, p),
        Val::Label(p, l) => format!("label:\"P{p}:{}\"", test.sym(l)),
    })
}

fn cond_text(test: &Test, c: &Cond) -> Result<String, PrintError> {
    let join = |cs: &[Cond], op: &str| -> Result<String, PrintError> {
        let parts: Result<Vec<String>, PrintError> =
            cs.iter().map(|c| cond_text(test, c)).collect();
        Ok(format!("({})", parts?.join(op)))
    };
    Ok(match c {
        Cond::True => "true".into(),
        Cond::Eq(l, v) => format!("{}={}", loc_text(test, *l)?, val_text(test, *v)?),
        Cond::Fault(a) => {
            let mut s = format!("fault(P{}", a.proc);
            if let Some(l) = a.label {
                let _ = write!(s, ":{}", test.sym(l));
            }
            if let Some(x) = a.var {
                let _ = write!(s, ",{}", test.sym(x));
            }
            if let Some(k) = a.kind {
                if a.var.is_none() {
                    return Err(PrintError("a fault kind without a variable".into()));
                }
                let k = match k {
                    FaultKind::Translation => "MMU:Translation",
                    FaultKind::AccessFlag => "MMU:AccessFlag",
                    FaultKind::Permission => "MMU:Permission",
                };
                let _ = write!(s, ",{k}");
            }
            s.push(')');
            s
        }
        Cond::Not(c) => format!("~{}", cond_text(test, c)?),
        Cond::And(cs) => join(cs, " /\\ ")?,
        Cond::Or(cs) => join(cs, " \\/ ")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::litmus::parse::parse;

    /// Every catalogue test tlbsim parses prints to a text that parses
    /// back to the same test: printing it again gives the same text.
    #[test]
    fn the_catalogue_prints_and_parses_back() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/litmus/aarch64-VMSA/tests");
        let Ok(entries) = std::fs::read_dir(&dir) else {
            eprintln!("skipped: no catalogue at {}", dir.display());
            return;
        };
        let mut n = 0;
        let mut paths: Vec<_> = entries.flatten().map(|e| e.path()).collect();
        paths.sort();
        for p in paths {
            if p.extension().and_then(|e| e.to_str()) != Some("litmus") {
                continue;
            }
            let text = std::fs::read_to_string(&p).unwrap();
            let Ok(t) = parse(&text) else { continue };
            let once = print(&t, "a comment").unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            let back = parse(&once).unwrap_or_else(|e| panic!("{}: {e:?}\n{once}", p.display()));
            let twice = print(&back, "a comment").unwrap();
            assert_eq!(once, twice, "{}", p.display());
            n += 1;
        }
        assert!(n > 250, "only {n} catalogue tests parsed");
    }

    /// Issue 35, item 3: an array test prints back in herd's form (the
    /// declaration with every value, elements as `x[i]`, `W` data
    /// registers, extended and shifted offsets) and parses to the same.
    #[test]
    fn an_array_test_prints_in_herd_form_and_parses_back() {
        let text = "AArch64 arr
{
0:X5=x[2]; int x[3]={1,2,3}; int64_t w[2];
0:X1=x; 0:X2=1; 0:X4=w;
}
 P0 ;
 LDR W3,[X1,#4] ;
 LDR W3,[X1,X2,LSL #2] ;
 STR W3,[X1,W2,SXTW #2] ;
 STR WZR,[X1,W2,SXTW] ;
 LDR X6,[X4,#8] ;
 SWP W3,W7,[X1] ;
forall (x={1,2,3} /\\ 0:X5=x[2] /\\ w[1]=0)
";
        let t = parse(text).unwrap();
        let once = print(&t, "").unwrap();
        for want in [
            " int x[3]={1,2,3};\n int64_t w[2]={0,0};\n 0:X5=x[2];\n",
            "LDR W3,[X1,#4]",
            "LDR W3,[X1,X2,LSL #2]",
            "STR W3,[X1,W2,SXTW #2]",
            "STR WZR,[X1,W2,SXTW]",
            "LDR X6,[X4,#8]",
            "SWP W3,W7,[X1]",
            "forall ((x[0]=1 /\\ x[1]=2 /\\ x[2]=3) /\\ 0:X5=x[2] /\\ w[1]=0)",
        ] {
            assert!(once.contains(want), "{want:?} not in\n{once}");
        }
        let back = parse(&once).unwrap_or_else(|e| panic!("{e:?}\n{once}"));
        assert_eq!(print(&back, "").unwrap(), once);
        assert_eq!(back.arrays, t.arrays);
        assert_eq!(back.cond, t.cond);
    }

    #[test]
    fn a_comment_that_would_end_the_block_is_refused() {
        let t =
            parse("AArch64 T\n{\n0:X3=x;\n}\n P0 ;\n LDR X4,[X3] ;\nexists (0:X4=0)\n").unwrap();
        assert!(print(&t, "ok").is_ok());
        assert!(print(&t, "a *) b").is_err());
    }
}
