//! `GET /v1/plan` (PROTOCOL P17.4): the plan the leader would commit next, without committing it.
//! The leader answers with the planner its leader loop runs (`lease::plan_placement`), on its
//! applied state and with the placement inputs its last step published (loads, budget, cooling
//! shards; by count before its first step). Reaping and completing expired handoffs, which a step
//! does before it plans, are not shown. Reads: any role.

use axum::extract::State;
use axum::Json;
use leasehold_api::wire::{PlanPreview, PlannedMove};

use super::params::namespace_named;
use super::{ApiQuery, HttpError};
use crate::handles::cpu_bound;
use crate::lease::{
    plan_placement, rollout_target, Command, LeaseState, Plan, Space, MAX_MOVES_PER_PLAN,
};
use crate::service::views::{space_named, Views};

/// The next plan, not committed.
#[utoipa::path(
    get, path = "/v1/plan", tag = "inspection", operation_id = "plan", params(PlanQuery),
    responses(
        (status = 200, description = "The moves the leader would commit next in the namespace, each with its owner now and why (P17.4); none when nothing would move.", body = PlanPreview),
        (status = 404, description = "`not_found`: no such namespace (P18.1)."),
    ),
)]
pub async fn preview(
    State(views): State<Views>,
    ApiQuery(query): ApiQuery<PlanQuery>,
) -> Result<Json<PlanPreview>, HttpError> {
    let namespace = namespace_named(query.namespace.as_deref())?;
    let now_ms = views.now_ms();
    let inputs = views.placement_inputs(namespace);
    // A plan over a million shards takes a while: off the async workers, on a clone of the
    // state rather than under the lock `apply` waits on.
    cpu_bound::run(|| {
        let state = views.state().current();
        let space = space_named(&state, namespace)?;
        let plan =
            space.and_then(|space| plan_placement(space, now_ms, &inputs, MAX_MOVES_PER_PLAN));
        Ok(Json(preview_of(&state, space, now_ms, plan.as_ref())))
    })
}

/// `GET /v1/plan`'s query; anything else is refused (I6).
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct PlanQuery {
    /// The namespace planned (PROTOCOL P18.1); absent: `default`.
    #[param(
        min_length = 1,
        max_length = 63,
        pattern = r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$"
    )]
    namespace: Option<String>,
}

/// What `plan` (made on the namespace `space` of `state` at `now_ms`) would do, move by move,
/// and whether a rollout holds balance back (P17.3).
fn preview_of(
    state: &LeaseState,
    space: Option<Space<'_>>,
    now_ms: u64,
    plan: Option<&Plan>,
) -> PlanPreview {
    let moves: Vec<PlannedMove> = match plan.map(|plan| (&plan.command, &plan.reasons)) {
        Some((Command::Rebalance { moves, .. }, reasons)) => moves
            .iter()
            .zip(reasons)
            .map(|(step, reason)| PlannedMove {
                shard: step.shard,
                from: space
                    .and_then(|space| space.shard(step.shard))
                    .and_then(|shard| shard.owner.clone()),
                to: step.to.clone(),
                reason: reason.as_str().to_owned(),
            })
            .collect(),
        _ => Vec::new(),
    };
    PlanPreview {
        revision: state.revision(),
        capped: moves.len() >= MAX_MOVES_PER_PLAN,
        moves,
        rollout_to: space
            .and_then(|space| rollout_target(space, now_ms))
            .map(str::to_owned),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::Outcome;
    use leasehold_api::wire::DEFAULT_NAMESPACE;

    fn register(state: &mut LeaseState, index: u64, incarnation: &str) -> String {
        register_version(state, index, incarnation, None)
    }

    fn register_version(
        state: &mut LeaseState,
        index: u64,
        incarnation: &str,
        app_version: Option<&str>,
    ) -> String {
        let Outcome::Registered { grant, .. } = state.apply(
            index,
            &Command::Register {
                follows_generations: false,
                namespace: DEFAULT_NAMESPACE.into(),
                now_ms: 0,
                incarnation: incarnation.into(),
                address: format!("http://{incarnation}:1"),
                name: None,
                credential_sha256: None,
                capacity: 1,
                app_version: app_version.map(str::to_owned),
                labels: Default::default(),
            },
        ) else {
            panic!("registered");
        };
        grant.executor_id
    }

    /// P17.4: the preview is the plan the leader would commit (the same planner, the same
    /// state), each move with its owner now and its reason, and committing nothing.
    #[test]
    fn p17_4_the_preview_is_the_next_plan_move_by_move() {
        let mut state = crate::lease::tests::initialised_state(4, 3_000);
        let first = register(&mut state, 2, "a");
        let inputs = crate::lease::PlacementInputs::by_count();
        let plan = plan_placement(
            state.space(DEFAULT_NAMESPACE).expect("initialised"),
            0,
            &inputs,
            MAX_MOVES_PER_PLAN,
        );
        let preview = preview_of(&state, state.space(DEFAULT_NAMESPACE), 0, plan.as_ref());
        assert_eq!(preview.revision, state.revision());
        assert_eq!(preview.moves.len(), 4, "{preview:?}");
        assert!(preview
            .moves
            .iter()
            .all(|step| step.from.is_none() && step.to == first && step.reason == "join"));
        assert!(!preview.capped);
        let _ = state.apply(3, &plan.unwrap().command);
        let second = register(&mut state, 4, "b");
        let plan = plan_placement(
            state.space(DEFAULT_NAMESPACE).expect("initialised"),
            0,
            &inputs,
            MAX_MOVES_PER_PLAN,
        );
        let preview = preview_of(&state, state.space(DEFAULT_NAMESPACE), 0, plan.as_ref());
        assert_eq!(preview.moves.len(), 2, "{preview:?}");
        assert!(preview.moves.iter().all(|step| {
            step.from.as_deref() == Some(first.as_str())
                && step.to == second
                && step.reason == "join"
        }));
        assert_eq!(
            preview_of(&state, state.space(DEFAULT_NAMESPACE), 0, None).moves,
            Vec::new()
        );
        assert_eq!(preview.rollout_to, None, "no versions stated: no rollout");
    }

    /// P17.3, P17.4: while the versions are mixed the preview names the version the rollout
    /// goes to, and a joiner of the newest version is given nothing yet.
    #[test]
    fn p17_3_the_preview_names_a_rollout_under_way() {
        let mut state = crate::lease::tests::initialised_state(4, 3_000);
        register_version(&mut state, 2, "a", Some("1.0"));
        let inputs = crate::lease::PlacementInputs::by_count();
        let plan = plan_placement(
            state.space(DEFAULT_NAMESPACE).expect("initialised"),
            0,
            &inputs,
            MAX_MOVES_PER_PLAN,
        );
        let _ = state.apply(3, &plan.unwrap().command);
        register_version(&mut state, 4, "b", Some("1.1"));
        let plan = plan_placement(
            state.space(DEFAULT_NAMESPACE).expect("initialised"),
            0,
            &inputs,
            MAX_MOVES_PER_PLAN,
        );
        let preview = preview_of(&state, state.space(DEFAULT_NAMESPACE), 0, plan.as_ref());
        assert_eq!(preview.rollout_to.as_deref(), Some("1.1"));
        assert_eq!(preview.moves, Vec::new(), "the joiner waits");
    }
}
