//! Proofs about policy folders with the real cvc5 solver: `wardenctl
//! policy diff` (`diff.rs`) and invariants (`invariants.rs`: `policy
//! check` and a running monitor's loads).
//!
//! Needs cvc5 (`apt-get install cvc5`): without it these tests say
//! `skipped` and pass, unless `WARDEN_REQUIRE_SOLVER` is set (`.ci/run`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::process::{Command, Output};

mod diff;
mod invariants;

/// Whether cvc5 is here; a skip is a failure under `WARDEN_REQUIRE_SOLVER`.
fn solver_or_skip() -> bool {
    match warden_monitor::analysis::find_cvc5() {
        Ok(_) => true,
        Err(why) => {
            assert!(std::env::var_os("WARDEN_REQUIRE_SOLVER").is_none(), "WARDEN_REQUIRE_SOLVER is set but {why}");
            eprintln!("skipped: {why}");
            false
        }
    }
}

fn wardenctl(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_wardenctl")).args(args).output().unwrap()
}
