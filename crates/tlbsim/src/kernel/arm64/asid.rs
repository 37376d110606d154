//! `arm64-asid-reserved`: the arm64 ASID allocator of arch/arm64/mm/context.c
//! (the design of seed 002): generations in the upper bits of
//! `mm->context.id`, ASIDs running at rollover stay reserved, every CPU
//! flushes locally before first using a new generation, no IPIs, and a
//! lockless fast path on `active_asids` with cmpxchg.

use super::mmu_context::cpu_switch_mm;
use super::tlbflush::local_flush_tlb_all;
use crate::engine::exec::KFuture;
use crate::hw::cpumask::CpuMask;
use crate::hw::tlb::{Asid, MmId};
use crate::hw::CpuId;
use crate::kernel::policy::AsidAllocator;
use crate::kernel::registry::AllocatorEntry;
use crate::kernel::{Ctx, LockId, World};
use crate::engine::state::{self, PerCpu, Var};
use std::cell::Cell;

crate::recorded! {
/// The allocator's state (the globals of arch/arm64/mm/context.c), each
/// recording its own accesses: `active_asids` and `reserved_asids` by CPU,
/// the rest whole.
#[derive(Debug, Default)]
pub struct State {
    /// `asid_generation`: a multiple of `1 << bits`.
    pub generation: Var<u64>,
    /// `asid_map`: index (not ASID) used in this generation.
    pub map: Var<Vec<bool>>,
    /// `cur_idx`: where the next search starts.
    pub cursor: Var<usize>,
    /// `DEFINE_PER_CPU(atomic64_t, active_asids)` (0: take the slow path).
    pub active: PerCpu<u64>,
    /// `DEFINE_PER_CPU(u64, reserved_asids)`.
    pub reserved: PerCpu<u64>,
    /// `tlb_flush_pending`.
    pub flush_pending: Var<CpuMask>,
    /// `pinned_asid_map`: indices pinned for IOMMU sharing.
    pub pinned_map: Var<Vec<bool>>,
    /// `mm->context.pinned` counts, by mm.
    pub pins: Var<std::collections::BTreeMap<MmId, u32>>,
}
}

/// The parts of arch/arm64/mm/context.c that a mutant of the allocator
/// replaces, along Linux's functions (and the cmpxchg of
/// `check_and_switch_context()`'s lockless fast path). Each default is
/// Linux's; [`Linux`] takes them all. A mutant overrides exactly one.
pub trait ContextFns: std::fmt::Debug {
    /// `flush_context()`: lock held, generation already bumped. Reserves
    /// the ASID each CPU runs, marks every CPU for a local flush.
    fn flush_context(&self, a: &ReservedAsid, st: &mut State) {
        flush_context(a, st);
    }

    /// `check_update_reserved_asid(asid, newasid)`: if some CPU reserved
    /// `old`, every such copy becomes `new` (no early exit); returns hit.
    fn check_update_reserved_asid(&self, st: &mut State, old: u64, new: u64) -> bool {
        check_update_reserved_asid(st, old, new)
    }

    /// `ASID(mm)`: the hardware ASID of context id `id` under `bits`-bit
    /// ASIDs. Since c0900d15d31c ("arm64: Ensure bits ASID\[15:8\] are
    /// masked out when the kernel uses 8-bit ASIDs", 6.13) the id's low
    /// `bits` bits (`ctxid2asid()`); before, `id & 0xffff`, which on a CPU
    /// whose hardware uses 16 bits (`TCR_EL1.AS`) while the kernel uses
    /// fewer carries generation bits into the tag.
    fn asid(&self, id: u64, bits: u8) -> u64 {
        id & ((1 << bits) - 1)
    }

    /// Does the fast path try to publish only when the `active_asids` slot
    /// it read was non-zero? Since a8ffaaa060b8 ("arm64: asid: Do not
    /// replace active_asids if already 0", 4.15) a slot a rollover zeroed
    /// sends the switch to the slow path untouched; before, the fast path
    /// read no slot and its `xchg` found the 0 only after replacing it.
    fn fast_path_checks_active(&self) -> bool {
        true
    }

    /// `atomic64_cmpxchg_relaxed(&active_asids[cpu], old, new)`, true when
    /// it swapped: publishes the ASID unless a rollover changed the slot.
    fn cmpxchg_active_asid(&self, slot: &mut u64, old: u64, new: u64) -> bool {
        if *slot == old {
            *slot = new;
            true
        } else {
            false
        }
    }
}

/// arch/arm64/mm/context.c as in Linux.
#[derive(Debug, Clone, Copy, Default)]
pub struct Linux;

impl ContextFns for Linux {}

/// Linux's `flush_context()` ([`ContextFns::flush_context`]).
pub fn flush_context(a: &ReservedAsid, st: &mut State) {
    // Pinned ASIDs stay allocated across generations.
    st.map.clone_from(&st.pinned_map);
    st.map[0] = true; // ASID 0 is reserved
    for cpu in CpuId::all(st.active.len()) {
        let mut asid = std::mem::take(&mut st.active[cpu]); // atomic64_xchg(.., 0)
        if asid == 0 {
            asid = st.reserved[cpu];
        }
        let idx = a.asid2idx(asid);
        st.map[idx] = true;
        st.reserved[cpu] = asid;
    }
    st.flush_pending.set_all();
}

/// Linux's `check_update_reserved_asid()`: visits every CPU.
pub fn check_update_reserved_asid(st: &mut State, old: u64, new: u64) -> bool {
    let mut hit = false;
    // for_each_possible_cpu(cpu): per_cpu(reserved_asids, cpu)
    for cpu in CpuId::all(st.reserved.len()) {
        if st.reserved[cpu] == old {
            hit = true;
            st.reserved[cpu] = new;
        }
    }
    hit
}

/// The allocator. See the module doc.
#[derive(Debug)]
pub struct ReservedAsid {
    bits: u8,
    kpti: bool,
    fns: &'static dyn ContextFns,
    st: state::State<State>,
    lock: Cell<LockId>, // untracked: set once at init: not state an action changes
}

impl ReservedAsid {
    /// An allocator for `bits`-bit ASIDs; with `kpti`, ASIDs come in
    /// even/odd pairs and only even ones are allocated.
    pub fn new(bits: u8, kpti: bool) -> Self {
        Self::with_fns(bits, kpti, &Linux)
    }

    /// The allocator whose replaceable functions are `fns`.
    pub fn with_fns(bits: u8, kpti: bool, fns: &'static dyn ContextFns) -> Self {
        Self {
            bits,
            kpti,
            fns,
            st: state::State::new(State::default()),
            lock: Cell::new(0), // untracked: set once at init: not state an action changes
        }
    }

    fn first_version(&self) -> u64 {
        1 << self.bits
    }
    /// Number of map indices (`NUM_USER_ASIDS`, halved under KPTI).
    pub fn nr_idx(&self) -> usize {
        let n = 1usize << self.bits;
        if self.kpti {
            n / 2
        } else {
            n
        }
    }
    /// `idx2asid()`: the ASID of map index `idx`.
    pub fn idx2asid(&self, idx: usize) -> u64 {
        if self.kpti {
            (idx as u64) << 1
        } else {
            idx as u64
        }
    }
    /// `asid2idx()`: the map index of a context id's ASID.
    pub fn asid2idx(&self, asid: u64) -> usize {
        let a = (asid & (self.first_version() - 1)) as usize;
        if self.kpti {
            a >> 1
        } else {
            a
        }
    }

    /// `new_context()`: lock held. Returns the new id and whether a rollover
    /// happened.
    #[cfg(test)]
    fn new_context(&self, st: &mut State, old: u64) -> (u64, bool) {
        self.new_context_for(st, old, false)
    }

    /// `new_context()` for an mm that may be pinned.
    fn new_context_for(&self, st: &mut State, old: u64, pinned: bool) -> (u64, bool) {
        let asid_mask = self.first_version() - 1;
        let gen = *st.generation;
        if old != 0 {
            let new = gen | (old & asid_mask);
            if self.fns.check_update_reserved_asid(st, old, new) {
                return (new, false);
            }
            // A pinned mm keeps its ASID: it is set in pinned_map.
            if pinned {
                return (new, false);
            }
            let idx = self.asid2idx(old);
            if !st.map[idx] {
                st.map[idx] = true;
                return (new, false);
            }
        }
        let mut rolled = false;
        let idx = match (*st.cursor..self.nr_idx()).find(|&i| !st.map[i]) {
            Some(i) => i,
            None => {
                *st.generation += self.first_version();
                self.fns.flush_context(self, st);
                rolled = true;
                (1..self.nr_idx())
                    .find(|&i| !st.map[i])
                    .expect("more ASIDs than CPUs: a free one exists after rollover")
            }
        };
        st.map[idx] = true;
        *st.cursor = idx;
        (*st.generation | self.idx2asid(idx), rolled)
    }
}

impl ReservedAsid {
    /// Most ASIDs that may be pinned at once: `NUM_USER_ASIDS - ncpus - 2`
    /// (one reserved per CPU, ASID 0, and one to allocate from).
    fn max_pinned(&self, ncpus: usize) -> usize {
        self.nr_idx().saturating_sub(ncpus + 2)
    }

    /// `arm64_mm_context_get(mm)`: pins `mm`'s ASID (allocating one if its
    /// generation is old) so that it survives rollovers, for a device that
    /// shares the address space. Returns the user ASID, or `None` when too
    /// many are pinned. Runs with `cpu_asid_lock` held (outside the step
    /// model: it is called by set-up code, not by a scheduled task).
    pub fn context_get(&self, w: &World, mm: MmId) -> Option<Asid> {
        let mut g = self.st.borrow_mut();
        let st = &mut *g;
        let bits = self.bits;
        if let Some(n) = st.pins.get_mut(&mm) {
            *n += 1;
        } else {
            if st.pins.len() >= self.max_pinned(st.active.len()) {
                return None;
            }
            let mut id = w.k.borrow().mms[mm].context_id;
            if (id ^ *st.generation) >> bits != 0 {
                let (new, rolled) = self.new_context_for(st, id, false);
                if rolled {
                    w.stats.borrow_mut().asid_rollovers += 1;
                }
                if new & (self.first_version() - 1) != id & (self.first_version() - 1) || id == 0 {
                    w.policy.on_new_context(w, mm);
                }
                id = new;
                w.k.borrow_mut().mms[mm].context_id = id;
            }
            let idx = self.asid2idx(id);
            st.pinned_map[idx] = true;
            st.pins.insert(mm, 1);
        }
        drop(g);
        Some(w.user_asid(mm))
    }

    /// `arm64_mm_context_put(mm)`: drops one pin.
    pub fn context_put(&self, w: &World, mm: MmId) {
        let mut g = self.st.borrow_mut();
        let st = &mut *g;
        let Some(n) = st.pins.get_mut(&mm) else {
            return;
        };
        *n -= 1;
        if *n == 0 {
            st.pins.remove(&mm);
            let id = w.k.borrow().mms[mm].context_id;
            let idx = self.asid2idx(id);
            st.pinned_map[idx] = false;
        }
    }
}

impl AsidAllocator for ReservedAsid {
    fn init(&self, w: &World) {
        let n = w.ncpus();
        let mut map = vec![false; self.nr_idx()];
        map[0] = true;
        {
            let mut st = self.st.borrow_mut();
            *st.generation = self.first_version();
            *st.map = map;
            *st.cursor = 1;
            st.active.fill(n, 0);
            st.reserved.fill(n, 0);
            *st.flush_pending = CpuMask::new(n);
            *st.pinned_map = vec![false; self.nr_idx()];
            st.pins.clear();
        }
        self.lock.set(w.new_lock("cpu_asid_lock"));
    }

    fn asid_of(&self, w: &World, mm: MmId) -> Asid {
        self.fns.asid(w.k.borrow().mms[mm].context_id, self.bits) as Asid
    }

    fn check_and_switch_context<'a>(&'a self, ctx: &'a Ctx, mm: MmId) -> KFuture<'a, ()> {
        Box::pin(async move {
            let w = &ctx.w;
            let cpu = ctx.cpu();
            let bits = self.bits;
            let same_gen = |id: u64, gen: u64| (id ^ gen) >> bits == 0;
            // asid = atomic64_read(&mm->context.id); old_active_asid =
            // atomic64_read(this_cpu_ptr(&active_asids)) (one step).
            let (id, old, gen) = ctx
                .atomic_read(|| {
                    let st = self.st.borrow();
                    let id = w.k.borrow().mms[mm].context_id;
                    (id, st.active[cpu], *st.generation)
                })
                .await;
            let mut fast = false;
            if (old != 0 || !self.fns.fast_path_checks_active()) && same_gen(id, gen) {
                // atomic64_cmpxchg_relaxed(this_cpu_ptr(&active_asids), old, asid)
                fast = ctx
                    .cmpxchg(|| {
                        let mut st = self.st.borrow_mut();
                        self.fns.cmpxchg_active_asid(&mut st.active[cpu], old, id)
                    })
                    .await;
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

impl ReservedAsid {
    /// The slow path of `check_and_switch_context()`, under
    /// `cpu_asid_lock`: a new context if the generation is old, the local
    /// flush a rollover left pending for this CPU, then `active_asids[cpu]`.
    async fn check_and_switch_context_slow(&self, ctx: &Ctx, mm: MmId) {
        let _f = ctx.func(crate::label!("check_and_switch_context"));
        let w = &ctx.w;
        let cpu = ctx.cpu();
        let bits = self.bits;
        ctx.spin_lock(self.lock.get()).await;
        let mut id = w.k.borrow().mms[mm].context_id;
        let (flush, new_ctx) = {
            let mut g = self.st.borrow_mut();
            let st = &mut *g;
            let mut new_ctx = false;
            if (id ^ *st.generation) >> bits != 0 {
                let pinned = st.pins.contains_key(&mm);
                let (new, rolled) = self.new_context_for(st, id, pinned);
                if rolled {
                    w.stats.borrow_mut().asid_rollovers += 1;
                }
                // A fresh number (the `set_asid:` path) unless the mm kept
                // its old one into the new generation.
                new_ctx = id == 0 || (new ^ id) & (self.first_version() - 1) != 0;
                id = new;
            }
            // cpumask_test_and_clear_cpu(cpu, &tlb_flush_pending)
            (st.flush_pending.test_and_clear(cpu), new_ctx)
        };
        w.k.borrow_mut().mms[mm].context_id = id;
        if new_ctx {
            w.policy.on_new_context(w, mm);
        }
        if flush {
            local_flush_tlb_all(ctx).await;
        }
        // atomic64_set(this_cpu_ptr(&active_asids), asid): that slot only.
        ctx.atomic_set(|| self.st.borrow_mut().active[cpu] = id).await;
        ctx.spin_unlock(self.lock.get()).await;
    }
}

/// The registry entry of `arm64-asid-reserved`.
pub const ENTRY: AllocatorEntry = AllocatorEntry {
    name: "arm64-asid-reserved",
    description: "Linux arm64 allocator: generations, reserved ASIDs, lockless fast path, no IPIs",
    arch: Some(crate::config::Arch::Arm64),
    breaks: None,
    new: |k, bits| Box::new(ReservedAsid::new(bits, k.kpti)),
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::cpu::cpuid;

    fn state(a: &ReservedAsid, ncpus: usize) -> State {
        let mut map = vec![false; a.nr_idx()];
        map[0] = true;
        let mut st = State::default();
        *st.generation = a.first_version();
        *st.map = map;
        *st.cursor = 1;
        st.active.fill(ncpus, 0);
        st.reserved.fill(ncpus, 0);
        *st.flush_pending = CpuMask::new(ncpus);
        *st.pinned_map = vec![false; a.nr_idx()];
        st
    }

    #[test]
    fn a_pinned_asid_survives_rollovers_and_is_never_reused() {
        let a = ReservedAsid::new(3, false); // ASIDs 1..=7
        let mut st = state(&a, 2);
        let (pinned, _) = a.new_context(&mut st, 0);
        let idx = a.asid2idx(pinned);
        st.pinned_map[idx] = true; // what context_get does
        st.pins.insert(MmId::new(7), 1);
        let mut rollovers = 0;
        for _ in 0..40 {
            let (new, rolled) = a.new_context(&mut st, 0);
            rollovers += u32::from(rolled);
            assert_ne!(new & 7, pinned & 7, "a pinned ASID is never handed out");
        }
        assert!(rollovers >= 3, "{rollovers} rollovers");
        // The pinned mm comes back in a later generation with its number.
        let (back, _) = a.new_context_for(&mut st, pinned, true);
        assert_eq!(back & 7, pinned & 7);
        assert!(back >> 3 > pinned >> 3, "new generation");
    }

    #[test]
    fn rollover_keeps_running_asids_and_flushes_everywhere() {
        let a = ReservedAsid::new(2, false); // ASIDs 1..=3
        let mut st = state(&a, 2);
        let ids: Vec<u64> = (0..3).map(|_| a.new_context(&mut st, 0).0).collect();
        assert_eq!(ids.iter().map(|i| i & 3).collect::<Vec<_>>(), vec![1, 2, 3]);
        st.active[cpuid(0)] = ids[1]; // CPU0 runs the mm with ASID 2
        let (new, rolled) = a.new_context(&mut st, 0);
        assert!(rolled);
        assert_eq!(new >> 2, 2, "second generation");
        assert_ne!(new & 3, 2, "ASID 2 is reserved for the running mm");
        assert!(st.flush_pending.test(cpuid(0)) && st.flush_pending.test(cpuid(1)));
        // The running mm keeps its number in the new generation.
        let (kept, _) = a.new_context(&mut st, ids[1]);
        assert_eq!(kept, (2 << 2) | 2);
    }

    #[test]
    fn kpti_hands_out_even_asids() {
        let a = ReservedAsid::new(4, true);
        let mut st = state(&a, 1);
        for _ in 0..7 {
            let (id, _) = a.new_context(&mut st, 0);
            assert_eq!(id & 1, 0);
            assert_ne!(id & 15, 0);
        }
    }
}
