//! What makes two model states the same state (stateright deduplicates by `Hash` and `Eq`).

use super::*;

/// Feeds a value's `Debug` text to a hasher without building the string.
///
/// [`LeaseState`] and [`AdmissionCore`] are not `Hash`, and `AdmissionCore` keeps private state
/// that no accessor shows (the revision each shard was gained at, the revision of the last set
/// as distinct from the last delivery, whether admission is recorded as on while the lease has
/// lapsed), all of which shapes what it does next. A projection through the accessors would
/// merge states that behave differently; their derived `Debug` prints every field, including
/// any added later, so two states with the same text behave the same. Every instant in them is
/// [`BASE`] plus whole ticks, so equal times print alike.
fn hash_debug<T: fmt::Debug, H: Hasher>(value: &T, hasher: &mut H) {
    struct Feed<'a, H>(&'a mut H);
    impl<H: Hasher> fmt::Write for Feed<'_, H> {
        fn write_str(&mut self, text: &str) -> fmt::Result {
            self.0.write(text.as_bytes());
            Ok(())
        }
    }
    // Writing to a hasher cannot fail.
    let _ = write!(Feed(hasher), "{value:?}");
}

fn same_debug<T: fmt::Debug>(a: &T, b: &T) -> bool {
    format!("{a:?}") == format!("{b:?}")
}

impl Hash for Process {
    fn hash<H: Hasher>(&self, hasher: &mut H) {
        let Process { core, grant_term } = self;
        hash_debug(core, hasher);
        grant_term.hash(hasher);
    }
}

impl PartialEq for Process {
    fn eq(&self, other: &Self) -> bool {
        self.grant_term == other.grant_term && same_debug(&self.core, &other.core)
    }
}

impl Eq for Process {}

impl Hash for HandoffState {
    fn hash<H: Hasher>(&self, hasher: &mut H) {
        // Destructured so that a new field cannot be left out of the state's identity.
        let HandoffState {
            tick,
            leader,
            lease,
            processes,
            network,
            duplicates_left,
            minted,
            ended,
            seen,
            i2_fault,
            model_fault,
        } = self;
        tick.hash(hasher);
        leader.hash(hasher);
        hash_debug(lease, hasher);
        processes.hash(hasher);
        network.hash(hasher);
        duplicates_left.hash(hasher);
        minted.hash(hasher);
        ended.hash(hasher);
        seen.hash(hasher);
        i2_fault.hash(hasher);
        model_fault.hash(hasher);
    }
}

impl PartialEq for HandoffState {
    fn eq(&self, other: &Self) -> bool {
        let HandoffState {
            tick,
            leader,
            lease,
            processes,
            network,
            duplicates_left,
            minted,
            ended,
            seen,
            i2_fault,
            model_fault,
        } = self;
        *tick == other.tick
            && *leader == other.leader
            && *lease == other.lease
            && *processes == other.processes
            && *network == other.network
            && *duplicates_left == other.duplicates_left
            && *minted == other.minted
            && *ended == other.ended
            && *seen == other.seen
            && *i2_fault == other.i2_fault
            && *model_fault == other.model_fault
    }
}

impl Eq for HandoffState {}
