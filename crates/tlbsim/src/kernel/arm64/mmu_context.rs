//! arm64 translation-base switching, as in arch/arm64/include/asm/
//! mmu_context.h and arch/arm64/mm/context.c (v5.10): the ASID lives in
//! TTBR1 (`TCR_EL1.A1 = 1`, since v4.15), so the reserved TTBR0 leaves it
//! current.

use crate::hw::tlb::MmId;
use crate::hw::Ttbr0;
use crate::kernel::{Ctx, Op};

/// `cpu_set_reserved_ttbr0()`: point TTBR0 at the empty zero page
/// (`reserved_pg_dir` in current mainline), then `isb()`. Only TTBR0 is
/// written: the ASID stays in TTBR1, so what the CPU may still do with
/// that ASID's cached walks is the hardware's walk-cache reading
/// ([`crate::hw::Hw::walk_context`]). Before v4.15 (7655abb95386) the
/// ASID was in TTBR0 and this write also loaded ASID 0.
pub async fn cpu_set_reserved_ttbr0(ctx: &Ctx) {
    ctx.step(Op::SetReservedTtbr0).await;
    ctx.isb().await;
}

/// `cpu_switch_mm(mm->pgd, mm)`: the reserved TTBR0 first, so that no walk
/// pairs the new ASID with the old tables or the reverse, then
/// `cpu_do_switch_mm()` writes the ASID (to TTBR1) and `mm`'s tables (to
/// TTBR0), then `isb()`. The model folds the `isb()` of
/// `cpu_set_reserved_ttbr0()` and the one between `cpu_do_switch_mm()`'s
/// two writes into the last one: nothing runs on this CPU between them,
/// and the reserved TTBR0 leaves no walk that could pair the new ASID
/// with the old tables.
pub async fn cpu_switch_mm(ctx: &Ctx, mm: MmId) {
    let w = &ctx.w;
    ctx.step(Op::SetReservedTtbr0).await;
    let pgd = w.k.borrow().mms[mm].pgd;
    let asid = w.user_asid(mm);
    ctx.step(Op::SetTtbr0(Some(Ttbr0 { mm, pgd, asid }))).await;
    ctx.isb().await;
}
