//! arm64 translation-base switching, as in arch/arm64/include/asm/
//! mmu_context.h (v5.10).

use crate::hw::tlb::MmId;
use crate::hw::Ttbr0;
use crate::kernel::{Ctx, Op};

/// `cpu_set_reserved_ttbr0()`: point TTBR0 at the empty zero page (no user
/// translations, no walks of any user table), then `isb()`.
pub async fn cpu_set_reserved_ttbr0(ctx: &Ctx) {
    ctx.step(Op::SetTtbr0(None)).await;
    ctx.isb().await;
}

/// `cpu_switch_mm(mm->pgd, mm)`: the reserved TTBR0 first, so that no walk
/// pairs the new ASID with the old tables or the reverse, then
/// `cpu_do_switch_mm()` writes the ASID and `mm`'s tables, then `isb()`.
/// The model folds the `isb()` of `cpu_set_reserved_ttbr0()` into the last
/// one: nothing runs on this CPU between the two TTBR0 writes.
pub async fn cpu_switch_mm(ctx: &Ctx, mm: MmId) {
    let w = &ctx.w;
    ctx.step(Op::SetTtbr0(None)).await;
    let pgd = w.k.borrow().mms[mm as usize].pgd;
    let asid = w.user_asid(mm);
    ctx.step(Op::SetTtbr0(Some(Ttbr0 { mm, pgd, asid }))).await;
    ctx.isb().await;
}
