//! A parsed herd AArch64 litmus test: initial state, per-thread code,
//! final condition. Names follow herd's (`exists`, `fault(P0:L0,x)`) and
//! the Arm ARM's (`TLBI VAAE1IS`, `DSB ISH`).

use std::collections::BTreeMap;

/// An interned name: a variable (`x`), or a label (`L0`).
pub type Sym = u16;

/// A general-purpose register number, 0..=30; [`ZR`] is `XZR`/`WZR`.
pub type Reg = u8;

/// The zero register (`XZR`, `WZR`): reads 0, writes are dropped.
pub const ZR: Reg = 31;

/// A page-table entry value as herd writes it, `(oa:PA(x), valid:0)`:
/// fields not written take herd's defaults (`valid:1, af:1, db:1,
/// dbm:0, el0:1`; herdtools7 `lib/AArch64PteVal.ml`, `prot_default`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PteVal {
    /// Output address: the physical page of a variable (`PA(x)`,
    /// `phy_x`); `None` when the value does not say (then the entry it
    /// is stored in keeps mapping its own variable's page).
    pub oa: Option<Sym>,
    /// Descriptor valid bit.
    pub valid: u8,
    /// Access flag.
    pub af: u8,
    /// Dirty bit (`AP[2]` clear: writable).
    pub db: u8,
    /// Dirty-bit modifier (hardware may set `db`, with FEAT_HAFDBS HD).
    pub dbm: u8,
    /// EL0 access permitted (`AP[1]`).
    pub el0: u8,
}

impl PteVal {
    /// herd's default entry mapping `oa`.
    pub fn default_for(oa: Option<Sym>) -> Self {
        PteVal {
            oa,
            valid: 1,
            af: 1,
            db: 1,
            dbm: 0,
            el0: 1,
        }
    }
}

/// A value: in a register, in memory, or in the final condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Val {
    /// An integer.
    Int(i64),
    /// A virtual address in a variable's page: the variable and a byte
    /// offset from its start (`x` is `Va(x, 0)`; element `i` of an array
    /// of `n`-byte elements, `x[i]`, is `Va(x, i * n)`), below the page
    /// size.
    Va(Sym, u16),
    /// A variable's virtual page number (`x >> 12`, the operand of
    /// `TLBI VAAE1IS, X9`).
    Page(Sym),
    /// The address of a variable's page-table entry (`PTE(x)`, `pte_x`).
    PteAddr(Sym),
    /// A variable's physical address (`PA(x)`, `phy_x`).
    Pa(Sym),
    /// A page-table entry value.
    Pte(PteVal),
    /// A code address (`ADR X9, L1`; `label:"P1:L1"`): thread, label.
    Label(u8, Sym),
}

/// A second operand: register or immediate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operand {
    /// A register.
    Reg(Reg),
    /// An immediate (`#1`).
    Imm(i64),
}

/// An addressing mode: `[Xn]`, `[Xn, #i]`, `[Xn, Xm]`,
/// `[Xn, Xm, LSL #s]`, `[Xn, Wm, SXTW]`, `[Xn, Wm, SXTW #s]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Addr {
    /// Base register.
    pub base: Reg,
    /// Offset added to the base (bytes).
    pub offset: Option<Operand>,
    /// How a register offset is extended before the shift.
    pub extend: Extend,
    /// Left shift of a register offset (`LSL #2`, `SXTW #3`): 0, or the
    /// log2 of the access size in bytes, as the Arm ARM allows.
    pub shift: u8,
}

impl Addr {
    /// `[base]`.
    pub fn of(base: Reg) -> Self {
        Addr {
            base,
            offset: None,
            extend: Extend::None,
            shift: 0,
        }
    }
}

/// The extension of a register offset (`[Xn, Wm, SXTW]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extend {
    /// An X register offset, used as it is (or `LSL`).
    None,
    /// `SXTW`: the W register's value sign-extended.
    Sxtw,
    /// `UXTW`: the W register's value zero-extended.
    Uxtw,
}

/// A two-operand arithmetic or logical operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AluOp {
    /// `ADD`.
    Add,
    /// `SUB`.
    Sub,
    /// `EOR`.
    Eor,
    /// `AND`.
    And,
    /// `ORR`.
    Orr,
    /// `BIC`.
    Bic,
    /// `LSR`.
    Lsr,
    /// `LSL`.
    Lsl,
}

/// A condition code (`EQ`, `NE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CondCode {
    /// Equal.
    Eq,
    /// Not equal.
    Ne,
}

/// An atomic read-modify-write operation on memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RmwOp {
    /// `SWP`: store the source, return the old value.
    Swp,
    /// `LDSET`/`STSET`: bitwise OR.
    Set,
    /// `LDCLR`/`STCLR`: bit clear.
    Clr,
}

/// What a `DSB` or `DMB` orders: herd's `SY`, `ISH`, `LD`, `ST`, ...
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BarrierKind {
    /// Loads and stores, inner shareable or full system (`SY`, `ISH`,
    /// `OSH`, or no option).
    Full,
    /// Loads only (`LD`, `ISHLD`, ...).
    Ld,
    /// Stores only (`ST`, `ISHST`, ...).
    St,
    /// Non-shareable (`NSH`).
    Nsh,
}

/// A TLB maintenance operation (Arm ARM C5.5, `TLBI <op>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TlbiOp {
    /// What it invalidates.
    pub scope: TlbiKind,
    /// Broadcast to the inner-shareable domain (`...IS`).
    pub shareable: bool,
}

/// The invalidation scope of a TLBI at EL1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlbiKind {
    /// `VAE1`/`VAAE1` (by VA; the tests run one address space, so
    /// "any ASID" and "the current ASID" name the same entries).
    Va,
    /// `VALE1`/`VAALE1`: by VA, last level only.
    VaLast,
    /// `ASIDE1`: one ASID.
    Asid,
    /// `VMALLE1`: everything at EL1&0.
    All,
}

/// One instruction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Instr {
    /// `LDR`, `LDAR`, `LDAPR`: load (acquire forms are plain loads on the
    /// model's sequentially consistent memory).
    Ldr {
        /// Destination.
        rt: Reg,
        /// Address.
        addr: Addr,
        /// Access size in bytes: 4 (`W` register) or 8 (`X`).
        bytes: u8,
    },
    /// `STR`, `STLR`: store.
    Str {
        /// Source.
        rt: Reg,
        /// Address.
        addr: Addr,
        /// Access size in bytes: 4 (`W` register) or 8 (`X`).
        bytes: u8,
    },
    /// `SWP`, `LDSET`, `LDCLR`, `STCLR` and their ordering forms.
    Rmw {
        /// Operation.
        op: RmwOp,
        /// Source operand.
        rs: Reg,
        /// Destination of the old value ([`ZR`] for `ST<op>`).
        rt: Reg,
        /// Address.
        addr: Addr,
        /// Access size in bytes: 4 (`W` registers) or 8 (`X`).
        bytes: u8,
    },
    /// `CAS`, `CASAL`: compare `rs` with memory, store `rt` if equal;
    /// `rs` receives the old value.
    Cas {
        /// Compare value, then old value.
        rs: Reg,
        /// New value.
        rt: Reg,
        /// Address.
        addr: Addr,
        /// Access size in bytes: 4 (`W` registers) or 8 (`X`).
        bytes: u8,
    },
    /// `MOV`.
    Mov {
        /// Destination.
        rd: Reg,
        /// Source.
        src: Operand,
    },
    /// `ADD`, `EOR`, `LSR`, ...
    Alu {
        /// Operation.
        op: AluOp,
        /// Destination.
        rd: Reg,
        /// First operand.
        rn: Reg,
        /// Second operand.
        op2: Operand,
    },
    /// `CMP`: sets the flags.
    Cmp {
        /// First operand.
        rn: Reg,
        /// Second operand.
        op2: Operand,
    },
    /// `CSEL rd, rn, rm, cond`.
    Csel {
        /// Destination.
        rd: Reg,
        /// If the condition holds.
        rn: Reg,
        /// Otherwise.
        rm: Reg,
        /// Condition.
        cond: CondCode,
    },
    /// `CSET rd, cond`.
    Cset {
        /// Destination.
        rd: Reg,
        /// Condition.
        cond: CondCode,
    },
    /// `CBZ`/`CBNZ rt, label`.
    Cbz {
        /// Tested register.
        rt: Reg,
        /// Branch when non-zero (`CBNZ`).
        nonzero: bool,
        /// Target.
        label: Sym,
    },
    /// `B label`, `B.cond label`.
    B {
        /// Condition (`None`: always).
        cond: Option<CondCode>,
        /// Target.
        label: Sym,
    },
    /// `ADR rd, label`.
    Adr {
        /// Destination.
        rd: Reg,
        /// Label.
        label: Sym,
    },
    /// `MSR ELR_EL1, rt`: where the fault handler's `ERET` returns.
    MsrElr {
        /// Source.
        rt: Reg,
    },
    /// `ERET` from the fault handler.
    Eret,
    /// `DMB`: a no-op on sequentially consistent memory.
    Dmb(BarrierKind),
    /// `DSB`.
    Dsb(BarrierKind),
    /// `ISB`.
    Isb,
    /// `TLBI op{, Xt}`.
    Tlbi {
        /// Operation.
        op: TlbiOp,
        /// Address operand (page number), for the by-VA forms.
        rt: Option<Reg>,
    },
    /// `NOP`.
    Nop,
}

/// One thread's code (or its fault handler's, `P1.F`).
#[derive(Debug, Clone)]
pub struct Code {
    /// Instructions in order.
    pub instrs: Vec<Instr>,
    /// Source line of each instruction.
    pub lines: Vec<usize>,
    /// Label to the index of the instruction it precedes (the end of
    /// code is `instrs.len()`).
    pub labels: BTreeMap<Sym, usize>,
}

/// One thread.
#[derive(Debug, Clone)]
pub struct Thread {
    /// Its code.
    pub code: Code,
    /// Its fault handler (`Pn.F` column), if the test gives one.
    pub handler: Option<Code>,
}

/// A location an initial value or the final condition names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Loc {
    /// Register `reg` of thread `proc`.
    Reg(u8, Reg),
    /// Data in a variable's physical page (`x`, `[x]`, `phy_x`: byte 0;
    /// an array's element `x[i]`: byte `i *` its element size), the
    /// variable and the byte offset.
    Data(Sym, u16),
    /// A variable's page-table entry (`pte_x`, `[PTE(x)]`).
    Pte(Sym),
}

/// The kind of MMU fault a `fault(...)` atom may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    /// Translation fault (invalid descriptor).
    Translation,
    /// Access-flag fault (`af:0`, no hardware update).
    AccessFlag,
    /// Permission fault (a store through an entry with `db:0`).
    Permission,
}

/// `fault(P0:L0,x,MMU:Translation)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultAtom {
    /// Thread.
    pub proc: u8,
    /// Label of the faulting instruction, if named.
    pub label: Option<Sym>,
    /// Variable accessed, if named.
    pub var: Option<Sym>,
    /// Kind, if named.
    pub kind: Option<FaultKind>,
}

/// A final condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cond {
    /// Always true.
    True,
    /// `loc = value`.
    Eq(Loc, Val),
    /// A fault atom.
    Fault(FaultAtom),
    /// `~c`.
    Not(Box<Cond>),
    /// `c /\ d`.
    And(Vec<Cond>),
    /// `c \/ d`.
    Or(Vec<Cond>),
}

/// The quantifier of the final condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quant {
    /// `exists c`: is some final state `c`?
    Exists,
    /// `~exists c`: is no final state `c`?
    NotExists,
    /// `forall c`: is every final state `c`?
    Forall,
}

/// A parsed test.
#[derive(Debug, Clone)]
pub struct Test {
    /// The name on the first line.
    pub name: String,
    /// `key=value` lines between the name and the initial state
    /// (`Variant=vmsa`, `TTHM=HA`).
    pub header: Vec<(String, String)>,
    /// Initial values.
    pub init: Vec<(Loc, Val)>,
    /// Threads, by number.
    pub threads: Vec<Thread>,
    /// Quantifier.
    pub quant: Quant,
    /// Condition.
    pub cond: Cond,
    /// Names of the interned symbols, by [`Sym`].
    pub syms: Vec<String>,
    /// The symbols used as variables (addresses), sorted.
    pub vars: Vec<Sym>,
    /// The variables declared as arrays (`int x[3]={1,2,3}`), in the
    /// order declared; every other variable holds one value at byte 0.
    pub arrays: Vec<Array>,
}

/// An array location: `n` elements of one integer type laid end to end
/// from byte 0 of the variable's page (herd: `int x[3]`, element `i` at
/// `x + i * sizeof(int)`; herdtools7 `herd/archExtra_herd.ml`,
/// `build_state`). The whole array sits in its one page, so one
/// descriptor, `PTE(x)`, translates every element.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Array {
    /// The variable.
    pub var: Sym,
    /// The element type as written (`int`, `int64_t`, `uint32_t`).
    pub ty: String,
    /// Bytes an element: 4 or 8 (herdtools7 `lib/testType.ml`,
    /// `size_of`: `int` and `long` are 4).
    pub elem_bytes: u8,
    /// Initial values, one per element (0 where the test gives none).
    pub init: Vec<Val>,
}

impl Array {
    /// Elements.
    pub fn len(&self) -> usize {
        self.init.len()
    }

    /// Never: an array has at least one element (herd's grammar).
    pub fn is_empty(&self) -> bool {
        self.init.is_empty()
    }

    /// The byte offset of element `i`.
    pub fn offset_of(&self, i: usize) -> u16 {
        (i * usize::from(self.elem_bytes)) as u16
    }

    /// The element at byte `offset`, if one starts there.
    pub fn index_at(&self, offset: u16) -> Option<usize> {
        let b = u16::from(self.elem_bytes);
        let i = usize::from(offset / b);
        (offset.is_multiple_of(b) && i < self.len()).then_some(i)
    }
}

impl Test {
    /// A symbol's name.
    pub fn sym(&self, s: Sym) -> &str {
        &self.syms[s as usize]
    }

    /// Variable `v`'s declaration, if it is an array.
    pub fn array(&self, v: Sym) -> Option<&Array> {
        self.arrays.iter().find(|a| a.var == v)
    }
}
