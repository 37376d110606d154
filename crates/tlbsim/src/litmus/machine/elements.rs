//! Accesses to array elements ([`crate::litmus::ast::Array`]): an
//! address moves within its array's page (`[X1,#4]`, `[X1,X2,LSL #2]`,
//! `ADD X3,X1,#8`), and an access must name one whole element, at its
//! start and of its size. What the model does not give meaning to (an
//! access out of the array, between two elements, or mixed-size) ends
//! the run with an error naming the source line.

use super::{run_err, Machine, RunError};
use crate::litmus::ast::{Addr, AluOp, Extend, Sym, Val};
use crate::litmus::parse::Unsupported;

/// Bytes of a variable's page: an address moved by an offset stays in
/// it.
const PAGE_BYTES: i64 = 4096;

/// The size of a memory access and the source line of its instruction.
#[derive(Debug, Clone, Copy)]
pub(super) struct Width {
    /// Bytes accessed: 4 (`W` register) or 8 (`X`).
    pub bytes: u8,
    /// 1-based line of the instruction.
    pub line: usize,
}

/// A register offset's value extended and shifted as addressing mode
/// `a` says (`SXTW`: the low 32 bits sign-extended; `UXTW`:
/// zero-extended; then `LSL #shift`); a value that is not an integer is
/// returned as it is.
pub(super) fn scaled(v: Val, a: Addr) -> Val {
    let Val::Int(i) = v else { return v };
    let i = match a.extend {
        Extend::None => i,
        Extend::Sxtw => i64::from(i as i32),
        Extend::Uxtw => i64::from(i as u32),
    };
    Val::Int(i.saturating_mul(1 << a.shift))
}

impl Machine<'_> {
    /// Address `v + off` moved by `k` bytes: still in `v`'s page, or an
    /// error.
    pub(super) fn offset_va(&self, v: Sym, off: u16, k: i64, line: usize) -> Result<Val, RunError> {
        let to = i64::from(off).saturating_add(k);
        if (0..PAGE_BYTES).contains(&to) {
            return Ok(Val::Va(v, to as u16));
        }
        let name = self.test.sym(v);
        Err(run_err(
            Unsupported::ArrayLocation,
            format!(
                "line {line}: address {name}{off:+} moved by {k} bytes leaves {name}'s \
                 {PAGE_BYTES}-byte page"
            ),
        ))
    }

    /// `ADD`/`SUB` of an array element's address and a non-zero integer:
    /// the address moved (`None`: not this case, [`super::alu`]'s).
    pub(super) fn element_arith(
        &self,
        op: AluOp,
        a: Val,
        b: Val,
        line: usize,
    ) -> Result<Option<Val>, RunError> {
        let (v, off, k) = match (op, a, b) {
            (AluOp::Add, Val::Va(v, off), Val::Int(k))
            | (AluOp::Add, Val::Int(k), Val::Va(v, off)) => (v, off, k),
            (AluOp::Sub, Val::Va(v, off), Val::Int(k)) => (v, off, 0i64.saturating_sub(k)),
            _ => return Ok(None),
        };
        if k == 0 || self.test.array(v).is_none() {
            return Ok(None);
        }
        self.offset_va(v, off, k, line).map(Some)
    }

    /// An access of `w` at byte `off` of variable `v`'s page must be to
    /// one element of the array `v` is, at its start and of its size;
    /// a variable that is not an array holds one value at byte 0 (of
    /// any size, as before arrays). `via`: the variable whose
    /// translation led to `v`'s page, when it is another's.
    pub(super) fn check_element(
        &self,
        v: Sym,
        off: u16,
        w: Width,
        via: Option<Sym>,
    ) -> Result<(), RunError> {
        let array = self.test.array(v);
        let fits = match array {
            None => off == 0,
            Some(a) => a.index_at(off).is_some() && w.bytes == a.elem_bytes,
        };
        if fits {
            return Ok(());
        }
        let name = self.test.sym(v);
        let why = match array {
            None => format!("{name} is not an array: it holds one value, at byte 0"),
            Some(a) => match a.index_at(off) {
                Some(i) => format!(
                    "{name}[{i}] is a {}-byte {} (mixed-size access)",
                    a.elem_bytes, a.ty
                ),
                None if usize::from(off) >= a.len() * usize::from(a.elem_bytes) => format!(
                    "out of the bounds of {name}, {} elements of {} bytes",
                    a.len(),
                    a.elem_bytes
                ),
                None => format!(
                    "between two elements of {name} ({}-byte {})",
                    a.elem_bytes, a.ty
                ),
            },
        };
        let through = match via {
            Some(x) if x != v => {
                format!(" ({}{off:+} translates to {name}{off:+})", self.test.sym(x))
            }
            _ => String::new(),
        };
        Err(run_err(
            Unsupported::ArrayLocation,
            format!(
                "line {}: {}-byte access at {name}{off:+}{through}: {why}",
                w.line, w.bytes
            ),
        ))
    }
}
