//! The integration tests, one binary: scenarios on the library API, the
//! explorer, the seeds' policies, x86, and the table-driven mutant test.
//! Every test builds its experiment through [`common`].

mod bugs;
mod common;
mod explore;
mod filemap;
mod kernel;
mod kernel_4_18;
mod litmus_arrays;
mod litmus_export;
mod mutants;
mod replay;
mod scenarios;
mod seed000;
mod seed001;
mod seed003;
mod tick;
mod x86;
