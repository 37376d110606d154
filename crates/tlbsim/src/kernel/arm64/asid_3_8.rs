//! `arm-asid-reserved-3.8`: Will Deacon's 2012 ARM allocator, the "after"
//! of seed 002 (arch/arm/mm/context.c as merged for Linux 3.8: commits
//! b5466f872852 "ARM: mm: remove IPI broadcasting on ASID rollover",
//! 4b883160835f "ARM: mm: avoid taking ASID spinlock on fastpath",
//! bf51bb82ccd9 "ARM: mm: use bitmap operations when allocating new ASIDs").
//!
//! It is the design arm64 adopted in 2015 (`arm64-asid-reserved`), in its
//! first form. What differs from arm64's:
//! - `new_context()` keeps an mm's old number only when a CPU reserved it
//!   at the rollover; otherwise it takes the *first* free bit of
//!   `asid_map` (`find_first_zero_bit`, no `cur_idx`), where arm64 reuses a
//!   stale mm's old number when it is free and searches on from `cur_idx`.
//! - ASID 0 is not an index of `asid_map`: index `i` is ASID `i + 1`
//!   (`IDX_TO_ASID`), so there are `2^bits - 1` user ASIDs.
//! - `flush_context(cpu)` reserves, for every *other* CPU, what
//!   `atomic64_xchg(&active_asids[i], 0)` returns, and gives the rolling
//!   CPU reserved ASID 0. A CPU that already went through a rollover and has
//!   not switched since returns 0 and loses its reservation: the bug that
//!   Linux 3.11 fixed ("ARM: 7767/1: let the ASID allocator handle suspended
//!   animation", ae120d9edfe9). `__set_bit(ASID_TO_IDX(0))` then writes
//!   outside `asid_map` (index -1); the model drops that write.
//! - With hardware-broadcast TLB maintenance (`!tlb_ops_need_broadcast()`,
//!   Cortex-A15) only the rolling CPU is marked in `tlb_flush_pending`, and
//!   its `local_flush_tlb_all()` is an inner-shareable `TLBIALLIS` on every
//!   ARMv7 SMP kernel before 3.10, so one flush reaches every CPU.
//! - The fast path is `atomic64_xchg(&active_asids[cpu], id)`, taken when
//!   the xchg returns non-zero (arm64 has used a cmpxchg since 2018).
//! - `cpu_set_reserved_ttbr0()` runs before the check, on every switch.
//!
//! Not ported: `mm_cpumask` bookkeeping (the model's TLB maintenance of
//! this era is broadcast), `vmalloc_seq`, the VIVT I-cache flush. ARMv7
//! has no KPTI.

// ARMv7 SMP's `local_flush_tlb_all()` before Linux 3.10 (a TLBIALLIS),
// and 32-bit ARM's `cpu_set_reserved_ttbr0()` (the LPAE form, as for 3.5).
use super::asid_ipi::{cpu_set_reserved_ttbr0, local_flush_tlb_all};
use crate::engine::exec::KFuture;
use crate::hw::cpumask::CpuMask;
use crate::hw::tlb::{Asid, MmId};
use crate::hw::{CpuId, Ttbr0};
use crate::kernel::policy::AsidAllocator;
use crate::observe::Invariant;
use crate::kernel::registry::{AllocatorEntry, Breaks};
use crate::kernel::{Ctx, LockId, Op, World};
use crate::engine::state::{self, PerCpu, Var};
use std::cell::Cell;

crate::recorded! {
/// The globals of Linux 3.8's arch/arm/mm/context.c, each recording its
/// own accesses (`active_asids` and `reserved_asids` by CPU).
#[derive(Debug, Default)]
struct State {
    /// `asid_generation`: a multiple of `1 << bits`.
    generation: Var<u64>,
    /// `asid_map`: index `i` is ASID `i + 1` (`NUM_USER_ASIDS` entries).
    map: Var<Vec<bool>>,
    /// `DEFINE_PER_CPU(atomic64_t, active_asids)` (0 after a rollover,
    /// until the CPU switches).
    active: PerCpu<u64>,
    /// `DEFINE_PER_CPU(u64, reserved_asids)`.
    reserved: PerCpu<u64>,
    /// `tlb_flush_pending`.
    flush_pending: Var<CpuMask>,
}
}

impl State {
    /// `find_first_zero_bit(asid_map, NUM_USER_ASIDS)`.
    fn find_first_zero_bit(&self) -> Option<usize> {
        self.map.iter().position(|&used| !used)
    }

    /// `is_reserved_asid(asid)`: whole ids (generation included) compared,
    /// `for_each_possible_cpu(cpu)`.
    fn is_reserved_asid(&self, asid: u64) -> bool {
        CpuId::all(self.reserved.len()).any(|cpu| self.reserved[cpu] == asid)
    }
}

/// The fixes a later kernel applied to 3.8's allocator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fixes {
    /// Linux 3.8 as released.
    None,
    /// ae120d9edfe9 ("ARM: 7767/1: let the ASID allocator handle suspended
    /// animation", 3.11): `flush_context()` keeps the reserved ASID of a
    /// CPU whose active one reads 0.
    KeepReserved,
    /// Also 40ee068ec09b ("ARM: 8465/1: mm: keep reserved ASIDs in sync
    /// with mm after multiple rollovers", 4.4): `new_context()` moves
    /// every reserved copy of the mm's old id to its new generation
    /// (`check_update_reserved_asid()`).
    SyncReserved,
}

/// The allocator. See the module doc.
#[derive(Debug)]
pub struct Asid38 {
    bits: u8,
    /// Which of the allocator's later fixes are applied.
    fixes: Fixes,
    st: state::State<State>,
    lock: Cell<LockId>, // untracked: set once at init: not state an action changes
}

impl Asid38 {
    /// An allocator for `bits`-bit ASIDs.
    pub fn new(bits: u8) -> Self {
        Self::with_fixes(bits, Fixes::None)
    }

    /// 3.8's allocator with `fixes`.
    pub fn with_fixes(bits: u8, fixes: Fixes) -> Self {
        Self {
            bits,
            fixes,
            st: state::State::new(State::default()),
            lock: Cell::new(0), // untracked: set once at init: not state an action changes
        }
    }

    fn first_version(&self) -> u64 {
        1 << self.bits
    }

    /// `ASID_TO_IDX(asid)`; `None` for ASID 0 (Linux's index -1).
    fn asid_to_idx(&self, asid: u64) -> Option<usize> {
        ((asid & (self.first_version() - 1)) as usize).checked_sub(1)
    }

    /// `flush_context(cpu)`, lock held, generation already bumped.
    fn flush_context(&self, st: &mut State, cpu: CpuId) {
        st.map.iter_mut().for_each(|b| *b = false); // bitmap_clear()
        for i in CpuId::all(st.active.len()) {
            let asid = if i == cpu {
                0
            } else {
                let mut asid = std::mem::take(&mut st.active[i]); // atomic64_xchg(.., 0)
                if self.fixes != Fixes::None && asid == 0 {
                    // ae120d9edfe9: "If this CPU has already been through a
                    // rollover, but hasn't run another task in the
                    // meantime, we must preserve its reserved ASID".
                    asid = st.reserved[i];
                }
                if let Some(idx) = self.asid_to_idx(asid) {
                    st.map[idx] = true; // __set_bit(ASID_TO_IDX(asid), asid_map)
                }
                asid
            };
            st.reserved[i] = asid;
        }
        // !tlb_ops_need_broadcast(): this CPU's TLBIALLIS reaches them all.
        st.flush_pending.set(cpu);
    }

    /// `new_context(mm, cpu)`, lock held: the mm's new id, and whether a
    /// rollover happened.
    fn new_context(&self, st: &mut State, cpu: CpuId, old: u64) -> (u64, bool) {
        let mask = self.first_version() - 1;
        let new = *st.generation | (old & mask);
        if old != 0 && self.fixes == Fixes::SyncReserved {
            // 40ee068ec09b: check_update_reserved_asid(asid, newasid)
            // moves every reserved copy of the old id to the new one.
            let mut hit = false;
            for c in CpuId::all(st.reserved.len()) {
                if st.reserved[c] == old {
                    st.reserved[c] = new;
                    hit = true;
                }
            }
            if hit {
                return (new, false);
            }
        } else if old != 0 && st.is_reserved_asid(old) {
            // Running at the rollover: a false alarm, keep the number.
            return (new, false);
        }
        let mut rolled = false;
        let idx = match st.find_first_zero_bit() {
            Some(i) => i,
            None => {
                *st.generation += self.first_version(); // atomic64_add_return()
                self.flush_context(st, cpu);
                rolled = true;
                st.find_first_zero_bit()
                    .expect("more user ASIDs than CPUs: one is free after a rollover")
            }
        };
        st.map[idx] = true; // __set_bit(asid, asid_map)
        (*st.generation | (idx as u64 + 1), rolled) // IDX_TO_ASID()
    }

    /// The slow path of `check_and_switch_context()`, under
    /// `raw_spin_lock_irqsave(&cpu_asid_lock)`.
    async fn check_and_switch_context_slow(&self, ctx: &Ctx, mm: MmId) {
        let _f = ctx.func(crate::label!("check_and_switch_context"));
        let w = &ctx.w;
        let cpu = ctx.cpu();
        ctx.irq_save();
        ctx.spin_lock(self.lock.get()).await;
        let mut id = w.k.borrow().mms[mm].context_id;
        let (flush, new_number) = {
            let mut g = self.st.borrow_mut();
            let st = &mut *g;
            let mut new_number = false;
            if (id ^ *st.generation) >> self.bits != 0 {
                let (new, rolled) = self.new_context(st, cpu, id);
                if rolled {
                    w.stats.borrow_mut().asid_rollovers += 1;
                }
                new_number = id == 0 || (new ^ id) & (self.first_version() - 1) != 0;
                id = new;
            }
            // cpumask_test_and_clear_cpu(cpu, &tlb_flush_pending)
            (st.flush_pending.test_and_clear(cpu), new_number)
        };
        w.k.borrow_mut().mms[mm].context_id = id;
        if new_number {
            w.policy.on_new_context(w, mm); // cpumask_clear(mm_cpumask(mm))
        }
        // atomic64_set(&per_cpu(active_asids, cpu), mm->context.id)
        ctx.atomic_set(|| self.st.borrow_mut().active[cpu] = id).await;
        if flush {
            local_flush_tlb_all(ctx).await;
        }
        ctx.spin_unlock(self.lock.get()).await;
        ctx.irq_restore();
    }
}

/// `cpu_switch_mm(mm->pgd, mm)` (`cpu_v7_switch_mm`): the ASID into
/// CONTEXTIDR and the tables into TTBR0 (one step in the model: TTBR0
/// has been the reserved table since the start of the switch), `isb`.
async fn cpu_switch_mm(ctx: &Ctx, mm: MmId) {
    let w = &ctx.w;
    let pgd = w.k.borrow().mms[mm].pgd;
    let asid = w.user_asid(mm);
    ctx.step(Op::SetTtbr0(Some(Ttbr0 { mm, pgd, asid }))).await;
    ctx.isb().await;
}

impl AsidAllocator for Asid38 {
    fn init(&self, w: &World) {
        let n = w.ncpus();
        {
            let mut st = self.st.borrow_mut();
            *st.generation = self.first_version();
            *st.map = vec![false; self.first_version() as usize - 1];
            st.active.fill(n, 0);
            st.reserved.fill(n, 0);
            *st.flush_pending = CpuMask::new(n);
        }
        self.lock.set(w.new_lock("cpu_asid_lock"));
    }

    fn asid_of(&self, w: &World, mm: MmId) -> Asid {
        (w.k.borrow().mms[mm].context_id & (self.first_version() - 1)) as Asid
    }

    fn supports_kpti(&self) -> bool {
        false
    }

    fn check_and_switch_context<'a>(&'a self, ctx: &'a Ctx, mm: MmId) -> KFuture<'a, ()> {
        Box::pin(async move {
            let w = &ctx.w;
            let cpu = ctx.cpu();
            // Avoid speculative walks with the wrong TTBR during the switch.
            cpu_set_reserved_ttbr0(ctx).await;
            let (id, gen) = ctx
                .atomic_read(|| {
                    let st = self.st.borrow();
                    let id = w.k.borrow().mms[mm].context_id;
                    (id, *st.generation)
                })
                .await;
            let mut fast = false;
            if (id ^ gen) >> self.bits == 0 {
                // atomic64_xchg(&per_cpu(active_asids, cpu), mm->context.id)
                let was = ctx
                    .cmpxchg(|| {
                        let mut st = self.st.borrow_mut();
                        let slot = &mut st.active[cpu];
                        std::mem::replace(slot, id)
                    })
                    .await;
                fast = was != 0;
            }
            if !fast {
                self.check_and_switch_context_slow(ctx, mm).await;
            }
            // switch_mm_fastpath:
            w.policy.before_ttbr0_load(ctx, mm).await;
            cpu_switch_mm(ctx, mm).await;
        })
    }
}

/// The registry entry of `arm-asid-reserved-3.8`.
pub const ENTRY: AllocatorEntry = AllocatorEntry {
    name: "arm-asid-reserved-3.8",
    description: "ARM 2012 (Linux 3.8): reserved ASIDs at rollover, no IPIs, xchg fast path, \
                  first free bit, one TLBIALLIS per rollover",
    arch: Some(crate::config::Arch::Arm64),
    // Linux 3.8's lost reservation (fixed in 3.11 by ae120d9edfe9): a CPU
    // running one mm through two rollovers keeps its ASID, which is handed
    // to another mm.
    breaks: Some(Breaks {
        invariant: Invariant::AsidIsolation,
        search: super::mutants::ALLOCATOR_SEARCH,
    }),
    new: |_, bits| Box::new(Asid38::new(bits)),
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::cpu::cpuid;

    fn state(a: &Asid38, ncpus: usize) -> State {
        let mut st = State::default();
        *st.generation = a.first_version();
        *st.map = vec![false; a.first_version() as usize - 1];
        st.active.fill(ncpus, 0);
        st.reserved.fill(ncpus, 0);
        *st.flush_pending = CpuMask::new(ncpus);
        st
    }

    #[test]
    fn asids_start_at_one_and_take_the_first_free_bit() {
        let a = Asid38::new(2); // user ASIDs 1..=3
        let mut st = state(&a, 2);
        let ids: Vec<u64> = (0..3).map(|_| a.new_context(&mut st, cpuid(0), 0).0 & 3).collect();
        assert_eq!(ids, vec![1, 2, 3]);
        // A stale mm whose old number is free does not get it back: arm64
        // would, 3.8 takes the first free bit after the rollover.
        st.active[cpuid(1)] = (1 << 2) | 2; // CPU1 runs the mm with ASID 2
        let (new, rolled) = a.new_context(&mut st, cpuid(0), (1 << 2) | 3);
        assert!(rolled);
        assert_eq!(new, (2 << 2) | 1, "first free index after ASID 2 was reserved");
        assert!(st.flush_pending.test(cpuid(0)) && !st.flush_pending.test(cpuid(1)));
        assert_eq!((st.reserved[cpuid(0)], st.reserved[cpuid(1)]), (0, (1 << 2) | 2));
        // The mm running on CPU1 keeps its number into the new generation.
        let (kept, rolled) = a.new_context(&mut st, cpuid(1), (1 << 2) | 2);
        assert_eq!((kept, rolled), ((2 << 2) | 2, false));
    }

    #[test]
    fn a_second_rollover_without_a_switch_loses_the_reservation() {
        // Linux 3.8's bug (fixed by ae120d9edfe9 in 3.11): CPU1 runs one
        // mm through two rollovers by CPU0, and its ASID is handed out.
        let a = Asid38::new(2);
        let mut st = state(&a, 2);
        let running = a.new_context(&mut st, cpuid(1), 0).0; // ASID 1 on CPU1
        st.active[cpuid(1)] = running;
        for _ in 0..2 {
            a.new_context(&mut st, cpuid(0), 0);
        }
        let (_, rolled) = a.new_context(&mut st, cpuid(0), 0);
        assert!(rolled, "first rollover");
        assert_eq!(st.reserved[cpuid(1)], running);
        assert_eq!(st.active[cpuid(1)], 0);
        let mut handed = Vec::new();
        for _ in 0..3 {
            handed.push(a.new_context(&mut st, cpuid(0), 0).0 & 3);
        }
        assert_eq!(st.reserved[cpuid(1)], 0, "the second rollover read active 0");
        assert!(handed.contains(&(running & 3)), "ASID {running} reused: {handed:?}");
    }
}
