//! Exhaustive model check of leadership confirmation (PROTOCOL P6.5) on the production core
//! (`leasehold_sim::confirmation_model`): a leader answering renewals from memory never lets a
//! lease outlive its deposition, whatever the order of votes, heartbeats and renewals.

use leasehold_sim::confirmation_model::ConfirmationModel;
use leasehold_sim::model_check::check_exhaustively;

/// States the model may explore: about 1.5 times what it explored when the cap was set
/// (`leasehold_sim::model_check` says why).
/// Measured 2 500 506.
const STATE_CAP: usize = 3_750_000;

/// P6.5 with P6.1 and P3.2: one election at any moment, renewals to any manager, every order of
/// delivery and any loss; I1 in every state.
#[test]
fn p6_5_i1_a_deposed_leader_never_extends_a_lease_past_its_successors_grace() {
    let model = ConfirmationModel::standard();
    let bounds = *model.bounds();
    check_exhaustively("confirmation", bounds, model, STATE_CAP);
}
