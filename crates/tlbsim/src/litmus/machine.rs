//! A litmus test's threads as steps on tlbsim's hardware model ([`Hw`]):
//! each thread is a CPU with its own TLB and walk cache, all running one
//! address space (ASID 1) whose page tables hold one leaf entry per test
//! variable. Loads and stores translate through [`Hw::access`] (TLB
//! lookup, walk, fault on an invalid entry); stores to `PTE(x)` write
//! the descriptor the walker reads; `TLBI ...IS` is a DVM operation in
//! flight ([`Hw::tlbi_broadcast_scoped`]) that reaches each CPU when the
//! search says ([`Hw::dvm_apply`]), and `DSB ISH`/`DSB SY` completes the
//! executing CPU's own ([`Hw::dvm_apply_all`]), as tlbsim's step
//! semantics do (docs/model.md, "Hardware"). Data memory is sequentially
//! consistent: a step is atomic, and `DMB`, `ISB`, `DSB LD/ST/NSH` have
//! no effect on it.

use super::ast::*;
use super::parse::Unsupported;
use crate::config::builtin_profile;
use crate::hw::mem::{Desc, Perms, Pte, TableId, LEAF_LEVEL};
use crate::hw::tlb::{Asid, MmId, TlbiScope};
use crate::hw::{CpuId, Fault, Hw, Ttbr0};
use std::collections::{BTreeMap, BTreeSet};

mod elements;
use elements::{scaled, Width};

/// The ASID every thread runs under.
const ASID: Asid = 1;
/// The virtual address of variable 0; variable `s` is `s` pages above.
const VA_BASE: u64 = 0x4000_0000;
/// The frame of variable 0's physical page; variable `s`'s is `s` above.
const PFN_BASE: u64 = 0x100;

/// The virtual address of variable `s`.
pub fn va_of(s: Sym) -> u64 {
    VA_BASE + (u64::from(s) << 12)
}

/// Which hardware behaviours the run allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// TLBIs take effect. `false` replaces every TLBI by a no-op: the
    /// weakest TLB maintenance possible, used to classify an unreached
    /// outcome (`classify.rs`).
    pub tlbi: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options { tlbi: true }
    }
}

/// A choice the search makes: the next step of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Thread `t` executes its next instruction.
    Step(u8),
    /// In-flight broadcast TLBI `op` reaches CPU `cpu`.
    Deliver {
        /// In-flight id ([`Hw::inflight`]).
        op: usize,
        /// Target.
        cpu: u8,
    },
    /// CPU `cpu` walks variable `var`'s page speculatively and caches the
    /// leaf (the architecture allows a fill at any time).
    Fill {
        /// CPU.
        cpu: u8,
        /// Variable.
        var: Sym,
    },
    /// CPU `cpu` drops its cached leaf for `var` (a TLB may evict any
    /// entry at any time).
    Evict {
        /// CPU.
        cpu: u8,
        /// Variable.
        var: Sym,
    },
}

/// A run cannot go on: the test uses something the model does not
/// give meaning to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunError {
    /// Why.
    pub why: Unsupported,
    /// What, in words.
    pub message: String,
}

fn run_err(why: Unsupported, message: impl Into<String>) -> RunError {
    RunError {
        why,
        message: message.into(),
    }
}

/// One fault a thread took.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FaultRec {
    /// Thread.
    pub proc: u8,
    /// Index of the faulting instruction in the thread's code.
    pub pc: usize,
    /// Variable accessed.
    pub var: Sym,
    /// Kind.
    pub kind: FaultKind,
}

/// One thread's registers and position.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ThreadState {
    /// Next instruction of the thread's code.
    pub pc: usize,
    /// Next instruction of the fault handler, while it runs.
    pub handler_pc: Option<usize>,
    /// `ELR_EL1`: where `ERET` returns (an index in the thread's code).
    pub elr: Option<usize>,
    /// X0..X30.
    pub regs: [Val; 31],
    /// The last `CMP` found its operands equal.
    pub flags_eq: Option<bool>,
    /// Finished (end of code, or a fault with no handler: precise faults
    /// end the thread, as herd's and litmus7's `PRECISE` handling jumps
    /// to the end of the code).
    pub done: bool,
}

/// The state of a run.
#[derive(Debug, Clone)]
pub struct State {
    /// The machine: TLBs, walk caches, page tables, TLBIs in flight.
    pub hw: Hw,
    /// Threads.
    pub threads: Vec<ThreadState>,
    /// Data (`Loc::Data`) and descriptors (`Loc::Pte`).
    pub mem: BTreeMap<Loc, Val>,
    /// Faults taken.
    pub faults: BTreeSet<FaultRec>,
    /// Next PTE version.
    next_version: u64,
    /// The leaf table holding every variable's entry.
    leaf_table: TableId,
}

/// Heap bytes of one CPU of the hardware model, an estimate: its
/// `CpuHw` and the 16 leaf and 16 walk-cache slots [`Machine::initial`]
/// gives its TLB (48 bytes a slot at most).
const CPU_HEAP_BYTES: u64 = std::mem::size_of::<crate::hw::CpuHw>() as u64 + 32 * 48;
/// Heap bytes of the page tables and physical-memory bookkeeping, an
/// estimate: one table per level and their entries.
const TABLES_HEAP_BYTES: u64 = 8 << 10;

impl State {
    /// An estimate of the heap bytes this state owns, which a clone
    /// allocates again: threads, memory, faults, and the hardware
    /// model's CPUs, page tables and TLBIs in flight. The search counts
    /// it for every state on its stack (`search.rs`).
    pub fn approx_heap_bytes(&self) -> u64 {
        let n = self.threads.len() as u64;
        let entry = (std::mem::size_of::<(Loc, Val)>() + 16) as u64;
        n * std::mem::size_of::<ThreadState>() as u64
            + self.mem.len() as u64 * entry
            + self.faults.len() as u64 * 2 * std::mem::size_of::<FaultRec>() as u64
            + self.hw.cpus.len() as u64 * CPU_HEAP_BYTES
            + self.hw.inflight.len() as u64 * 64
            + TABLES_HEAP_BYTES
    }

    /// Register `r` of thread `ti` (`XZR` reads 0).
    fn reg(&self, ti: usize, r: Reg) -> Val {
        if r == ZR {
            Val::Int(0)
        } else {
            self.threads[ti].regs[r as usize]
        }
    }

    /// Writes register `r` of thread `ti` (writes to `XZR` are dropped).
    fn set(&mut self, ti: usize, r: Reg, v: Val) {
        if r != ZR {
            self.threads[ti].regs[r as usize] = v;
        }
    }
}

/// A test ready to run.
pub struct Machine<'t> {
    /// The test.
    pub test: &'t Test,
    /// What the hardware may do.
    pub opts: Options,
}

impl<'t> Machine<'t> {
    /// A machine for `test`.
    pub fn new(test: &'t Test, opts: Options) -> Self {
        Machine { test, opts }
    }

    /// The initial state: one CPU per thread, page tables for every
    /// variable, initial values in registers and memory.
    pub fn initial(&self) -> Result<State, RunError> {
        let t = self.test;
        let mut p = builtin_profile("ampere-32").expect("built-in profile");
        p.topology.cpus = t.threads.len() as u32;
        p.topology.sockets = 1;
        p.topology.dies_per_socket = 1;
        p.topology.cpus_per_cluster = 1;
        // Fully associative and larger than any test's variables: no
        // capacity eviction (eviction is the search's `Evict` choice).
        p.tlb.tlb_entries = 16;
        p.tlb.tlb_ways = 16;
        p.tlb.walk_cache_entries = 16;
        if t.vars.len() > 16 {
            return Err(run_err(Unsupported::Instruction, "more than 16 variables"));
        }
        let mut hw = Hw::new(&p.hw_params(crate::hw::mem::Granule::K4));
        let (pgd, table) = page_tables(&mut hw);
        let mut st = State {
            hw,
            threads: Vec::new(),
            mem: BTreeMap::new(),
            faults: BTreeSet::new(),
            next_version: 1,
            leaf_table: table,
        };
        for &v in &t.vars {
            st.mem.insert(Loc::Data(v, 0), Val::Int(0));
            st.mem
                .insert(Loc::Pte(v), Val::Pte(PteVal::default_for(Some(v))));
        }
        for a in &t.arrays {
            for (i, &val) in a.init.iter().enumerate() {
                st.mem.insert(Loc::Data(a.var, a.offset_of(i)), val);
            }
        }
        let mut regs: Vec<[Val; 31]> = vec![[Val::Int(0); 31]; t.threads.len()];
        for &(loc, val) in &t.init {
            match loc {
                Loc::Reg(p, r) => {
                    let th = regs.get_mut(p as usize).ok_or_else(|| {
                        run_err(Unsupported::Instruction, format!("init names thread {p}"))
                    })?;
                    if r != ZR {
                        th[r as usize] = val;
                    }
                }
                Loc::Pte(v) => {
                    let val = own_oa(val, v)?;
                    st.mem.insert(loc, val);
                }
                Loc::Data(..) => {
                    st.mem.insert(loc, val);
                }
            }
        }
        for &v in &t.vars {
            self.mirror_pte(&mut st, v);
        }
        for (cpu, r) in regs.into_iter().enumerate() {
            st.hw.set_ttbr0(
                cpu_of(cpu),
                Some(Ttbr0 {
                    mm: MmId::new(0),
                    pgd,
                    asid: ASID,
                }),
            );
            st.threads.push(ThreadState {
                pc: 0,
                handler_pc: None,
                elr: None,
                regs: r,
                flags_eq: None,
                done: t.threads[cpu].code.instrs.is_empty(),
            });
        }
        Ok(st)
    }

    /// Writes variable `v`'s descriptor, as memory holds it, into the
    /// page table the walker reads: a valid entry with the access flag
    /// set maps `oa` (read-only when `db` is 0: without hardware
    /// dirty-bit management a store to it takes a permission fault);
    /// anything else is no entry (translation and access-flag faults are
    /// never cached, Arm ARM D8.16).
    fn mirror_pte(&self, st: &mut State, v: Sym) {
        let Some(Val::Pte(p)) = st.mem.get(&Loc::Pte(v)).copied() else {
            unreachable!("descriptors hold descriptor values");
        };
        let idx = st.hw.granule.level_index(va_of(v), LEAF_LEVEL);
        let entries = &mut st.hw.mem.table_mut(st.leaf_table).entries;
        if p.valid == 1 && p.af == 1 {
            let pte = Pte {
                pfn: PFN_BASE + u64::from(p.oa.unwrap_or(v)),
                perms: if p.db == 1 { Perms::RW } else { Perms::R },
                version: st.next_version,
            };
            st.next_version += 1;
            entries.insert(idx, Desc::Page(pte));
        } else {
            entries.remove(&idx);
        }
    }

    /// Every choice available in `st`, in a fixed order.
    pub fn enabled(&self, st: &State) -> Vec<Action> {
        let mut out = Vec::new();
        for (t, th) in st.threads.iter().enumerate() {
            if !th.done {
                out.push(Action::Step(t as u8));
            }
        }
        if st.threads.iter().all(|t| t.done) {
            return out;
        }
        for (id, f) in st.hw.inflight.iter().enumerate() {
            if let Some(f) = f {
                // A CPU whose thread has finished makes no more accesses:
                // when the invalidation reaches it changes nothing.
                for cpu in f.pending.iter().filter(|&c| !st.threads[c.index()].done) {
                    out.push(Action::Deliver {
                        op: id,
                        cpu: cpu.index() as u8,
                    });
                }
            }
        }
        for cpu in 0..st.threads.len() {
            if st.threads[cpu].done {
                continue;
            }
            for &v in &self.test.vars {
                let vpn = va_of(v) >> st.hw.granule.page_shift();
                let cached = st.hw.cpus[cpu_of(cpu)]
                    .tlb
                    .leaf_entries_for(vpn)
                    .next()
                    .is_some();
                if cached {
                    out.push(Action::Evict {
                        cpu: cpu as u8,
                        var: v,
                    });
                } else if st.hw.read_pte(self.pgd(st), va_of(v)).is_some() {
                    out.push(Action::Fill {
                        cpu: cpu as u8,
                        var: v,
                    });
                }
            }
        }
        out
    }

    fn pgd(&self, st: &State) -> TableId {
        st.hw.cpus[CpuId::BOOT]
            .ttbr0()
            .expect("user tables installed")
            .pgd
    }

    /// Applies `a` to `st`.
    pub fn apply(&self, st: &mut State, a: Action) -> Result<(), RunError> {
        match a {
            Action::Step(t) => self.step(st, t),
            Action::Deliver { op, cpu } => {
                st.hw.dvm_apply(op, cpu_of(cpu.into()));
                Ok(())
            }
            Action::Fill { cpu, var } => {
                st.hw
                    .speculate(cpu_of(cpu.into()), va_of(var), &mut Vec::new());
                Ok(())
            }
            Action::Evict { cpu, var } => {
                let vpn = va_of(var) >> st.hw.granule.page_shift();
                st.hw.cpus[cpu_of(cpu.into())].tlb.remove(0, ASID, vpn);
                Ok(())
            }
        }
    }

    /// Thread `t` executes one instruction.
    fn step(&self, st: &mut State, t: u8) -> Result<(), RunError> {
        let ti = t as usize;
        let thread = &self.test.threads[ti];
        let th = &st.threads[ti];
        let (code, pc) = match th.handler_pc {
            Some(h) => (thread.handler.as_ref().expect("handler runs"), h),
            None => (&thread.code, th.pc),
        };
        let Some(ins) = code.instrs.get(pc).cloned() else {
            // The handler ended without ERET: the thread ends.
            st.threads[ti].done = true;
            return Ok(());
        };
        let in_handler = th.handler_pc.is_some();
        let mut next = pc + 1;
        let line = code.lines.get(pc).copied().unwrap_or(0);
        match self.exec(st, t, &ins, line, &mut next)? {
            Flow::Next => {}
            Flow::Fault(var, kind) => {
                st.faults.insert(FaultRec {
                    proc: t,
                    pc,
                    var,
                    kind,
                });
                let th = &mut st.threads[ti];
                if thread.handler.is_some() && !in_handler {
                    th.elr = Some(pc);
                    th.handler_pc = Some(0);
                } else {
                    th.done = true;
                }
                return Ok(());
            }
            Flow::Eret => {
                let th = &mut st.threads[ti];
                let back = th.elr.ok_or_else(|| {
                    run_err(Unsupported::ExceptionLevel, "ERET outside a fault handler")
                })?;
                th.handler_pc = None;
                th.pc = back;
                th.done = th.pc >= thread.code.instrs.len();
                return Ok(());
            }
        }
        let th = &mut st.threads[ti];
        if in_handler {
            th.handler_pc = Some(next);
        } else {
            th.pc = next;
            th.done = next >= thread.code.instrs.len();
        }
        Ok(())
    }

    /// A label's index in thread `t`'s code (or handler's, `handler`).
    fn label(&self, t: u8, handler: bool, l: Sym) -> Result<usize, RunError> {
        let th = &self.test.threads[t as usize];
        let code = if handler {
            th.handler.as_ref().unwrap_or(&th.code)
        } else {
            &th.code
        };
        code.labels.get(&l).copied().ok_or_else(|| {
            run_err(
                Unsupported::Instruction,
                format!("branch to unknown label {}", self.test.sym(l)),
            )
        })
    }

    /// Executes `ins` (on source line `line`) on thread `t`; `next` is
    /// the next instruction's index, which a taken branch changes.
    fn exec(
        &self,
        st: &mut State,
        t: u8,
        ins: &Instr,
        line: usize,
        next: &mut usize,
    ) -> Result<Flow, RunError> {
        let ti = t as usize;
        match *ins {
            Instr::Ldr { .. } | Instr::Str { .. } | Instr::Rmw { .. } | Instr::Cas { .. } => {
                return self.exec_memory(st, t, ins, line)
            }
            Instr::Mov { .. }
            | Instr::Alu { .. }
            | Instr::Cmp { .. }
            | Instr::Csel { .. }
            | Instr::Cset { .. } => self.exec_data(st, ti, ins, line)?,
            Instr::Cbz { rt, nonzero, label } => {
                let zero = st.reg(ti, rt) == Val::Int(0);
                if zero != nonzero {
                    *next = self.label(t, st.threads[ti].handler_pc.is_some(), label)?;
                }
            }
            Instr::B { cond, label } => {
                let take = match cond {
                    None => true,
                    Some(c) => self.holds(st, ti, c)?,
                };
                if take {
                    *next = self.label(t, st.threads[ti].handler_pc.is_some(), label)?;
                }
            }
            Instr::Adr { rd, label } => st.set(ti, rd, Val::Label(t, label)),
            Instr::MsrElr { rt } => {
                let target = match st.reg(ti, rt) {
                    Val::Label(p, l) if p == t => self.label(t, false, l)?,
                    v => {
                        return Err(run_err(
                            Unsupported::ExceptionLevel,
                            format!("ELR_EL1 set to {v:?}, not a label of the thread"),
                        ))
                    }
                };
                st.threads[ti].elr = Some(target);
            }
            Instr::Eret => return Ok(Flow::Eret),
            Instr::Dmb(_) | Instr::Isb | Instr::Nop => {}
            Instr::Dsb(BarrierKind::Full) => self.dsb_ish(st, cpu_of(ti)),
            Instr::Dsb(_) => {}
            Instr::Tlbi { op, rt } => self.tlbi(st, ti, op, rt)?,
        }
        Ok(Flow::Next)
    }

    /// Loads, stores and atomics (on source line `line`): translated
    /// accesses to variables, or physical accesses to descriptors.
    fn exec_memory(
        &self,
        st: &mut State,
        t: u8,
        ins: &Instr,
        line: usize,
    ) -> Result<Flow, RunError> {
        let ti = t as usize;
        let fault = |(var, k)| Ok(Flow::Fault(var, k));
        match *ins {
            Instr::Ldr { rt, addr, bytes } => {
                let a = self.address(st, ti, addr, line)?;
                match self.load(st, t, a, false, Width { bytes, line })? {
                    Ok(v) => st.set(ti, rt, v),
                    Err(f) => return fault(f),
                }
            }
            Instr::Str { rt, addr, bytes } => {
                let a = self.address(st, ti, addr, line)?;
                let v = st.reg(ti, rt);
                if let Err(f) = self.store(st, t, a, v, Width { bytes, line })? {
                    return fault(f);
                }
            }
            Instr::Rmw {
                op,
                rs,
                rt,
                addr,
                bytes,
            } => {
                let w = Width { bytes, line };
                let a = self.address(st, ti, addr, line)?;
                let old = match self.load(st, t, a, true, w)? {
                    Ok(v) => v,
                    Err(f) => return fault(f),
                };
                let src = st.reg(ti, rs);
                let new = match (op, old, src) {
                    (RmwOp::Swp, _, s) => s,
                    (RmwOp::Set, Val::Int(o), Val::Int(s)) => Val::Int(o | s),
                    (RmwOp::Clr, Val::Int(o), Val::Int(s)) => Val::Int(o & !s),
                    _ => {
                        return Err(run_err(
                            Unsupported::ValueArithmetic,
                            format!("{op:?} of {old:?} with {src:?}"),
                        ))
                    }
                };
                self.store(st, t, a, new, w)?.expect("translated above");
                st.set(ti, rt, old);
            }
            Instr::Cas {
                rs,
                rt,
                addr,
                bytes,
            } => {
                let w = Width { bytes, line };
                let a = self.address(st, ti, addr, line)?;
                let old = match self.load(st, t, a, true, w)? {
                    Ok(v) => v,
                    Err(f) => return fault(f),
                };
                if old == st.reg(ti, rs) {
                    let v = st.reg(ti, rt);
                    self.store(st, t, a, v, w)?.expect("translated above");
                }
                st.set(ti, rs, old);
            }
            _ => unreachable!("exec sends memory instructions only"),
        }
        Ok(Flow::Next)
    }

    /// Register moves, arithmetic, comparisons and conditional selects
    /// (on source line `line`).
    fn exec_data(
        &self,
        st: &mut State,
        ti: usize,
        ins: &Instr,
        line: usize,
    ) -> Result<(), RunError> {
        let operand = |st: &State, o: Operand| match o {
            Operand::Reg(r) => st.reg(ti, r),
            Operand::Imm(i) => Val::Int(i),
        };
        match *ins {
            Instr::Mov { rd, src } => {
                let v = operand(st, src);
                st.set(ti, rd, v);
            }
            Instr::Alu { op, rd, rn, op2 } => {
                let (a, b) = (st.reg(ti, rn), operand(st, op2));
                let v = match self.element_arith(op, a, b, line)? {
                    Some(v) => v,
                    None => alu(op, a, b, rn, op2)?,
                };
                st.set(ti, rd, v);
            }
            Instr::Cmp { rn, op2 } => {
                let eq = st.reg(ti, rn) == operand(st, op2);
                st.threads[ti].flags_eq = Some(eq);
            }
            Instr::Csel { rd, rn, rm, cond } => {
                let v = if self.holds(st, ti, cond)? {
                    st.reg(ti, rn)
                } else {
                    st.reg(ti, rm)
                };
                st.set(ti, rd, v);
            }
            Instr::Cset { rd, cond } => {
                let v = Val::Int(self.holds(st, ti, cond)? as i64);
                st.set(ti, rd, v);
            }
            _ => unreachable!("exec sends data instructions only"),
        }
        Ok(())
    }

    /// `TLBI op{, Xt}`: a broadcast put in flight to every CPU (`...IS`),
    /// or a local invalidation applied at once; nothing when the
    /// options remove TLBIs.
    fn tlbi(&self, st: &mut State, ti: usize, op: TlbiOp, rt: Option<Reg>) -> Result<(), RunError> {
        if !self.opts.tlbi {
            return Ok(());
        }
        let scope = match (op.scope, rt.map(|r| st.reg(ti, r))) {
            (TlbiKind::Va | TlbiKind::VaLast, Some(Val::Page(v))) => TlbiScope::Va {
                asid: ASID,
                va: va_of(v),
                last_level: op.scope == TlbiKind::VaLast,
            },
            (TlbiKind::Asid, _) => TlbiScope::Asid(ASID),
            (TlbiKind::All, _) => TlbiScope::All,
            (_, v) => {
                return Err(run_err(
                    Unsupported::ValueArithmetic,
                    format!("TLBI by VA with operand {v:?} (not a page number)"),
                ))
            }
        };
        if op.shareable {
            st.hw.tlbi_broadcast_scoped(cpu_of(ti), scope);
        } else {
            st.hw.tlbi_local(cpu_of(ti), scope);
        }
        Ok(())
    }

    /// `DSB ISH`/`DSB SY`: every broadcast TLBI this CPU issued reaches
    /// its remaining targets before the barrier completes.
    fn dsb_ish(&self, st: &mut State, cpu: CpuId) {
        let mine: Vec<usize> = (0..st.hw.inflight.len())
            .filter(|&id| matches!(&st.hw.inflight[id], Some(f) if f.issuer == cpu))
            .collect();
        for id in mine {
            st.hw.dvm_apply_all(id);
        }
        st.hw.cpus[cpu].dvm_since_dsb = false;
        st.hw.take_dvm_reach(cpu);
    }

    fn holds(&self, st: &State, ti: usize, c: CondCode) -> Result<bool, RunError> {
        let eq = st.threads[ti]
            .flags_eq
            .ok_or_else(|| run_err(Unsupported::Instruction, "condition read before any CMP"))?;
        Ok(match c {
            CondCode::Eq => eq,
            CondCode::Ne => !eq,
        })
    }

    /// The address an addressing mode names: a variable's VA or its
    /// descriptor's address. An offset must be zero (address
    /// dependencies add `EOR`'s zero) except into an array, where it
    /// moves the address within the array's page; a register offset is
    /// extended and shifted as the mode says.
    fn address(&self, st: &State, ti: usize, a: Addr, line: usize) -> Result<Val, RunError> {
        let base = st.reg(ti, a.base);
        let off = match a.offset {
            None => Val::Int(0),
            Some(Operand::Imm(i)) => Val::Int(i),
            Some(Operand::Reg(r)) => scaled(st.reg(ti, r), a),
        };
        match (base, off) {
            (b @ (Val::Va(..) | Val::PteAddr(_)), Val::Int(0)) => Ok(b),
            (Val::Va(v, o), Val::Int(k)) if self.test.array(v).is_some() => {
                self.offset_va(v, o, k, line)
            }
            _ => Err(run_err(
                Unsupported::ValueArithmetic,
                format!("access to address {base:?} + {off:?}"),
            )),
        }
    }

    /// Translates `va` for thread `t`: the variable whose page the
    /// translation maps, or the fault.
    fn translate(
        &self,
        st: &mut State,
        t: u8,
        var: Sym,
        write: bool,
    ) -> Result<Sym, (Sym, FaultKind)> {
        let cpu = cpu_of(t.into());
        let va = va_of(var);
        match st.hw.access(cpu, va, write, &mut Vec::new()).0 {
            Ok(()) => {
                let vpn = va >> st.hw.granule.page_shift();
                let e = st.hw.cpus[cpu]
                    .tlb
                    .lookup(0, ASID, vpn)
                    .expect("a successful access leaves its leaf cached");
                Ok((e.pfn - PFN_BASE) as Sym)
            }
            Err(Fault::Permission) => Err((var, FaultKind::Permission)),
            Err(Fault::Translation) => {
                let kind = match st.mem.get(&Loc::Pte(var)) {
                    Some(Val::Pte(p)) if p.valid == 1 && p.af == 0 => FaultKind::AccessFlag,
                    _ => FaultKind::Translation,
                };
                Err((var, kind))
            }
        }
    }

    /// A load (or the read of a read-modify-write, `write`) of `w`.
    fn load(&self, st: &mut State, t: u8, a: Val, write: bool, w: Width) -> Access<Val> {
        match a {
            Val::Va(v, off) => {
                self.check_element(v, off, w, None)?;
                Ok(match self.translate(st, t, v, write) {
                    Ok(pa) => {
                        self.check_element(pa, off, w, Some(v))?;
                        Ok(st.mem[&Loc::Data(pa, off)])
                    }
                    Err(f) => Err(f),
                })
            }
            Val::PteAddr(v) => Ok(Ok(st.mem[&Loc::Pte(v)])),
            _ => unreachable!("address() returns addresses"),
        }
    }

    /// A store of `w`.
    fn store(&self, st: &mut State, t: u8, a: Val, v: Val, w: Width) -> Access<()> {
        match a {
            Val::Va(var, off) => {
                self.check_element(var, off, w, None)?;
                Ok(match self.translate(st, t, var, true) {
                    Ok(pa) => {
                        self.check_element(pa, off, w, Some(var))?;
                        st.mem.insert(Loc::Data(pa, off), v);
                        Ok(())
                    }
                    Err(f) => Err(f),
                })
            }
            Val::PteAddr(var) => {
                let v = own_oa(v, var)?;
                st.mem.insert(Loc::Pte(var), v);
                self.mirror_pte(st, var);
                Ok(Ok(()))
            }
            _ => unreachable!("address() returns addresses"),
        }
    }

    /// Is every thread finished?
    pub fn is_final(&self, st: &State) -> bool {
        st.threads.iter().all(|t| t.done)
    }

    /// Does the final state `st` satisfy `c`?
    pub fn eval(&self, st: &State, c: &Cond) -> bool {
        match c {
            Cond::True => true,
            Cond::Eq(Loc::Reg(p, r), v) => st.reg(*p as usize, *r) == *v,
            Cond::Eq(loc @ Loc::Pte(x), v) => {
                let want = own_oa(*v, *x).unwrap_or(*v);
                st.mem.get(loc) == Some(&want)
            }
            Cond::Eq(loc, v) => st.mem.get(loc) == Some(v),
            Cond::Fault(f) => st.faults.iter().any(|r| {
                r.proc == f.proc
                    && f.var.is_none_or(|v| v == r.var)
                    && f.kind.is_none_or(|k| k == r.kind)
                    && f.label.is_none_or(|l| {
                        self.test.threads[r.proc as usize].code.labels.get(&l) == Some(&r.pc)
                    })
            }),
            Cond::Not(c) => !self.eval(st, c),
            Cond::And(v) => v.iter().all(|c| self.eval(st, c)),
            Cond::Or(v) => v.iter().any(|c| self.eval(st, c)),
        }
    }
}

/// Allocates the address space's tables: one path from the top level to
/// one leaf table, which holds every variable's entry (their VAs share
/// the upper levels). Returns the top-level table and the leaf table.
fn page_tables(hw: &mut Hw) -> (TableId, TableId) {
    let g = hw.granule;
    let pgd = hw.mem.alloc_table(g.start_level());
    let mut table = pgd;
    for level in g.start_level()..LEAF_LEVEL {
        let next = hw.mem.alloc_table(level + 1);
        let idx = g.level_index(VA_BASE, level);
        hw.mem
            .table_mut(table)
            .entries
            .insert(idx, Desc::Table(next));
        table = next;
    }
    (pgd, table)
}

/// A descriptor stored in variable `v`'s entry: one that names no output
/// address keeps mapping `v`'s own page. Anything but a descriptor is
/// refused.
fn own_oa(val: Val, v: Sym) -> Result<Val, RunError> {
    match val {
        Val::Pte(mut p) => {
            p.oa.get_or_insert(v);
            Ok(Val::Pte(p))
        }
        other => Err(run_err(
            Unsupported::DescriptorForm,
            format!("{other:?} stored in a page-table entry"),
        )),
    }
}

/// The result of a memory access: the value (or nothing, for a store),
/// or the fault taken (variable, kind); an error when the test goes
/// where the model does not.
type Access<T> = Result<Result<T, (Sym, FaultKind)>, RunError>;

/// What an instruction did to control flow.
enum Flow {
    Next,
    Fault(Sym, FaultKind),
    Eret,
}

/// `rn op op2` on values: integers, and the address idioms the tests use
/// (`LSR X9, X3, #12` of a VA is its page number; `EOR W5, W4, W4` is 0
/// whatever W4 holds; adding 0 keeps an address).
fn alu(op: AluOp, a: Val, b: Val, rn: Reg, op2: Operand) -> Result<Val, RunError> {
    if op == AluOp::Eor && op2 == Operand::Reg(rn) {
        return Ok(Val::Int(0));
    }
    Ok(match (op, a, b) {
        (AluOp::Lsr, Val::Va(v, _), Val::Int(12)) => Val::Page(v),
        (AluOp::Add | AluOp::Orr | AluOp::Eor | AluOp::Sub, x, Val::Int(0)) => x,
        (AluOp::Add | AluOp::Orr | AluOp::Eor, Val::Int(0), x) => x,
        (op, Val::Int(x), Val::Int(y)) => Val::Int(match op {
            AluOp::Add => x.wrapping_add(y),
            AluOp::Sub => x.wrapping_sub(y),
            AluOp::Eor => x ^ y,
            AluOp::And => x & y,
            AluOp::Orr => x | y,
            AluOp::Bic => x & !y,
            AluOp::Lsr => ((x as u64) >> (y & 63)) as i64,
            AluOp::Lsl => x << (y & 63),
        }),
        _ => {
            return Err(run_err(
                Unsupported::ValueArithmetic,
                format!("{op:?} of {a:?} and {b:?}"),
            ))
        }
    })
}
/// The CPU that runs thread `t` (thread `i` runs on CPU `i`).
fn cpu_of(t: usize) -> CpuId {
    CpuId::from_index(t)
}
