//! Running a stateright model to its last state, for the model-check tests: every `always`
//! property must hold in every state and every `sometimes` property in some state, or the run
//! fails with the path that shows it; and the states explored must stay under the model's cap.
//!
//! The cap is not a limit of the checker: it is there so a change that makes a model grow (a new
//! field in a core, a bound raised) is noticed and the cap raised on purpose, rather than CI
//! slowly taking longer.

use std::fmt::Debug;
use std::hash::Hash;
use std::time::Instant;

use stateright::{Checker, Model};

/// Explores `model` breadth first to its last state, asserts its properties and its state cap
/// `cap`, and reports the count; `name` and `bounds` say which model in the report.
pub fn check_exhaustively<M>(name: &str, bounds: impl Debug, model: M, cap: usize)
where
    M: Model + Send + Sync + 'static,
    M::State: Hash + Send + Sync + Clone + PartialEq + Debug + 'static,
    M::Action: Debug + Clone + PartialEq,
{
    let started = Instant::now();
    let checker = model.checker().spawn_bfs().join();
    let elapsed = started.elapsed();
    checker.assert_properties();
    let states = checker.unique_state_count();
    eprintln!(
        "{name} model: {states} states explored (cap {cap}), max depth {}, {elapsed:.1?}, properties hold; bounds {bounds:?}",
        checker.max_depth(),
    );
    assert!(
        states <= cap,
        "the {name} model explored {states} states, more than its cap of {cap}: the model grew \
         past its cap; raise the cap deliberately"
    );
}
