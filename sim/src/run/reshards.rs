//! I4 for resharding (P20.2): once the faults are over, every reshard under way ends, and every
//! namespace an operator resharded is brought back to the shard count it started with, so the
//! probes after it run on the layouts they were written for.

use super::*;

/// A namespace whose layout is not yet back where it started: its name, its shard count, the
/// count it started with, and whether a reshard is under way in it.
struct Unsettled {
    namespace: String,
    shard_count: u32,
    original: u32,
    under_way: bool,
}

/// The first namespace with a reshard under way, or with a count other than its first.
fn unsettled_layout(world: &World) -> Option<Unsettled> {
    let state = world.leader_state()?;
    (0..world.scenario.space_count()).find_map(|space| {
        let name = world.scenario.space_name(space);
        let original = match space.checked_sub(1) {
            None => world.scenario.shards,
            Some(index) => world.scenario.namespaces.get(index)?.shards,
        };
        let namespace = state.namespace(name)?;
        let shard_count = namespace.config.shard_count;
        let under_way = namespace.reshard.is_some();
        (under_way || shard_count != original).then(|| Unsettled {
            namespace: name.to_owned(),
            shard_count,
            original,
            under_way,
        })
    })
}

/// Runs until no reshard is under way and every namespace has the count it started with: the
/// operator asks for the split or merge that goes back (again every [`UNDRAIN_EVERY_US`] while
/// none is under way, a request lost with a leader's tail being asked anew) and keeps undoing
/// drains, pins and maintenance, which a merge waits behind. Within [`SETTLE_LIMIT_US`], as the
/// fleet's convergence.
pub(super) fn reshards_complete(world: &mut World) -> Result<(), Violation> {
    let start = world.now_us;
    while let Some(unsettled) = unsettled_layout(world) {
        if world.now_us - start > SETTLE_LIMIT_US {
            return Err(Violation {
                invariant: "liveness",
                detail: format!(
                    "{} is not back at {} shards within {} s after the chaos (now {}, a reshard \
                     under way: {})\n{}",
                    unsettled.namespace,
                    unsettled.original,
                    SETTLE_LIMIT_US / 1_000_000,
                    unsettled.shard_count,
                    unsettled.under_way,
                    world.dump()
                ),
                at_us: world.now_us,
            });
        }
        if world.now_us % UNDRAIN_EVERY_US < POLL_US {
            world.undrain_all();
            if !unsettled.under_way {
                let back = if unsettled.shard_count > unsettled.original {
                    unsettled.shard_count / 2
                } else {
                    unsettled.shard_count.saturating_mul(2)
                };
                world.reshard_to(&unsettled.namespace, back);
            }
        }
        let next = world.now_us + POLL_US;
        world.run_until(next)?;
    }
    Ok(())
}
