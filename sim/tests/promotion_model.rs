//! Exhaustive model check of the promotion order among a shard's replicas (P19.3, P19.4) on the
//! real state machine and planners (`leasehold_sim::promotion_model`): no two primaries, a new
//! epoch for every new primary, and no secondary promoted while not ready when a ready one
//! exists (the one ready longest when the primary's holder left).

use leasehold_sim::model_check::check_exhaustively;
use leasehold_sim::promotion_model::PromotionModel;

/// States the model may explore: about 1.5 times what it explored when the cap was set
/// (measured 27 463).
const PROMOTION_STATE_CAP: usize = 41_000;

#[test]
fn p19_3_p19_4_i2_promotion_goes_to_the_ready_secondary_ready_longest() {
    let model = PromotionModel { steps: 10 };
    check_exhaustively("promotion", model, model, PROMOTION_STATE_CAP);
}
